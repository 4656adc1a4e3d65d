"""JSON files written whole or not at all, and read back (gzip where the name ends in .gz).

A document is written to a temporary file in the folder it is bound for, flushed to the disk,
then renamed into place (write_atomic: --triton-perf-json, `upgrade`), or hard-linked to a name
no file has yet (link_new: a saved run, `merge -o FILE`; neither writes over a file). A reader
never sees half a file; a failure midway (a value json cannot write, a full disk, a killed
process) leaves the old file as it was, and the temporary is removed. Its name starts with a
dot and ends in .part, so nothing looking for *.json finds it meanwhile.
"""

from __future__ import annotations

import gzip
import json
import os
import secrets
from pathlib import Path


def write_temp(doc, folder: Path | str, stem: str, *, compress: bool = False) -> Path:
    """`doc` as JSON in a new temporary file in `folder` (a dot-name ending in .part), on the
    disk when this returns; the caller moves it into place. A failure removes it."""
    tmp = Path(folder) / f".{stem}-{os.getpid()}-{secrets.token_hex(4)}.part"
    try:
        with open(tmp, "xb") as f:
            f.write(_encode(doc, compress))
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def write_atomic(doc, path: Path | str) -> Path:
    """Write `doc` to `path` as JSON, replacing the file there in one step (gzip where the name
    ends in .gz): a reader sees the old file or the new one, never part of either. A path that
    is a link, or names no regular file (/dev/stdout, a pipe), or beside which no file can be
    made (/dev/fd/N), is written where it leads, as open() would: replacing it would cut the
    link or fail."""
    path = Path(path)
    compress = path.suffix == ".gz"
    if path.is_symlink() or (path.exists() and not path.is_file()):
        return _write_through(doc, path, compress)
    try:
        tmp = write_temp(doc, path.parent, path.name, compress=compress)
    except OSError:
        return _write_through(doc, path, compress)
    try:
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _encode(doc, compress: bool) -> bytes:
    text = json.dumps(doc, indent=1, default=str).encode()
    return gzip.compress(text) if compress else text


def _write_through(doc, path: Path, compress: bool) -> Path:
    data = _encode(doc, compress)  # whole before the target is opened
    with open(path, "wb") as f:
        f.write(data)
    return path


def link_new(tmp: Path, path: Path) -> bool:
    """Give the written temporary `tmp` the name `path` where no file has it yet: False where one
    does (a concurrent writer's, or a file a command must not write over). The caller removes
    `tmp` afterwards."""
    try:
        os.link(tmp, path)  # unlike os.replace, fails where the name is taken
    except FileExistsError:
        return False
    except OSError:  # a filesystem without hard links
        if path.exists():
            return False
        os.replace(tmp, path)
    return True


def read_text(path: Path | str) -> str:
    """The file's text, through gzip where its name ends in .gz (a run kept compressed)."""
    path = Path(path)
    return gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" \
        else path.read_text()
