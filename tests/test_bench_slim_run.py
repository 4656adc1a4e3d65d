"""bench/slim_run.py: what a run's folder keeps before it is committed under bench/runs."""

import importlib.util
import io
import tarfile
from pathlib import Path

SLIM = Path(__file__).resolve().parents[1] / "bench" / "slim_run.py"


def _module():
    spec = importlib.util.spec_from_file_location("slim_run", SLIM)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pack(folder: Path, names: list[str]) -> Path:
    folder.mkdir()
    path = folder / "logs.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            data = name.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


NAMES = ["perf.log", "scaling/scaling-1gpu-r1.log", "history/H200/20261128T2107Z-final-99.json",
         "history/H200/20261128T2108Z-again-98.json", "history/series/series-3.log"]


def _members(path: Path) -> list[str]:
    with tarfile.open(path) as tar:
        return sorted(tar.getnames())


def test_a_run_with_its_own_perf_step_keeps_its_final_record(tmp_path):
    logs = _pack(tmp_path / "run", NAMES)
    (tmp_path / "run" / "perf.json").write_text("{}")
    _module().slim(tmp_path / "run")
    assert (tmp_path / "run" / "perf.json.gz").exists()
    assert _members(logs) == sorted(n for n in NAMES if "-again-" not in n)


def test_a_run_without_a_perf_step_drops_the_record_an_earlier_call_left(tmp_path):
    # a scaling call on a machine the perf call left warm packs that call's record
    logs = _pack(tmp_path / "scaling", NAMES)
    (tmp_path / "scaling" / "scaling.json").write_text("{}")
    _module().slim(tmp_path / "scaling")
    assert _members(logs) == sorted(n for n in NAMES if "history/H200/" not in n)
