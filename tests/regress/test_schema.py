"""The saved documents' schema version (regress/schema.py) and their atomic writes
(regress/jsonfile.py): an older file is read through its upgrade and `upgrade` rewrites it in
place; a newer one is refused naming the file and both versions; a write that fails midway
leaves the file it would have replaced as it was, where a plain write (the negative control)
leaves half a file."""

import gzip
import json
import re
import types
from pathlib import Path

import pytest

from pytest_triton.regress import jsonfile, schema, storage
from pytest_triton.regress.cli import main as cli
from pytest_triton.regress.storage import HistoryError

from ._docs import H100, report, run, small


def _version_1(doc: dict) -> dict:
    """`doc` as a file written before the version was an integer: one string says both."""
    rest = {k: v for k, v in doc.items() if k not in ("schema", "schema_version")}
    return {"schema": f"{doc['schema']}/1", **rest}


def test_the_bundled_reports_are_of_version_1_and_load_through_the_upgrade():
    # the real GPU runs' reports in tests/data were written by an older commit
    raw = json.loads(gzip.decompress(H100.read_bytes()))
    assert raw["schema"] == "pytest-triton-perf/1" and "schema_version" not in raw
    upgraded, found = schema.upgrade(raw, str(H100))
    assert found == 1 and (upgraded["schema"], upgraded["schema_version"]) == (
        schema.REPORT, schema.VERSION)
    assert {k: v for k, v in upgraded.items() if k not in ("schema", "schema_version")} == {
        k: v for k, v in raw.items() if k != "schema"}
    assert len(storage.load(H100, allow_report=True).records) == 75


def test_a_version_1_saved_run_loads_and_is_written_back_at_this_version(tmp_path):
    doc = run(report(H100))
    old = tmp_path / "old.json"
    old.write_text(json.dumps(_version_1(doc)))
    saved = storage.load(old)
    assert (saved.name, saved.commit, len(saved.records)) == ("main", "a" * 40, 75)
    assert saved.to_document() == doc  # the same document, at this version
    # saving what was read (or the old document itself) writes this version
    again = storage.load(storage.save(_version_1(doc), tmp_path / "hist"))
    assert json.loads(again.path.read_text())["schema_version"] == schema.VERSION


def test_fields_a_reader_does_not_know_are_kept(tmp_path):
    doc = {**small(None), "from_the_future": {"x": 1}}
    saved = storage.load(storage.save(doc, tmp_path))
    assert saved.rest["from_the_future"] == {"x": 1}
    assert saved.to_document()["from_the_future"] == {"x": 1}


def test_a_newer_version_is_refused_naming_the_file_and_both_versions(tmp_path):
    path = tmp_path / "H100-SXM-e53cef81" / "newer.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**small(None), "schema_version": schema.VERSION + 1}))
    with pytest.raises(HistoryError, match=rf"^{re.escape(str(path))}: written by pytest-triton "
                       rf"history schema version {schema.VERSION + 1}; this version reads "
                       rf"{schema.VERSION} and older"):
        storage.load(path)
    # nor saved again: what it holds cannot be known to be read right
    with pytest.raises(HistoryError, match=r"^<document>: written by pytest-triton history "
                       rf"schema version {schema.VERSION + 1}"):
        storage.save(json.loads(path.read_text()), tmp_path / "hist")
    assert not (tmp_path / "hist").exists()


def test_upgrade_rewrites_older_files_in_place_and_leaves_current_ones(tmp_path, capsys):
    folder = tmp_path / "hist" / "no-device"
    folder.mkdir(parents=True)
    old, current = folder / "old.json", folder / "current.json"
    old.write_text(json.dumps(_version_1(small(None, name="a"))))
    current.write_text(json.dumps(small(None, name="b")))
    before = current.stat().st_mtime_ns, current.read_text()
    assert cli(["upgrade", str(tmp_path / "hist")]) == 0
    out = capsys.readouterr().out
    assert f"old.json: schema version 1 -> {schema.VERSION}" in out
    assert f"1 of 2 files upgraded to schema version {schema.VERSION}" in out
    assert json.loads(old.read_text()) == small(None, name="a")
    assert (current.stat().st_mtime_ns, current.read_text()) == before
    assert sorted(p.name for p in folder.iterdir()) == ["current.json", "old.json"]  # no .part
    assert cli(["upgrade", str(tmp_path / "hist")]) == 0  # a second pass has nothing to do
    assert "0 of 2 files upgraded" in capsys.readouterr().out


def test_upgrade_stops_at_a_newer_file_before_rewriting_any(tmp_path, capsys):
    old, newer = tmp_path / "a-old.json", tmp_path / "b-newer.json"
    old.write_text(json.dumps(_version_1(small(None))))
    newer.write_text(json.dumps({**small(None), "schema_version": schema.VERSION + 1}))
    written = old.read_text()
    with pytest.raises(SystemExit) as stop:
        cli(["upgrade", str(tmp_path)])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"{newer}: written by pytest-triton history schema version {schema.VERSION + 1}" in err
    assert old.read_text() == written  # nothing changed


def test_upgrade_keeps_a_compressed_file_compressed(tmp_path):
    path = tmp_path / "run.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_version_1(small(None))).encode()))
    assert cli(["upgrade", str(path)]) == 0
    assert json.loads(gzip.decompress(path.read_bytes())) == small(None)


class _Unprintable:
    """A value json can only write through str(), which fails: a serialisation that stops
    midway, after the keys before it."""

    def __str__(self):
        raise RuntimeError("cannot be written")


def test_a_write_that_fails_midway_leaves_the_old_file_whole(tmp_path):
    path = tmp_path / "report.json"
    path.write_text('{"old": true}')
    doc = {"first": list(range(1000)), "bad": _Unprintable()}
    with pytest.raises(RuntimeError, match="cannot be written"):
        jsonfile.write_atomic(doc, path)
    assert path.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temporary left


def test_the_negative_control_a_plain_write_leaves_half_a_file(tmp_path):
    # what --triton-perf-json did before its write went through jsonfile: the same failure
    # leaves a file that is no longer the old one and is not JSON
    path = tmp_path / "report.json"
    path.write_text('{"old": true}')
    with pytest.raises(RuntimeError), open(path, "w") as f:
        json.dump({"first": list(range(1000)), "bad": _Unprintable()}, f, indent=1, default=str)
    with pytest.raises(ValueError):
        json.loads(path.read_text())


def test_the_perf_json_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    # --triton-perf-json's write (report/summary.write_json) goes through the same atomic write
    from pytest_triton.report import summary

    path = tmp_path / "perf.json"
    path.write_text('{"old": true}')
    monkeypatch.setattr(summary, "session", lambda config: types.SimpleNamespace(json_path=path))
    monkeypatch.setattr(summary, "document", lambda config: {"bad": _Unprintable()})
    with pytest.raises(RuntimeError, match="cannot be written"):
        summary.write_json(None)
    assert path.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["perf.json"]
    monkeypatch.setattr(summary, "document", lambda config: {"new": True})
    summary.write_json(None)
    assert json.loads(path.read_text()) == {"new": True}


def test_a_link_or_a_device_is_written_where_it_leads(tmp_path):
    """--triton-perf-json /dev/stdout, or a link to a file kept elsewhere: written through, as
    open() writes (a replace would cut the link, or fail beside /dev/fd/N)."""
    target = tmp_path / "kept" / "perf.json"
    target.parent.mkdir()
    target.write_text("{}")
    link = tmp_path / "perf.json"
    link.symlink_to(target)
    jsonfile.write_atomic({"a": 1}, link)
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}
    jsonfile.write_atomic({"a": 1}, "/dev/null")  # not a regular file: written, not replaced
    assert not Path("/dev/null").is_file()


def test_a_regular_file_is_still_replaced_whole(tmp_path):
    """The negative control of the above: a plain file gets a new inode (replaced, not written
    through), so a reader holding the old one never sees it half written."""
    path = tmp_path / "perf.json"
    path.write_text("{}")
    before = path.stat().st_ino
    jsonfile.write_atomic({"a": 1}, path)
    assert path.stat().st_ino != before and json.loads(path.read_text()) == {"a": 1}
