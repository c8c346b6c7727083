"""Trainers' own rollout logs as rollout datasets (docs/dumps.md, "Trainers' logs"): ``rladv convert --from
FORMAT SRC...``. Each format maps its fields onto the data contract and says what is absent and what that rules
out; the files are read with polars (``scan_ndjson``), streamed to the output (``AtomicParquetWriter``).

verl-jsonl  verl 0.9.1's ``trainer.rollout_data_dir``: one ``{step}.jsonl`` per step, one line per sample,
            ``input`` (the prompt, decoded), ``output`` (the response, decoded), ``gts``, ``score`` (the row's
            total score), ``step``, and the reward function's extra fields (``RayPPOTrainer._write_generations``).
            ``uid``: the line's ``uid`` when there is one, else its ``input`` (verl samples each prompt ``n`` times
            and decodes it the same way each time). No token lists: rladv computes it at sequence level, one
            position per row (docs/contract.md §1), so outcome estimators only.
"""
from __future__ import annotations

import glob
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa

from ..errors import InputError
from .frames import standard
from .write import AtomicParquetWriter, check_output_path, signals_deferred

FORMATS = ("verl-jsonl",)
CHUNK_ROWS = 65536
SEQUENCE_LEVEL = ("no token lists: rladv computes it at sequence level (one position per row holding its score), "
                  "so outcome estimators only (not gae, the optimal-token baselines, or KL shaping)")


@dataclass
class Imported:
    """What ``convert_log`` wrote: the file, its rows, its columns, where each came from, and what is absent."""

    path: str
    rows: int
    files: int
    columns: list[str]
    sources: dict[str, str] = field(default_factory=dict)
    absent: str = ""


def _files(sources: Sequence[str | os.PathLike], suffix: str) -> list[str]:
    """Files, folders (their ``*suffix`` files) and globs, each folder's or glob's in step order (numeric stems
    first, as ``12.jsonl`` after ``2.jsonl``)."""
    def order(p: str):
        stem = Path(p).stem
        return (0, int(stem), "") if stem.isdigit() else (1, 0, stem)

    found: list[str] = []
    for raw in sources:
        p = os.fspath(raw)
        if os.path.isdir(p):
            hits = sorted((str(q) for q in Path(p).glob(f"*{suffix}") if q.is_file()), key=order)
            if not hits:
                raise InputError(p, f"folder holds no *{suffix} file")
            found += hits
        elif os.path.isfile(p):
            found.append(p)
        elif glob.has_magic(p):
            hits = sorted((q for q in glob.glob(p) if os.path.isfile(q)), key=order)
            if not hits:
                raise InputError(p, "the pattern matches no file")
            found += hits
        else:
            raise InputError(p, "no such file or folder")
    return found


def _check_lines(path: str, required: Sequence[str]) -> None:
    """One pass over a JSONL file in Python, for the first bad line (polars names none): not JSON, not an
    object, or without a required field / with a null one."""
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
            missing = [k for k in required if entry.get(k) is None]
            if missing:
                raise InputError(path, f"line {number}: no {', '.join(missing)} (verl writes "
                                 f"{', '.join(required)} on every line)")
            if not isinstance(entry["score"], (int, float)) or isinstance(entry["score"], bool):
                raise InputError(path, f"line {number}: score is {entry['score']!r}; a number is needed")


def _verl_jsonl(path: str) -> Iterator[tuple[pa.Table, bool]]:
    """One verl rollout JSONL file as Arrow tables: uid (its own, else the prompt), score float32, step int64,
    every other field carried (nested ones as JSON text); with whether the file had a uid."""
    import polars as pl

    try:
        frame = pl.scan_ndjson(path, infer_schema_length=None)
        names = frame.collect_schema().names()
        own = "uid" in names
        uid = pl.col("uid" if own else "input").cast(pl.String)
        kept = [c for c in names if c not in ("uid", "score", "step")]
        query = frame.select(uid.alias("uid"), pl.col("score").cast(pl.Float32), pl.col("step").cast(pl.Int64),
                             *[pl.col(c) for c in kept])
        for df in query.collect_batches(chunk_size=CHUNK_ROWS):
            nested = [pl.col(c).map_elements(json.dumps, return_dtype=pl.String) for c, t in df.schema.items()
                      if t.is_nested()]
            yield standard((df.with_columns(nested) if nested else df).to_arrow()), own
    except pl.exceptions.PolarsError as err:
        raise InputError(path, f"cannot be read as verl's rollout JSONL: {str(err).splitlines()[0]}") from None


def convert_log(fmt: str, sources: Sequence[str | os.PathLike], out: str | os.PathLike) -> Imported:
    """Convert a trainer's log (``fmt``, one of ``FORMATS``) to one Parquet file at ``out``, written atomically:
    files in step order, every line checked first (a bad or truncated line is a one-line error naming its file
    and line), one schema (a file whose fields differ is an error), nothing written on an error."""
    if fmt not in FORMATS:
        raise InputError(fmt, f"not a format rladv reads; choose one of {', '.join(FORMATS)}")
    out = os.fspath(out)
    files = _files(sources, ".jsonl")
    check_output_path(out, files)
    for path in files:
        _check_lines(path, ("input", "score", "step"))
    tables = ((path, table, own) for path in files for table, own in _verl_jsonl(path))
    first = next(tables, None)
    if first is None:
        raise InputError(files[0], "holds no line")
    schema, rows, owns = first[1].schema, 0, set()
    with AtomicParquetWriter(out, schema) as sink:
        for path, table, own in itertools.chain([first], tables):
            if table.schema.names != schema.names:
                raise InputError(path, f"fields {table.schema.names} differ from {files[0]}'s {schema.names}")
            sink.write(table.cast(schema))
            rows, owns = rows + table.num_rows, owns | {own}
        sink.finish()
        with signals_deferred():
            sink.commit()
    uid = "uid" if owns == {True} else "input (the prompt text)" if owns == {False} else "uid, else input"
    return Imported(out, rows, len(files), list(schema.names), {"uid": uid, "score": "score", "step": "step"},
                    SEQUENCE_LEVEL)
