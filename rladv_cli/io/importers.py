"""Trainers' own rollout logs as rollout datasets (docs/dumps.md, "Trainers' logs"): ``rladv convert --from
FORMAT SRC...``. Each format maps its fields onto the data contract and says what is absent and what that rules
out; the files are read with polars (``scan_ndjson``), streamed to the output (``AtomicParquetWriter``).

verl-jsonl  verl 0.9.1's ``trainer.rollout_data_dir``: one ``{step}.jsonl`` per step, one line per sample,
            ``input`` (the prompt, decoded), ``output`` (the response, decoded), ``gts``, ``score`` (the row's
            total score), ``step``, and the reward function's extra fields (``RayPPOTrainer._write_generations``).
            ``uid``: the line's ``uid`` when there is one, else its ``input`` (verl samples each prompt ``n`` times
            and decodes it the same way each time). No token lists: rladv computes it at sequence level, one
            position per row (docs/contract.md §1), so outcome estimators only.

nemo-rl     NeMo-RL's per-step training dump ``train_data_step{N}.jsonl`` in the log dir (grpo.py "Log training
            data"; ppo.py writes the same fields), written by ``Logger.log_batched_dict_as_jsonl``: one line per
            sample, each field a batch of one (``[r]``, ``[[...]]`` padded to the step's longest sequence),
            ``content``, ``rewards``, ``input_lengths``, ``token_ids``, ``token_loss_mask``, ``sample_loss_mask``,
            ``advantages``, ``generation_logprobs``, ``prev_logprobs``, ``idx``; optionally ``agent_ref`` and
            ``filtered_rewards``. A line is unpadded with ``input_lengths``; its response is the tokens from the
            first ``token_loss_mask`` 1 to the input length (the tokens before it are the prompt: NeMo-RL groups
            samples by equal prompt token ids; tool observations after it keep mask 0). ``responses``,
            ``response_mask``, ``old_log_probs`` (prev_logprobs), ``rollout_log_probs`` (generation_logprobs),
            ``advantages`` are that slice; ``score`` the reward; ``uid`` a digest of the prompt's token ids;
            ``step`` the N of the file name. No values and no reference log-probs: not gae, not KL shaping.

trl         TRL 1.16.0's GRPO completion log (``log_completions``): ``completions/completions_{step:05d}.parquet``
            written by ``GRPOTrainer.log`` from its ``_logs`` (the last generation batch, in the trainer's order:
            consecutive blocks of ``num_generations``): ``step``, ``prompt``, ``completion`` (text, or chat messages),
            one column per reward function, the reward functions' extra columns, ``advantage``. ``uid``: a digest
            of the prompt (TRL repeats a prompt for its ``num_generations`` completions); ``score``: the NaN-ignoring
            sum of the number columns between ``completion`` and ``advantage`` (TRL's reward with weights 1);
            ``advantages``: ``[advantage]``. No token lists: sequence level, as verl-jsonl. A row whose rewards
            are all missing (TRL's unscorable completion) has no score rladv can use: an error naming it.
"""
from __future__ import annotations

import glob
import hashlib
import itertools
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import pyarrow as pa

from ..contract.columns import prompt_keys
from ..errors import InputError
from .frames import standard
from .write import AtomicParquetWriter, check_output_path, signals_deferred

FORMATS = ("verl-jsonl", "nemo-rl", "trl")
CHUNK_ROWS = 65536
TOKEN_CHUNK_ROWS = 1024  # nemo-rl: a row holds its padded token lists
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


def _step_order(p: str):
    """verl: numeric stems first, as ``12.jsonl`` after ``2.jsonl``."""
    stem = Path(p).stem
    return (0, int(stem), "") if stem.isdigit() else (1, 0, stem)


NEMO_RL_NAME = re.compile(r"train_data_step(\d+)")


def _nemo_rl_order(p: str):
    """nemo-rl: by the N of ``train_data_step{N}``, as ``train_data_step10`` after ``train_data_step2``."""
    found = NEMO_RL_NAME.fullmatch(Path(p).stem)
    return (0, int(found.group(1)), "") if found else (1, 0, Path(p).stem)


TRL_NAME = re.compile(r"completions_(\d+)")


def _trl_order(p: str):
    """trl: by the step of ``completions_{step:05d}``."""
    found = TRL_NAME.fullmatch(Path(p).stem)
    return (0, int(found.group(1)), "") if found else (1, 0, Path(p).stem)


def _files(sources: Sequence[str | os.PathLike], pattern: str, order=_step_order) -> list[str]:
    """Files, folders (their ``pattern`` files) and globs, each folder's or glob's in step order (``order``)."""
    found: list[str] = []
    for raw in sources:
        p = os.fspath(raw)
        if os.path.isdir(p):
            hits = sorted((str(q) for q in Path(p).glob(pattern) if q.is_file()), key=order)
            if not hits:
                raise InputError(p, f"folder holds no {pattern} file")
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


def _check_lines(path: str, required: Sequence[str], writer: str = "verl", check=None) -> None:
    """One pass over a JSONL file in Python, for the first bad line (polars names none): not JSON, not an
    object, or without a required field / with a null one; then ``check(entry)``, the format's own rules (a
    message, or None for a good line)."""
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
                raise InputError(path, f"line {number}: no {', '.join(missing)} ({writer} writes "
                                 f"{', '.join(required)} on every line)")
            problem = check(entry) if check is not None else None
            if problem:
                raise InputError(path, f"line {number}: {problem}")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _verl_line(entry: dict) -> str | None:
    if not _number(entry["score"]):
        return f"score is {entry['score']!r}; a number is needed"
    return None


NEMO_RL_REQUIRED = ("rewards", "input_lengths", "token_ids", "token_loss_mask", "sample_loss_mask", "advantages",
                    "generation_logprobs", "prev_logprobs")
NEMO_RL_SCALARS = ("rewards", "sample_loss_mask")
NEMO_RL_TOKENS = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")


def _nemo_rl_line(entry: dict) -> str | None:
    """NeMo-RL's batch-of-one shapes: ``[number]`` for the per-sample fields, ``[[numbers]]`` (at least
    ``input_lengths`` long) for the per-token ones; a 0/1 ``token_loss_mask`` with a 1 within the length."""
    def one(name):
        v = entry[name]
        return v[0] if isinstance(v, list) and len(v) == 1 else None

    length = one("input_lengths")
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        return (f"input_lengths is {entry['input_lengths']!r}; NeMo-RL writes a list of one positive integer "
                f"(a batch of one)")
    for name in NEMO_RL_SCALARS:
        if not _number(one(name)):
            return f"{name} is {entry[name]!r}; NeMo-RL writes a list of one number (a batch of one)"
    for name in NEMO_RL_TOKENS:
        seq = one(name)
        if not isinstance(seq, list):
            return f"{name} is not a list of one list (NeMo-RL writes [[...]], a batch of one)"
        if len(seq) < length:
            return f"{name} has {len(seq)} positions, fewer than input_lengths {length} (truncated?)"
        if not all(_number(x) for x in seq[:length]):
            return f"{name} holds a value that is not a number within input_lengths {length}"
    mask = one("token_loss_mask")[:length]
    if any(x not in (0, 1) for x in mask):
        return f"token_loss_mask holds {next(x for x in mask if x not in (0, 1))!r}; masks are 0 or 1"
    if 1 not in mask:
        return f"token_loss_mask has no 1 within input_lengths {length}: no generated token, so no response"
    return None


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


def _json_text(values: list) -> list:
    return [None if v is None else json.dumps(v) for v in values]


def _nemo_rl(path: str) -> Iterator[tuple[pa.Table, bool]]:
    """One NeMo-RL ``train_data_step{N}.jsonl`` as Arrow tables of contract rows (see the module docstring),
    streamed ``TOKEN_CHUNK_ROWS`` lines at a time; lines already checked by ``_nemo_rl_line``."""
    import polars as pl

    step = int(NEMO_RL_NAME.fullmatch(Path(path).stem).group(1))  # convert_log checked the name
    tokens = ("responses", "response_mask", "old_log_probs", "rollout_log_probs", "advantages")
    try:
        frame = pl.scan_ndjson(path, infer_schema_length=None)
        schema = frame.collect_schema()
        first = {c: pl.col(c).list.first() for c in schema.names() if isinstance(schema[c], pl.List)}
        length = first["input_lengths"].cast(pl.Int64)
        start = first["token_loss_mask"].list.eval(pl.element() == 1).list.arg_max().cast(pl.Int64)

        def response(field: str, name: str, dtype) -> pl.Expr:
            return first[field].list.slice(start, length - start).cast(pl.List(dtype)).alias(name)

        known = {"idx", *NEMO_RL_REQUIRED}
        query = frame.select(
            first["token_ids"].list.head(start).alias("__prompt"),
            pl.lit(step, pl.Int64).alias("step"),
            *([pl.col("idx").cast(pl.Int64)] if "idx" in schema else []),
            first["rewards"].cast(pl.Float32).alias("score"),
            response("token_ids", "responses", pl.Int32),
            response("token_loss_mask", "response_mask", pl.Int8),
            response("prev_logprobs", "old_log_probs", pl.Float32),
            response("generation_logprobs", "rollout_log_probs", pl.Float32),
            response("advantages", "advantages", pl.Float32),
            first["sample_loss_mask"].cast(pl.Float32).alias("sample_loss_mask"),
            length.alias("input_lengths"),
            # content and the other fields (filtered_rewards, agent_ref, ...): the sample's value out of its
            # batch of one; nested values as JSON text below
            *[first.get(c, pl.col(c)).alias(c) for c in schema.names() if c not in known],
        )
        for df in query.collect_batches(chunk_size=TOKEN_CHUNK_ROWS):
            table = df.drop("__prompt").to_arrow()
            table = table.add_column(0, "uid", prompt_keys(df["__prompt"].to_arrow()))
            for i, (name, t) in enumerate(zip(table.column_names, table.schema.types)):
                if name not in tokens and pa.types.is_nested(t):
                    table = table.set_column(i, name, pa.array(_json_text(table[name].to_pylist()), pa.string()))
            yield standard(table), True
    except pl.exceptions.PolarsError as err:
        raise InputError(path, f"cannot be read as NeMo-RL's train_data JSONL: {str(err).splitlines()[0]}") from None


def _trl(path: str) -> Iterator[tuple[pa.Table, bool]]:
    """One TRL ``completions_{step}.parquet`` as an Arrow table of sequence-level contract rows (see the module
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
    score = pl.sum_horizontal([pl.col(c).cast(pl.Float64).fill_nan(None) for c in rewards])
    scorable = pl.any_horizontal([pl.col(c).cast(pl.Float64).fill_nan(None).is_not_null() for c in rewards])
    bad = frame.select(scorable.not_().arg_true()).to_series()
    if bad.len():
        raise InputError(path, f"every reward ({', '.join(rewards)}) is missing: TRL leaves such a completion out "
                         "of its group statistics, which rladv cannot", row=int(bad[0]), column=rewards[0])
    text = {c: (pl.col(c).map_elements(json.dumps, return_dtype=pl.String) if frame.schema[c].is_nested()
                else pl.col(c).cast(pl.String)) for c in ("prompt", "completion")}
    out = frame.select(
        text["prompt"].alias("__prompt"), pl.col("step").cast(pl.Int64), score.cast(pl.Float32).alias("score"),
        pl.concat_list(pl.col("advantage").cast(pl.Float32)).alias("advantages"),
        text["prompt"].alias("prompt"), text["completion"].alias("completion"),
        *[pl.col(c) for c in names if c not in ("step", "prompt", "completion", "advantage")])
    table = out.drop("__prompt").to_arrow()
    keys = pa.array([hashlib.blake2b(p.encode(), digest_size=16).hexdigest() for p in out["__prompt"].to_list()],
                    pa.string())
    yield standard(table.add_column(0, "uid", keys)), True


def trl_rewards(schema, names: list[str]) -> list[str]:
    """TRL's reward columns: the number columns its table puts between ``completion`` and ``advantage``."""
    between = names[names.index("completion") + 1:names.index("advantage")]
    return [c for c in between if schema[c].is_numeric()]


NEMO_RL_SOURCES = {
    "uid": "the prompt's token ids (token_ids before the first token_loss_mask 1; a BLAKE2b digest)",
    "score": "rewards", "step": "the file name (train_data_step{N})", "responses": "token_ids",
    "response_mask": "token_loss_mask", "old_log_probs": "prev_logprobs", "rollout_log_probs": "generation_logprobs",
    "advantages": "advantages"}
NEMO_RL_ABSENT = ("token lists from the first generated token to input_lengths; absent: values and the reference "
                  "log-probs (ref_log_prob), so not gae and not KL shaping; NeMo-RL's advantages are replayed "
                  "against rladv's: compute --convention nemo_rl --estimator grpo --batch-key step")


def convert_log(fmt: str, sources: Sequence[str | os.PathLike], out: str | os.PathLike) -> Imported:
    """Convert a trainer's log (``fmt``, one of ``FORMATS``) to one Parquet file at ``out``, written atomically:
    files in step order, every line checked first (a bad or truncated line is a one-line error naming its file
    and line), one schema (a file whose fields differ is an error), nothing written on an error."""
    if fmt not in FORMATS:
        raise InputError(fmt, f"not a format rladv reads; choose one of {', '.join(FORMATS)}")
    out = os.fspath(out)
    if fmt == "nemo-rl":
        files = _files(sources, "train_data_step*.jsonl", _nemo_rl_order)
    elif fmt == "trl":
        files = _files(sources, "completions_*.parquet", _trl_order)
    else:
        files = _files(sources, "*.jsonl")
    check_output_path(out, files)
    for path in files:
        if fmt == "nemo-rl":
            if NEMO_RL_NAME.fullmatch(Path(path).stem) is None:
                raise InputError(path, "not named train_data_step{N}.jsonl (NeMo-RL's name): the step comes from "
                                 "the name")
            _check_lines(path, NEMO_RL_REQUIRED, "NeMo-RL's GRPO", _nemo_rl_line)
        elif fmt == "trl":
            continue  # a Parquet file: read and checked whole by _trl
        else:
            _check_lines(path, ("input", "score", "step"), "verl", _verl_line)
    read = {"nemo-rl": _nemo_rl, "trl": _trl}.get(fmt, _verl_jsonl)
    tables = ((path, table, own) for path in files for table, own in read(path))
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
    if fmt == "nemo-rl":
        return Imported(out, rows, len(files), list(schema.names), dict(NEMO_RL_SOURCES), NEMO_RL_ABSENT)
    if fmt == "trl":
        import polars as pl

        first_schema = pl.read_parquet_schema(files[0])
        rewards = trl_rewards(first_schema, list(first_schema))
        return Imported(out, rows, len(files), list(schema.names), {
            "uid": "prompt (a BLAKE2b digest of its text)", "step": "step", "advantages": "[advantage]",
            "score": f"the sum of {', '.join(rewards)} (NaN left out; TRL's reward with weights 1)"},
            SEQUENCE_LEVEL + "; TRL's advantages are replayed against rladv's: compute --convention trl "
            "--estimator grpo --group-size N --batch-key step")
    uid = "uid" if owns == {True} else "input (the prompt text)" if owns == {False} else "uid, else input"
    return Imported(out, rows, len(files), list(schema.names), {"uid": uid, "score": "score", "step": "step"},
                    SEQUENCE_LEVEL)
