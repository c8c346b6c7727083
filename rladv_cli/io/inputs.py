"""The files a dataset's inputs name, and the one schema they are read under (docs/compute.md, "The dataset"):
paths, folders of ``*.parquet`` and glob patterns, each folder's and pattern's files sorted; anything but paths
refused by its type. rladv's own outputs that a folder or a pattern finds beside the data (the default
``DATASET.adv.parquet`` of an earlier run, marked in their metadata) are left out and named, unless they are all
it finds; a file named on its own is read. Files whose columns differ only physically (another order, polars'
large strings and lists next to pyarrow's, float next to double) are read as one schema (``unified_schema``)."""
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


def standard_type(t: pa.DataType) -> pa.DataType:
    """``t`` with large and view strings, binaries and lists as the standard ones (32-bit offsets, a list's values
    named ``element``, as pyarrow reads a Parquet file)."""
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return pa.list_(t.value_field.with_type(standard_type(t.value_type)).with_name("element"))
    return t


def unified_schema(paths: Sequence[str], schemas: Sequence[pa.Schema], written) -> pa.Schema:
    """The schema a dataset's files are read under: the first file's columns in its order; where the files' types
    differ, the type that holds each (pyarrow's permissive promotion: int32 and int64 as int64, float and double
    as double, a large string as a string). Other columns, or types that hold nothing in common (text and a
    list), are an error naming both files and the column (``written``: the files' own names of columns)."""
    first = schemas[0]
    for path, schema in zip(paths[1:], schemas[1:]):
        if sorted(schema.names) != sorted(first.names):
            ours, theirs = written(schema.names), written(first.names)
            raise InputError(path, f"columns {ours} differ from {paths[0]}'s {theirs}; all files of a dataset need the "
                             "same columns (in any order)")
    ordered = [pa.schema([s.field(n) for n in first.names], metadata=first.metadata) for s in schemas]
    if all(s.equals(first) for s in ordered):
        return first
    standard = [pa.schema([f.with_type(standard_type(f.type)) for f in s], metadata=first.metadata) for s in ordered]
    for path, schema in zip(paths[1:], standard[1:]):
        for field in schema:
            try:
                pa.unify_schemas([pa.schema([standard[0].field(field.name)]), pa.schema([field])],
                                 promote_options="permissive")
            except (pa.ArrowException, ValueError):
                raise InputError(path, f"type {field.type} holds nothing in common with {paths[0]}'s "
                                 f"{standard[0].field(field.name).type}",
                                 column=written([field.name])[0]) from None
    unified = pa.unify_schemas(standard, promote_options="permissive")
    return pa.schema([f.with_type(standard_type(f.type)) for f in unified], metadata=first.metadata)


def conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` (a file's columns, some of ``schema``'s) in ``schema``'s order and types."""
    names = [n for n in schema.names if n in table.column_names]
    return table.select(names).cast(pa.schema([schema.field(n) for n in names]))
