"""A release users can install from the README alone (issue 20): the wheel's contents and
metadata, the README's install commands and CI recipe (which .ci/run runs verbatim, outside the
checkout), the torch story, and no message naming an install command that cannot work."""

from __future__ import annotations

import email
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

import pytest_triton

ROOT = pathlib.Path(__file__).resolve().parents[1]
WHEEL = f"pytest_triton-{pytest_triton.__version__}-py3-none-any.whl"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _readme_tool():
    spec = importlib.util.spec_from_file_location("ci_readme", ROOT / ".ci" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


README = (ROOT / "README.md").read_text()
ci = _readme_tool()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built from a copy of the release's files (what python -m build packs)."""
    try:
        import setuptools
    except ImportError:
        pytest.skip("setuptools is not installed")
    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"building needs setuptools >= 77 (the license expression), not {setuptools.__version__}")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for pkg in ("pytest_triton", "reference_kernels"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(out), str(src)], check=True, capture_output=True)
    (path,) = out.glob("*.whl")
    return path


def test_the_wheel_holds_every_module_the_entry_point_and_complete_metadata(wheel):
    assert wheel.name == WHEEL  # the name the README's install commands use
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_string(z.read(f"pytest_triton-{pytest_triton.__version__}"
                                                ".dist-info/METADATA").decode())
        entry_points = z.read(f"pytest_triton-{pytest_triton.__version__}.dist-info/"
                              "entry_points.txt").decode()
    for pkg in ("pytest_triton", "reference_kernels"):
        for path in (ROOT / pkg).rglob("*.py"):
            assert path.relative_to(ROOT).as_posix() in names, f"{path} is not in the wheel"
    # The plugin's own tests stay out of the wheel. reference_kernels/tests ship in it: they are
    # the bundled kernels' suite, which `pytest --pyargs reference_kernels --triton-perf` (the GPU
    # job, on machines that install the wheel and have no checkout) and .ci/run's
    # `--pyargs reference_kernels.tests.test_vector_add` run from the installed package.
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/"))]
    assert not [n for n in names if n.startswith("pytest_triton/")
                and n.rsplit("/", 1)[-1].startswith(("test_", "conftest"))]
    assert "reference_kernels/tests/test_vector_add.py" in names
    assert "[pytest11]\ntriton = pytest_triton.plugin" in entry_points
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert meta["Name"] == "pytest-triton" and meta["Version"] == pytest_triton.__version__
    assert meta["License-Expression"] == "MIT"
    assert meta["Requires-Python"] == ">=3.10"
    classifiers = meta.get_all("Classifier")
    assert "Framework :: Pytest" in classifiers
    assert "Topic :: Software Development :: Testing" in classifiers
    assert set(meta.get_all("Provides-Extra")) >= {"test", "gpu", "plot"}
    requires = meta.get_all("Requires-Dist")
    for dep in ("pytest>=8.0", "torch>=2.4", "triton>=3.2", "pytest-benchmark>=5.0", "numpy",
                'pytest-xdist>=3.0; extra == "test"', 'nvidia-ml-py>=12.0; extra == "gpu"',
                'matplotlib; extra == "plot"'):
        assert dep in requires, (dep, requires)
    assert meta.get_payload().startswith("# pytest-triton")  # the README is the description


def test_the_recipe_installs_the_plugin_in_both_jobs_from_the_wheel_it_names():
    cpu, gpu = ci.job(README, "cpu"), ci.job(README, "gpu")
    # The GPU job's `pip install --no-deps -e .` never installed the plugin (unrecognized
    # arguments: --triton-perf); the CPU job's `-n auto` needs pytest-xdist (the test extra).
    assert any(f'"./wheels/{WHEEL}[test]"' in step for step in cpu)
    assert any(f'"./wheels/{WHEEL}[gpu]"' in step for step in gpu)
    assert any(re.search(r"-m pytest .*-n auto", step) for step in cpu)
    assert any("--triton-perf" in step for step in gpu)
    # the GPU job keeps the runner's torch: the install takes the pins the step before wrote
    assert "> runner-torch.txt" in gpu[0] and "-c runner-torch.txt" in gpu[1]
    # every wheel the README installs is this version's
    named = set(re.findall(r"pytest_triton-[\w.]+-py3-none-any\.whl", README))
    assert named == {WHEEL}, named


def test_the_recipe_as_yaml_has_the_steps_ci_runs():
    yaml = pytest.importorskip("yaml")
    recipe = re.search(r"```yaml\n(.*?)```", README.split("## Use it in your kernel project")[1],
                       re.S).group(1)
    jobs = yaml.safe_load(recipe)["jobs"]
    for name in ("cpu", "gpu"):
        runs = [s["run"] for s in jobs[name]["steps"] if "run" in s and s["run"] != "nvidia-smi"]
        assert runs == ci.job(README, name)


def test_ci_runs_the_readme_set_up_and_test_commands_and_the_recipe():
    run = (ROOT / ".ci" / "run").read_text()
    for call in ("python .ci/readme.py setup", "python .ci/readme.py job cpu",
                 "python .ci/readme.py job gpu", "python .ci/readme.py first-test",
                 "pyproject-build"):
        assert call in run, call
    setup = ci.setup(README)
    # the README's test command: the whole suite, across the cores (5 minutes or less on 2, which
    # .ci/run prints)
    assert setup[-1] == "python -m pytest -n auto"
    assert 'timed_test "$(tail -n 1 "$work/setup.sh")"' in run
    assert ci.first_test(README).startswith("import torch")


def test_the_torch_story_is_told_once_and_right():
    # torch==2.13.0 alone took the CPU build only because pip found a local CPU wheel on one
    # machine; from PyPI it is the CUDA build on Linux x86-64.
    cpu_torch = f"python -m pip install torch==2.13.0 --index-url {CPU_INDEX}"
    assert ci.setup(README)[0] == cpu_torch
    assert ci.job(README, "cpu")[0] == cpu_torch
    blocks = "\n".join(re.findall(r"```(?:bash|yaml)\n(.*?)```", README, re.S))
    installs = [line for line in blocks.splitlines() if "pip install" in line and "torch==" in line]
    assert installs and all(CPU_INDEX in line for line in installs), installs
    assert "takes the CPU build" not in README
    tox = (ROOT / "tox.ini").read_text()
    cpu_env = tox.split("[testenv:cpu]", 1)[1].split("\n[", 1)[0]
    assert f"PIP_EXTRA_INDEX_URL = {CPU_INDEX}" in cpu_env and "torch==2.13.0" in cpu_env
    gpu_env = tox.split("[testenv:gpu]", 1)[1].split("\n[", 1)[0]
    assert "system_site_packages = true" in gpu_env and "--no-deps" in gpu_env


def test_no_message_names_an_install_command_that_cannot_work():
    # pytest-triton is on no package index: "pip install 'pytest-triton[plot]'" cannot work.
    bad = re.compile(r"pip install ['\"]?pytest-triton\b")
    for path in (ROOT / "pytest_triton").rglob("*.py"):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            assert not bad.search(line) and "pytest-triton[" not in line, f"{path}:{i}: {line}"
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        prose = " ".join(doc.read_text().split())  # commands wrapped across lines too
        found = [prose[max(m.start() - 60, 0):m.end() + 20] for m in bad.finditer(prose)]
        assert not found, (doc.name, found)


def test_every_build_command_a_reader_is_given_comes_after_installing_build():
    # "python -m build" without "pip install build" fails on a fresh machine, and after a
    # "pip wheel" in a checkout (it leaves build/) it fails even with it installed: "No module
    # named build.__main__". The commands shown are pyproject-build, after pip install build.
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        blocks = "\n".join(re.findall(r"```(?:bash|yaml)\n(.*?)```", doc.read_text(), re.S))
        lines = blocks.splitlines()
        for i, line in enumerate(lines):
            if re.search(r"python -m build\b", line):
                raise AssertionError(f"{doc.name}: {line!r}: shadowed by a build/ folder; show "
                                     "pyproject-build")
            if "pyproject-build" in line:
                assert any(re.search(r"pip install .*\bbuild\b", x) for x in lines[:i]), \
                    f"{doc.name}: {line!r} without pip install build before it"


def test_ci_run_lines_passes_a_failed_lines_status_to_its_caller(tmp_path):
    # .ci/run reads the gpu job's pytest exit status (1: targets UNCHECKED without a GPU) through
    # run_lines: a wall-time line printed after each command once made every status 0
    func = re.search(r"^run_lines\(\) \{.*?^\}", (ROOT / ".ci" / "run").read_text(), re.M | re.S)
    lines = tmp_path / "lines"
    lines.write_text("true\nexit 3\necho never\n")
    script = f"{func.group(0)}\nset +e\nrun_lines {lines}\necho rc=$?\n"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == "rc=3", done.stdout
    assert "never" not in done.stdout.replace("echo never", "")
