"""The files a dataset's inputs name (docs/compute.md, "Datasets"): paths, folders of ``*.parquet`` and glob
patterns, each folder's and pattern's files sorted; anything but paths refused by its type. rladv's own outputs
that a folder or a pattern finds beside the data (the default ``DATASET.adv.parquet`` of an earlier run, marked
in their metadata) are left out and named, unless they are all it finds; a file named on its own is read."""
from __future__ import annotations

import glob
import os
import stat
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError, InputError
from .write import OUTPUT_MARK


def as_paths(inputs: object) -> list:
    """``inputs`` as a list of paths: one path, or a sequence of them; anything else is refused by its type
    (a frame read as a sequence would give its column names as paths)."""
    if isinstance(inputs, (str, os.PathLike)):
        return [inputs]
    kind = type(inputs).__name__
    if not isinstance(inputs, Sequence) or isinstance(inputs, bytes):
        raise ConfigError(f"the input ({kind}) is not a path or a list of paths (compute, compute_file, "
                          "compare_runs and inspect also take a pyarrow Table or a polars or pandas DataFrame)")
    bad = next((i for i, p in enumerate(inputs) if not isinstance(p, (str, os.PathLike))), None)
    if bad is not None:
        raise ConfigError(f"input {bad} ({type(inputs[bad]).__name__}) is not a path; give paths as str or Path")
    return list(inputs)


def dataset_files(inputs: list) -> tuple[list[Path], list[Path]]:
    """``(files, skipped)``: the files ``inputs`` name, in order, each once, and rladv outputs left out."""
    if not inputs:
        raise InputError("DATASET", "no input given")
    files: list[Path] = []
    skipped: list[Path] = []
    for raw in inputs:
        if not os.fspath(raw):  # Path("") would be the current folder
            raise InputError("''", "an empty path; give a Parquet file, a folder or a glob pattern")
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.glob("*.parquet") if q.is_file())
            if not found:
                raise InputError(str(p), "folder holds no *.parquet file")
        elif p.is_file():
            files.append(p)
            continue
        elif glob.has_magic(str(raw)):
            found = sorted(Path(q) for q in glob.glob(str(raw)) if Path(q).is_file())
            if not found:
                raise InputError(str(p), "the pattern matches no file")
        elif p.exists():
            raise InputError(str(p), f"is {_kind_of(p)}, not a regular file; give a Parquet file or a folder")
        else:
            raise InputError(str(p), "no such file or folder")
        outputs = [q for q in found if is_rladv_output(q)]
        if len(outputs) < len(found):  # beside the data they are left out; on their own they are the data
            skipped += outputs
            found = [q for q in found if q not in outputs]
        files.extend(found)
    seen = set()
    for p in files:
        if p.resolve() in seen:
            raise InputError(str(p), "is given twice; each file of a dataset is read once")
        seen.add(p.resolve())
    return files, skipped


def is_rladv_output(path: Path) -> bool:
    """Whether ``path`` is a Parquet file rladv wrote: its metadata holds ``OUTPUT_MARK`` (an unreadable file is
    not, and fails when it is read as data)."""
    try:
        return OUTPUT_MARK in (pq.read_schema(path).metadata or {})
    except (pa.ArrowException, OSError, ValueError):
        return False


def _kind_of(path: Path) -> str:
    """What a path that is neither a regular file nor a folder is, in words."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return "not readable"
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"
