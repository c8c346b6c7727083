"""What every importer shares (docs/dumps.md, "Trainers' logs"): a format's declaration, finding its files in
folders and globs in step order, the line-by-line check of a JSONL file, and small value helpers."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import pyarrow as pa

from ...errors import InputError

CHUNK_ROWS = 65536
TOKEN_CHUNK_ROWS = 1024  # token-level formats: a row holds its token lists
SEQUENCE_LEVEL = ("no token lists: rladv computes it at sequence level (one position per row holding its score), "
                  "so outcome estimators only (not gae, the optimal-token baselines, or KL shaping)")


@dataclass(frozen=True)
class Options:
    """What a format may need beyond its files: ``trust_pickle`` (slime's ``torch.save`` files), ``reward_key``
    (slime's dict rewards, its ``--reward-key``), and ``found``, what the format's check of every file found
    (verl's: each field's JSON type across the files)."""

    trust_pickle: bool = False
    reward_key: Optional[str] = None
    found: object = None


@dataclass
class Imported:
    """What ``convert_log`` wrote: the file, its rows, its columns, where each came from, and what is absent."""

    path: str
    rows: int
    files: int
    columns: list[str]
    sources: dict[str, str] = field(default_factory=dict)
    absent: str = ""


@dataclass(frozen=True)
class Format:
    """One trainer's log: ``find(folder)`` its files in a folder, ``order`` their step order, ``check(files)`` a
    pass over every file before anything is written (a bad line raises; what it returns reaches ``read`` as
    ``Options.found``), ``read(path, options)`` Arrow tables of contract rows, each with a note for
    ``describe(files, notes, options) -> (sources, absent)``."""

    name: str
    find: Callable[[Path], list[str]]
    order: Callable[[str], tuple]
    read: Callable[[str, Options], Iterator[tuple[pa.Table, object]]]
    describe: Callable[[list[str], set, Options], tuple[dict[str, str], str]]
    check: Optional[Callable[[list[str]], object]] = None
    what: str = ""  # the files a folder is read for, for "folder holds no ..."


def numeric(name: str) -> tuple:
    """A sort key putting numeric names first, as numbers (``12`` after ``2``), then the others by name."""
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def numbered(pattern: str) -> Callable[[str], tuple]:
    """A step order by the number ``pattern`` (one group) finds in a file's stem: matching names first, by
    their number (``train_data_step10`` after ``train_data_step2``), then the others by name."""
    found = re.compile(pattern)

    def order(p: str):
        hit = found.fullmatch(Path(p).stem)
        return (0, int(hit.group(1)), "") if hit else (1, 0, Path(p).stem)

    return order


def globbed(pattern: str) -> Callable[[Path], list[str]]:
    """A folder's files matching ``pattern``."""
    return lambda folder: [str(q) for q in folder.glob(pattern) if q.is_file()]


def files_of(fmt: Format, sources: Sequence[str | os.PathLike]) -> list[str]:
    """Files, folders (``fmt.find``) and globs, each folder's or glob's in step order (``fmt.order``)."""
    found: list[str] = []
    for raw in sources:
        p = os.fspath(raw)
        if os.path.isdir(p):
            hits = sorted(fmt.find(Path(p)), key=fmt.order)
            if not hits:
                raise InputError(p, f"folder holds no {fmt.what} file")
            found += hits
        elif os.path.isfile(p):
            found.append(p)
        elif glob.has_magic(p):
            hits = sorted((q for q in glob.glob(p) if os.path.isfile(q)), key=fmt.order)
            if not hits:
                raise InputError(p, "the pattern matches no file")
            found += hits
        else:
            raise InputError(p, "no such file or folder")
    return found


def json_lines(path: str) -> Iterator[tuple[int, dict]]:
    """A JSONL file's objects with their line numbers (blank lines skipped); a line that is not JSON (a
    truncated last line says so) or not an object is a one-line error naming the file and line."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError as err:
                cut = "" if line.endswith(b"\n") else " (the file ends inside it: truncated?)"
                raise InputError(path, f"line {number}: not JSON{cut}: {err}") from None
            if not isinstance(entry, dict):
                raise InputError(path, f"line {number}: not a JSON object")
            yield number, entry


def each_file(check: Callable[[str], None]) -> Callable[[list[str]], None]:
    """A format's ``check`` of every file from a check of one."""
    def check_all(files: list[str]) -> None:
        for path in files:
            check(path)

    return check_all


def check_lines(path: str, required: Sequence[str], writer: str = "verl", check=None) -> None:
    """One pass over a JSONL file in Python, for the first bad line (polars names none): not JSON, not an
    object, or without a required field / with a null one; then ``check(entry)``, the format's own rules (a
    message, or None for a good line)."""
    for number, entry in json_lines(path):
        missing = [k for k in required if entry.get(k) is None]
        if missing:
            raise InputError(path, f"line {number}: no {', '.join(missing)} ({writer} writes "
                             f"{', '.join(required)} on every line)")
        problem = check(entry) if check is not None else None
        if problem:
            raise InputError(path, f"line {number}: {problem}")


def number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def json_text(values: list) -> list:
    return [None if v is None else json.dumps(v, default=str) for v in values]


def digest(text: str) -> str:
    """The BLAKE2b-128 hex digest of ``text``: the uid of a prompt given as text."""
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def nested_as_json(table: pa.Table, keep: Sequence[str] = ()) -> pa.Table:
    """``table`` with every nested column but ``keep`` (the token lists) as JSON text."""
    for i, (name, t) in enumerate(zip(table.column_names, table.schema.types)):
        if name not in keep and pa.types.is_nested(t):
            table = table.set_column(i, name, pa.array(json_text(table[name].to_pylist()), pa.string()))
    return table
