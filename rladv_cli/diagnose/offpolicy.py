"""What-if sweep of rollout rejection: for each option and threshold, what verl's rejection would remove.

Reads only ``response_mask``, ``old_log_probs``, ``rollout_log_probs`` (and ``uid`` and ``loss_mask``, the mask
before rejection, when present), chunk by chunk; keep masks are the same ``rejection_keep`` the compute pipeline
applies, from the same mask.
"""
from __future__ import annotations

import os
from typing import Callable, Mapping, Optional, Sequence

import numpy as np
from pydantic import BaseModel, Field

from ..contract import validation
from ..contract.columns import array_of, flat_values, list_offsets, mask_before_rejection
from ..contract.labels import Labels
from ..errors import ConfigError, InputError
from ..io.read import Dataset
from ..report.diagnostics import RowTable
from ..config.correction import parse_rollout_rs
from ..stages.rejection import rejection_keep
from ..tensors import kernels
from ..tensors import xp as X
from ..tensors.batch import as_array


class SweepEntry(BaseModel):
    """What one ``--rollout-rs`` option at one threshold would do to the dataset."""

    option: str
    threshold: str
    token_fraction_rejected: float = Field(description="rejected share of the tokens with response_mask 1")
    row_fraction_with_rejection: float = Field(description="share of rows (with a valid token) losing at least one")
    rows_fully_rejected: int = Field(description="rows that would lose every valid token")
    groups_losing_all_tokens: Optional[int] = Field(None, description="uid groups left with no valid token at all")
    groups_with_one_surviving_row: Optional[int] = Field(
        None, description="groups of 2+ rows with a single row keeping tokens: no contrast left inside the group"
    )
    surviving_tokens_per_group_mean: Optional[float] = None
    surviving_tokens_per_group_min: Optional[int] = None


class Sweep(BaseModel):
    """The whole sweep: the dataset's size and one entry per (option, threshold)."""

    paths: list[str]
    rows: int
    valid_tokens: int
    groups: Optional[int]
    entries: list[SweepEntry]


def sweep(inputs: Sequence[str | os.PathLike] | str | os.PathLike, options: Sequence[str], thresholds: Sequence[str],
          *, chunk_rows: int = 1024, progress: Optional[Callable[[str, int, int], None]] = None,
          columns: Optional[Mapping[str, str]] = None) -> Sweep:
    """Every option of ``options`` (verl's ``rollout_rs`` strings) at every threshold of ``thresholds``.

    All option/threshold pairs are parsed first, so a bad one is a ``ConfigError`` before any data is read.
    """
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ConfigError(f"--chunk-rows must be at least 1, got {chunk_rows}")
    # messages call a threshold what it is here (given by --thresholds or --threshold)
    configs = [(o, t, parse_rollout_rs(o, t, names=("--rollout-rs", "threshold"))) for o in options for t in thresholds]
    dataset = Dataset(inputs, columns=columns)
    has_uid = "uid" in dataset.columns
    needed = {"response_mask": "every row needs one (1 = a token the actor sampled)",
              **dict.fromkeys(("old_log_probs", "rollout_log_probs"),
                              "rollout rejection compares the old and the rollout policy's log-probs")}
    validation.check_schema(dataset.paths[0], dataset.schema, needed)
    if dataset.num_rows == 0:
        raise InputError(dataset.paths[0], "holds no rows")  # as compute and validate say
    labels, rows = Labels(None), RowTable()
    done = 0
    original = mask_before_rejection(dataset.columns)  # as compute's
    for chunk in dataset.chunks(sorted(set(needed) | {original} | ({"uid"} if has_uid else set())), chunk_rows):
        validation.check_chunk(chunk.table, chunk.path, chunk.start)
        off = as_array(list_offsets(array_of(chunk.table["response_mask"])))  # numpy: the sweep runs on the CPU
        m0 = as_array(flat_values(chunk.table, original))
        old = as_array(flat_values(chunk.table, "old_log_probs"))
        rollout = as_array(flat_values(chunk.table, "rollout_log_probs"))
        cols = {"valid": kernels.segment_sum(m0, off)}
        if has_uid:
            batch_ids = labels.batch_ids(chunk.table, chunk.path, chunk.start)
            cols["group_id"] = labels.group_ids(chunk.table, batch_ids, chunk.path, chunk.start)
        for i, (_, _, rules) in enumerate(configs):
            keep, _ = rejection_keep(rules, old, rollout, m0, off)
            cols[f"kept_{i}"] = kernels.segment_sum(m0 * keep, off)
        rows.add(**cols)
        done += chunk.table.num_rows
        if progress:
            progress("sweep", done, dataset.num_rows)
    valid = rows["valid"]
    n_valid_rows = max(int((valid > 0).sum()), 1)
    entries = []
    for i, (option, threshold, _) in enumerate(configs):
        kept = rows[f"kept_{i}"]
        entry = dict(
            option=option, threshold=threshold,
            token_fraction_rejected=float((valid - kept).sum() / max(float(valid.sum()), 1.0)),
            row_fraction_with_rejection=float((kept < valid).sum()) / n_valid_rows,
            rows_fully_rejected=int(((valid > 0) & (kept == 0)).sum()),
        )
        if has_uid:
            entry.update(_group_effects(rows["group_id"], valid, kept, len(labels.groups)))
        entries.append(SweepEntry(**entry))
    return Sweep(paths=dataset.paths, rows=dataset.num_rows, valid_tokens=int(valid.sum()),
                 groups=len(labels.groups) if has_uid else None, entries=entries)


def _group_effects(gid: np.ndarray, valid: np.ndarray, kept: np.ndarray, groups: int) -> dict:
    """Per-group consequences of one keep mask: groups left empty or with one surviving row, tokens left.
    ``(B,)`` each; ``valid``, ``kept``: float64 token counts."""
    tokens_before = X.index_add(groups, gid, valid)
    tokens_after = X.index_add(groups, gid, kept)
    size = X.bincount(gid, groups)
    surviving_rows = X.bincount(gid, groups, weights=(kept > 0).astype(np.float64))
    return dict(
        groups_losing_all_tokens=int(((tokens_before > 0) & (tokens_after == 0)).sum()),
        groups_with_one_surviving_row=int(((size > 1) & (surviving_rows == 1)).sum()),
        surviving_tokens_per_group_mean=float(tokens_after.mean()),
        surviving_tokens_per_group_min=int(tokens_after.min()),
    )


def render(result: Sweep, console) -> None:
    """The sweep as a rich table, one line per (option, threshold)."""
    from ..report.terminal import Table

    console.print(f"{result.rows} rows, {result.valid_tokens} valid tokens"
                  + (f", {result.groups} groups" if result.groups is not None else "")
                  + f" from {len(result.paths)} file(s)")
    table = Table(header_style="bold", caption="rows/groups emptied: lose every valid token; "
                  "1 left: groups of 2+ with one row keeping tokens")
    table.add_column("option", no_wrap=True)
    table.add_column("threshold", no_wrap=True)
    for col in ("tokens rej.", "rows hit", "rows emptied", "groups emptied", "1 left", "tokens/group mean, min"):
        table.add_column(col, justify="right")
    for e in result.entries:
        groups = e.groups_losing_all_tokens is not None
        table.add_row(
            e.option, e.threshold, f"{e.token_fraction_rejected:.2%}", f"{e.row_fraction_with_rejection:.2%}",
            str(e.rows_fully_rejected), str(e.groups_losing_all_tokens) if groups else "-",
            str(e.groups_with_one_surviving_row) if groups else "-",
            f"{e.surviving_tokens_per_group_mean:.1f}, {e.surviving_tokens_per_group_min}" if groups else "-",
        )
    console.print(table)
