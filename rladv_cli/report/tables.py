"""The tables behind the verdict (docs/debugging.md, "The tables behind the verdict"): one row per group and one
per row of the dataset, as Arrow tables (``--groups-out``, ``--rows-out``; polars frames in the Python API).

groups: the batch key's column (``step``, ..., its value as the data holds it; none without a batch key), ``uid``,
``rows``, ``score_mean``, ``score_std``, ``reward_mean``,
``reward_std`` (float64 over the group's rows; std unbiased, null for one row), ``actor_tokens``,
``signal_tokens``, ``signal_share``, ``cause`` (``ok``, ``singleton``, ``all_0``, ``all_top``, ``tied``,
``kl_only``, ``epsilon_tie``).

rows: ``row`` (0-based across the dataset, the numbering ``--row`` takes), ``file``, ``file_row``, the batch key's
column, ``uid``, ``score_total``, ``reward_total`` (after shaping), ``actor_tokens``, ``observation_tokens``,
``rejected_tokens``, ``signal_tokens``, ``advantage_mean`` / ``advantage_min`` / ``advantage_max`` (over the
tokens the estimator used; null when no advantages are known or the row has none), ``cause`` (the row's
group's, or ``no_actor_tokens``, ``rejected``, ``no_uid``, ``zero_advantage``; ``ok`` when it carries signal).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, PrivateAttr

from ..contract.columns import arrow_of
from .verdict import CAUSES, Context, RowsToJudge, group_mean_std, label

if TYPE_CHECKING:
    import polars as pl


@dataclass(frozen=True)
class RowFacts:
    """What the tables add to ``RowsToJudge``, per row ``(B,)``: the score total before shaping, observation
    tokens, advantage sum/count/min/max over the used tokens (None: unknown), each row's file index and row in
    it, the files' ``paths``, per group ``(G,)`` its ``uids``, and ``batch``: the batch key and its values in
    the verdict's step order (None without a batch key)."""

    score_total: Optional[np.ndarray]
    observation: np.ndarray
    file_index: np.ndarray
    file_row: np.ndarray
    paths: Sequence[str]
    uids: Optional[Sequence[object]] = None
    adv_sum: Optional[np.ndarray] = None
    adv_count: Optional[np.ndarray] = None
    adv_min: Optional[np.ndarray] = None
    adv_max: Optional[np.ndarray] = None
    batch: Optional[tuple[str, Sequence[object]]] = None


def _strings(values: Sequence[str]) -> pa.Array:
    """A string array from its buffers (``pa.array`` would import pandas, see ``contract.columns.numpy_of``)."""
    data = [v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int32)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    return pa.Array.from_buffers(pa.string(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])


def _numbers(x: np.ndarray, kind: pa.DataType, null: Optional[np.ndarray] = None) -> pa.Array:
    """A numeric array (``arrow_of``; int64 or float64 with nulls), null where ``null`` is True."""
    if null is None or not null.any():
        return arrow_of(x, kind)
    valid = np.packbits(~np.asarray(null, dtype=bool), bitorder="little")
    values = np.ascontiguousarray(np.where(null, 0, x), dtype=np.float64 if pa.types.is_floating(kind) else np.int64)
    return pa.Array.from_buffers(kind, len(values), [pa.py_buffer(valid), pa.py_buffer(values)])


def _labels_array(values: Sequence[object]) -> pa.Array:
    """uids as they were: integers as int64 when every one is an integer that fits, else strings."""
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and -2**63 <= int(v) < 2**63 for v in values):
        return arrow_of(np.array([int(v) for v in values], dtype=np.int64), pa.int64())
    return _strings(["" if v is None else str(v) for v in values])


def _coded(codes: np.ndarray, values: Sequence[object]) -> pa.Array:
    """``values[codes]`` without a Python object per row: the values once, then taken. Plain strings, not a
    dictionary column (polars would read it as a categorical, which a join with the user's string column
    refuses); the Parquet writer still dictionary-encodes them on disk."""
    return _labels_array(values).take(arrow_of(np.asarray(codes), pa.int32()))


def _cause(codes: np.ndarray) -> pa.Array:
    """Causes (indices into ``CAUSES``) as a string column."""
    return _coded(codes, CAUSES)


def _group_moments(x: Optional[np.ndarray], g: np.ndarray, size: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """Per-group mean and unbiased std of ``x`` (float64), null std for a one-row group, nulls without ``x``."""
    if x is None:
        return pa.nulls(size.size, pa.float64()), pa.nulls(size.size, pa.float64())
    mean, std = group_mean_std(x, g, size)
    return _numbers(mean, pa.float64()), _numbers(std, pa.float64(), size < 2)


def verdict_tables(rows: RowsToJudge, ctx: Context, facts: RowFacts, *,
                   no_uid: bool = False) -> tuple[Optional[pa.Table], pa.Table]:
    """``(groups, rows)``: the per-group table (None without groups) and the per-row table of ``rows`` judged
    under ``ctx``, with ``facts``."""
    lab = label(rows, ctx, no_uid=no_uid)
    B = rows.actor.size
    key, values = facts.batch if facts.batch is not None else (None, [None])
    several = rows.step is not None and len(values) > 1  # rows.step: the batch's rank, with more than one
    row_step = rows.step.astype(np.int64) if several else np.zeros(B, dtype=np.int64)
    actor = rows.actor.astype(np.int64)
    used = np.minimum(rows.used.astype(np.int64), actor)
    groups = None
    g = None
    if lab.group_cause is not None:
        g = rows.group.astype(np.int64)
        G = lab.group_cause.size
        size = np.bincount(g, minlength=G)
        present = np.flatnonzero(size > 0)
        at = arrow_of(present, pa.int64())
        score_mean, score_std = _group_moments(facts.score_total, g, size)
        reward_mean, reward_std = _group_moments(rows.reward, g, size)
        group_actor = np.bincount(g, weights=actor, minlength=G).astype(np.int64)
        cols = {}
        if key is not None:
            group_step = np.zeros(G, dtype=np.int64)
            group_step[g] = row_step
            cols[key] = _coded(group_step[present], values)
        cols.update(
            uid=_coded(present, facts.uids) if facts.uids is not None else _numbers(present, pa.int64()),
            rows=_numbers(size[present], pa.int64()), score_mean=score_mean.take(at), score_std=score_std.take(at),
            reward_mean=reward_mean.take(at), reward_std=reward_std.take(at),
            actor_tokens=_numbers(group_actor[present], pa.int64()),
            signal_tokens=_numbers(lab.group_signal[present], pa.int64()),
            signal_share=_numbers(lab.group_signal[present] / np.maximum(group_actor[present], 1), pa.float64()),
            cause=_cause(lab.group_cause[present]))
        groups = pa.Table.from_arrays(list(cols.values()), names=list(cols))
    cols = {"row": _numbers(rows.dataset_row, pa.int64()), "file": _coded(facts.file_index, list(facts.paths)),
            "file_row": _numbers(facts.file_row, pa.int64())}
    if key is not None and key not in cols:
        cols[key] = _coded(row_step, values)
    if g is not None and facts.uids is not None:
        cols["uid"] = _coded(g, facts.uids)
    nulls = pa.nulls(B, pa.float64())
    known = facts.adv_count is not None
    has = facts.adv_count > 0 if known else None
    cols.update(
        score_total=nulls if facts.score_total is None else _numbers(facts.score_total, pa.float64()),
        reward_total=nulls if rows.reward is None else _numbers(rows.reward, pa.float64()),
        actor_tokens=_numbers(actor, pa.int64()), observation_tokens=_numbers(facts.observation, pa.int64()),
        rejected_tokens=_numbers(actor - used, pa.int64()), signal_tokens=_numbers(lab.row_signal, pa.int64()),
        advantage_mean=_numbers(facts.adv_sum / np.maximum(facts.adv_count, 1), pa.float64(), ~has) if known else nulls,
        advantage_min=_numbers(facts.adv_min, pa.float64(), ~has) if known else nulls,
        advantage_max=_numbers(facts.adv_max, pa.float64(), ~has) if known else nulls,
        cause=_cause(lab.row_cause))
    return groups, pa.Table.from_arrays(list(cols.values()), names=list(cols))


def write_tables(files, result: "WithTables", paths: tuple) -> None:
    """Stage ``result``'s group and row tables in ``files`` (``SideFiles``) at ``paths`` (``(groups, rows)``,
    None: not asked); a dataset without groups gets an empty group table."""
    groups, rows = result.arrow_tables()
    for path, table in zip(paths, (groups, rows)):
        if path is not None:
            files.write(path, parquet_bytes(table if table is not None else pa.table({"uid": pa.nulls(0, pa.string())})))


def parquet_bytes(table: pa.Table) -> bytes:
    """``table`` as a zstd-compressed Parquet file's bytes (for ``SideFiles``)."""
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


class WithTables(BaseModel):
    """A result (``Report``, ``Inspection``) that also holds the tables behind its verdict, outside its JSON:
    ``group_table`` / ``row_table`` as polars frames over the Arrow tables (``arrow_tables``)."""

    _group_table: Optional[pa.Table] = PrivateAttr(None)
    _row_table: Optional[pa.Table] = PrivateAttr(None)

    def with_tables(self, groups: Optional[pa.Table], rows: Optional[pa.Table]):
        """A copy of this result holding ``groups`` and ``rows``."""
        held = self.model_copy()
        held._group_table, held._row_table = groups, rows
        return held

    def arrow_tables(self) -> tuple[Optional[pa.Table], Optional[pa.Table]]:
        return self._group_table, self._row_table

    @property
    def group_table(self) -> "Optional[pl.DataFrame]":
        """One row per uid group (module docstring), or None without groups."""
        return None if self._group_table is None else _polars_of(self._group_table)

    @property
    def row_table(self) -> "Optional[pl.DataFrame]":
        """One row per dataset row (module docstring)."""
        return None if self._row_table is None else _polars_of(self._row_table)


def _polars_of(table: pa.Table) -> "pl.DataFrame":
    import polars as pl

    return pl.from_arrow(table, rechunk=False)
