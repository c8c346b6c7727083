"""Text-only logs, read as sequence-level rows (one position per row holding its score, docs/contract.md §1):
verl's rollout JSONL, TRL's completion Parquet and AReaL's trajectory dump (docs/dumps.md, "Trainers' logs")."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from ...errors import InputError
from ..frames import standard
from .common import (CHUNK_ROWS, SEQUENCE_LEVEL, Format, Options, check_lines, digest, each_file, globbed, integer, number,
                     numbered, numeric)


# ------------------------------------------------------------------------------------------------ verl
# A line's fields by JSON type, and the polars type each is read as (nested values as JSON text).
KINDS = ((bool, "true/false", "Boolean"), (int, "an integer", "Int64"), (float, "a number", "Float64"),
         (str, "text", "String"), (list, "a list", "String"), (dict, "an object", "String"))


def _kind(value) -> str:
    return next(name for t, name, _ in KINDS if isinstance(value, t))


def _verl_fields(files: list[str]) -> dict[str, str | None]:
    """Every field of verl's rollout JSONL files with its JSON type (None: always null), each line checked: the
    fields verl writes, a number ``score``, an integer ``step``, and every field of one type through the files
    (integers and fractions are numbers). A bad line is an error naming it, as polars' reader would not."""
    kinds: dict[str, tuple[str | None, str]] = {}  # name -> (type, the file that first held it)

    def line(entry: dict) -> str | None:
        if not number(entry["score"]):
            return f"score is {entry['score']!r}; a number is needed"
        if not integer(entry["step"]):
            return f"step is {entry['step']!r}; verl writes the training step, an integer"
        for name, value in entry.items():
            kind = None if value is None else _kind(value)
            had, seen = kinds.setdefault(name, (None, path))
            if kind is None or kind == had:
                continue
            if had is None:
                kinds[name] = (kind, path)
            elif {had, kind} == {"an integer", "a number"}:
                kinds[name] = ("a number", seen)
            else:
                held = "the lines before hold" if seen == path else f"{seen} holds"
                return f"{name} is {kind} where {held} {had}; a field keeps one JSON type through the log"
        return None

    for path in files:  # line() checks the lines of this file
        check_lines(path, ("input", "score", "step"), "verl", line)
    return {name: kind for name, (kind, _) in kinds.items()}


def _verl_read(path: str, options: Options) -> Iterator[tuple[pa.Table, bool]]:
    """One verl rollout JSONL file as Arrow tables: uid (its own, else the prompt), score float32, step int64,
    every other field of the log carried in the type its values have (``Options.found``: nested ones as JSON
    text; null where this file lacks it); with whether the file had a uid."""
    import polars as pl

    types = {name: getattr(pl, t) for _, name, t in KINDS}
    kinds: dict = options.found
    try:
        frame = pl.scan_ndjson(path, schema={n: pl.Null if k is None else types[k] for n, k in kinds.items()})
        own = "uid" in kinds
        uid = pl.col("uid" if own else "input").cast(pl.String)
        kept = [c for c in kinds if c not in ("uid", "score", "step")]
        query = frame.select(uid.alias("uid"), pl.col("score").cast(pl.Float32), pl.col("step").cast(pl.Int64),
                             *[pl.col(c) for c in kept])
        for df in query.collect_batches(chunk_size=CHUNK_ROWS):
            yield standard(df.to_arrow()), own
    except pl.exceptions.PolarsError as err:
        raise InputError(path, f"cannot be read as verl's rollout JSONL: {str(err).splitlines()[0]}") from None


def _verl_describe(files: list[str], owns: set, options: Options) -> tuple[dict[str, str], str]:
    uid = "uid" if owns == {True} else "input (the prompt text)" if owns == {False} else "uid, else input"
    return {"uid": uid, "score": "score", "step": "step"}, SEQUENCE_LEVEL


def _step_order(p: str):
    """verl: numeric stems first, as ``12.jsonl`` after ``2.jsonl``."""
    return numeric(Path(p).stem)


VERL = Format("verl-jsonl", globbed("*.jsonl"), _step_order, _verl_read, _verl_describe, _verl_fields, "*.jsonl")


# ------------------------------------------------------------------------------------------------ trl
def trl_rewards(schema, names: list[str]) -> list[str]:
    """TRL's reward columns: the number columns its table puts between ``completion`` and ``advantage``."""
    between = names[names.index("completion") + 1:names.index("advantage")]
    return [c for c in between if schema[c].is_numeric()]


def _trl_read(path: str, options: Options) -> Iterator[tuple[pa.Table, bool]]:
    """One TRL ``completions_{step}.parquet`` as an Arrow table of sequence-level contract rows (see the package
    docstring), the file's other columns carried (prompt and completion as text, chat messages as JSON)."""
    import polars as pl

    try:
        frame = pl.read_parquet(path)
    except (pl.exceptions.PolarsError, OSError) as err:
        raise InputError(path, f"cannot be read as TRL's completions Parquet: {str(err).splitlines()[0]}") from None
    names = frame.columns
    missing = [c for c in ("step", "prompt", "completion", "advantage") if c not in names]
    if missing:
        raise InputError(path, f"has no {', '.join(missing)} (TRL's GRPOTrainer.log writes step, prompt, completion, "
                         "its reward columns and advantage)")
    rewards = trl_rewards(frame.schema, names)
    if not rewards:
        raise InputError(path, "has no number column between completion and advantage: no reward function's")
    # a completion whose every reward is missing is TRL's unscorable one: its score is null (docs/dumps.md)
    scorable = pl.any_horizontal([pl.col(c).cast(pl.Float64).fill_nan(None).is_not_null() for c in rewards])
    score = pl.when(scorable).then(pl.sum_horizontal([pl.col(c).cast(pl.Float64).fill_nan(None) for c in rewards]))
    text = {c: (pl.col(c).map_elements(json.dumps, return_dtype=pl.String) if frame.schema[c].is_nested()
                else pl.col(c).cast(pl.String)) for c in ("prompt", "completion")}
    out = frame.select(
        text["prompt"].alias("__prompt"), pl.col("step").cast(pl.Int64), score.cast(pl.Float32).alias("score"),
        pl.concat_list(pl.col("advantage").cast(pl.Float32)).alias("advantages"),
        text["prompt"].alias("prompt"), text["completion"].alias("completion"),
        *[pl.col(c) for c in names if c not in ("step", "prompt", "completion", "advantage")])
    table = out.drop("__prompt").to_arrow()
    keys = pa.array([digest(p) for p in out["__prompt"].to_list()], pa.string())
    yield standard(table.add_column(0, "uid", keys)), True


def _trl_describe(files: list[str], notes: set, options: Options) -> tuple[dict[str, str], str]:
    import polars as pl

    first = pl.read_parquet_schema(files[0])
    rewards = trl_rewards(first, list(first))
    return ({"uid": "prompt (a BLAKE2b digest of its text)", "step": "step", "advantages": "[advantage]",
             "score": f"the sum of {', '.join(rewards)} (NaN left out; TRL's reward with weights 1)"},
            SEQUENCE_LEVEL + "; TRL's advantages are replayed against rladv's: compute --convention trl "
            "--estimator grpo --group-size N --batch-key step")


TRL = Format("trl", globbed("completions_*.parquet"), numbered(r"completions_(\d+)"), _trl_read, _trl_describe,
             None, "completions_*.parquet")


# ------------------------------------------------------------------------------------------------ areal
AREAL_REQUIRED = ("task_id", "sample_idx", "seqlen", "prompt_len", "head_version", "tail_version", "reward",
                  "prompt", "completion")
AREAL_INTEGERS = ("task_id", "sample_idx", "seqlen", "prompt_len", "head_version", "tail_version")
# AReaL writes only samples with a completion token (seqlen >= 1, prompt_len < seqlen); head_version is the least
# of the tokens' versions, which is -1 on prompt tokens
AREAL_LEAST = {"head_version": -1, "seqlen": 1}


def _areal_line(entry: dict) -> str | None:
    for name in AREAL_INTEGERS:
        if not integer(entry[name]):
            return f"{name} is {entry[name]!r}; AReaL writes an integer"
        if entry[name] < AREAL_LEAST.get(name, 0):
            return f"{name} is {entry[name]}; AReaL writes at least {AREAL_LEAST.get(name, 0)}"
    if entry["prompt_len"] >= entry["seqlen"]:
        return (f"prompt_len {entry['prompt_len']} leaves no completion token of seqlen {entry['seqlen']} (AReaL "
                "dumps only samples with one)")
    if not number(entry["reward"]):
        return f"reward is {entry['reward']!r}; a number is needed"
    for name in ("prompt", "completion"):
        if not isinstance(entry[name], str):
            return f"{name} is not text (AReaL writes the decoded tokens)"
    return None


def _areal_check(path: str) -> None:
    check_lines(path, AREAL_REQUIRED, "AReaL's WorkflowExecutor._dump_trajectory", _areal_line)


def _areal_read(path: str, options: Options) -> Iterator[tuple[pa.Table, None]]:
    """One AReaL ``{version}/{task_id}.jsonl`` as sequence-level contract rows: uid a digest of (tail_version,
    task_id, prompt), step the tail_version, score the reward; the other fields carried."""
    import polars as pl

    fields = {"task_id": pl.Int64, "sample_idx": pl.Int64, "seqlen": pl.Int64, "prompt_len": pl.Int64,
              "head_version": pl.Int64, "tail_version": pl.Int64, "reward": pl.Float64, "prompt": pl.String,
              "completion": pl.String}
    try:
        df = pl.read_ndjson(path, schema=fields)
    except pl.exceptions.PolarsError as err:
        raise InputError(path, f"cannot be read as AReaL's trajectory JSONL: {str(err).splitlines()[0]}") from None
    keys = [digest(f"{v}\0{t}\0{p}") for v, t, p in zip(df["tail_version"], df["task_id"], df["prompt"])]
    out = df.select(pl.Series("uid", keys, pl.String), pl.col("tail_version").alias("step"),
                    pl.col("reward").cast(pl.Float32).alias("score"), *[pl.col(c) for c in fields])
    yield standard(out.to_arrow()), None


def _areal_find(folder: Path) -> list[str]:
    """A folder's trajectory files: ``rollout/{version}/*.jsonl`` in the experiment's log folder (not its
    ``eval-rollout/``), else ``{version}/*.jsonl`` (the ``rollout/`` folder), else its ``*.jsonl`` (one
    version's folder)."""
    for pattern in ("rollout/*/*.jsonl", "*/*.jsonl", "*.jsonl"):
        found = [str(q) for q in folder.glob(pattern) if q.is_file() and (pattern == "*.jsonl" or
                                                                           q.parent.name.isdigit())]
        if found:
            return found
    return []


def _areal_order(p: str):
    """By version folder, then task id: ``rollout/2/7.jsonl`` before ``rollout/10/3.jsonl``."""
    return numeric(Path(p).parent.name) + numeric(Path(p).stem)


def _areal_describe(files: list[str], notes: set, options: Options) -> tuple[dict[str, str], str]:
    return ({"uid": "task_id (a BLAKE2b digest of tail_version, task_id and the prompt text: one task is one "
                    "prompt's group)", "score": "reward", "step": "tail_version (the version folder)"},
            SEQUENCE_LEVEL + "; the dump holds no advantages and no log-probs, so there is nothing to replay")


AREAL = Format("areal", _areal_find, _areal_order, _areal_read, _areal_describe, each_file(_areal_check),
               "rollout/{version}/*.jsonl, {version}/*.jsonl or *.jsonl")
