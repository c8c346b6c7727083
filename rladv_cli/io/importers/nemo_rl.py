"""NeMo-RL's per-step training dump ``train_data_step{N}.jsonl`` as token-level contract rows (docs/dumps.md,
"Trainers' logs"): each line a batch of one, unpadded with ``input_lengths``, the response from the first
``token_loss_mask`` 1."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from ...contract.columns import prompt_keys
from ...errors import InputError
from ..frames import standard
from . import common
from .common import Format, Options, check_lines, each_file, globbed, nested_as_json, number, numbered

NAME = re.compile(r"train_data_step(\d+)")
REQUIRED = ("rewards", "input_lengths", "token_ids", "token_loss_mask", "sample_loss_mask", "advantages",
            "generation_logprobs", "prev_logprobs")
SCALARS = ("rewards", "sample_loss_mask")
TOKENS = ("token_ids", "token_loss_mask", "advantages", "generation_logprobs", "prev_logprobs")
OUT_TOKENS = ("responses", "response_mask", "old_log_probs", "rollout_log_probs", "advantages")


def _line(entry: dict) -> str | None:
    """NeMo-RL's batch-of-one shapes: ``[number]`` for the per-sample fields, ``[[numbers]]`` (at least
    ``input_lengths`` long) for the per-token ones; a 0/1 ``token_loss_mask`` with a 1 within the length."""
    def one(name):
        v = entry[name]
        return v[0] if isinstance(v, list) and len(v) == 1 else None

    length = one("input_lengths")
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        return (f"input_lengths is {entry['input_lengths']!r}; NeMo-RL writes a list of one positive integer "
                f"(a batch of one)")
    for name in SCALARS:
        if not number(one(name)):
            return f"{name} is {entry[name]!r}; NeMo-RL writes a list of one number (a batch of one)"
    for name in TOKENS:
        seq = one(name)
        if not isinstance(seq, list):
            return f"{name} is not a list of one list (NeMo-RL writes [[...]], a batch of one)"
        if len(seq) < length:
            return f"{name} has {len(seq)} positions, fewer than input_lengths {length} (truncated?)"
        if not all(number(x) for x in seq[:length]):
            return f"{name} holds a value that is not a number within input_lengths {length}"
    mask = one("token_loss_mask")[:length]
    if any(x not in (0, 1) for x in mask):
        return f"token_loss_mask holds {next(x for x in mask if x not in (0, 1))!r}; masks are 0 or 1"
    if 1 not in mask:
        return f"token_loss_mask has no 1 within input_lengths {length}: no generated token, so no response"
    return None


def _check(path: str) -> None:
    if NAME.fullmatch(Path(path).stem) is None:
        raise InputError(path, "not named train_data_step{N}.jsonl (NeMo-RL's name): the step comes from the name")
    check_lines(path, REQUIRED, "NeMo-RL's GRPO", _line)


def _read(path: str, options: Options) -> Iterator[tuple[pa.Table, None]]:
    """One NeMo-RL ``train_data_step{N}.jsonl`` as Arrow tables of contract rows (see the package docstring),
    streamed ``common.TOKEN_CHUNK_ROWS`` lines at a time; lines already checked by ``_line``."""
    import polars as pl

    step = int(NAME.fullmatch(Path(path).stem).group(1))  # _check checked the name
    try:
        frame = pl.scan_ndjson(path, infer_schema_length=None)
        schema = frame.collect_schema()
        first = {c: pl.col(c).list.first() for c in schema.names() if isinstance(schema[c], pl.List)}
        length = first["input_lengths"].cast(pl.Int64)
        start = first["token_loss_mask"].list.eval(pl.element() == 1).list.arg_max().cast(pl.Int64)

        def response(field: str, name: str, dtype) -> pl.Expr:
            return first[field].list.slice(start, length - start).cast(pl.List(dtype)).alias(name)

        known = {"idx", *REQUIRED}
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
        for df in query.collect_batches(chunk_size=common.TOKEN_CHUNK_ROWS):
            table = df.drop("__prompt").to_arrow()
            table = table.add_column(0, "uid", prompt_keys(df["__prompt"].to_arrow()))
            yield standard(nested_as_json(table, OUT_TOKENS)), None
    except pl.exceptions.PolarsError as err:
        raise InputError(path, f"cannot be read as NeMo-RL's train_data JSONL: {str(err).splitlines()[0]}") from None


SOURCES = {
    "uid": "the prompt's token ids (token_ids before the first token_loss_mask 1; a BLAKE2b digest)",
    "score": "rewards", "step": "the file name (train_data_step{N})", "responses": "token_ids",
    "response_mask": "token_loss_mask", "old_log_probs": "prev_logprobs", "rollout_log_probs": "generation_logprobs",
    "advantages": "advantages"}
ABSENT = ("token lists from the first generated token to input_lengths; absent: values and the reference "
          "log-probs (ref_log_prob), so not gae and not KL shaping; NeMo-RL's advantages are replayed "
          "against rladv's: compute --convention nemo_rl --estimator grpo --batch-key step")


def _describe(files: list[str], notes: set, options: Options) -> tuple[dict[str, str], str]:
    return dict(SOURCES), ABSENT


NEMO_RL = Format("nemo-rl", globbed("train_data_step*.jsonl"), numbered(NAME.pattern), _read, _describe, each_file(_check),
                 "train_data_step*.jsonl")
