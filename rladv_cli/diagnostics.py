"""Statistics gathered while the data flows: per-row tables, value summaries and the stable warnings."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from . import kernels
from .report import ReportWarning, Stats

FIRST_ROWS = 5


class RowTable:
    """Per-row values of the whole dataset, appended chunk by chunk in dataset row order; kept on the CPU."""

    def __init__(self) -> None:
        self._parts: dict[str, list[Tensor]] = defaultdict(list)
        self._whole: dict[str, Tensor] = {}

    def add(self, **columns: Tensor) -> None:
        for name, values in columns.items():
            self._parts[name].append(values.detach().cpu())
            self._whole.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._parts

    def columns(self) -> dict[str, Tensor]:
        """Every column, whole."""
        return {name: self[name] for name in self._parts}

    def __getitem__(self, name: str) -> Tensor:
        if name not in self._parts:
            raise KeyError(name)
        if name not in self._whole:
            self._whole[name] = torch.cat(self._parts[name])
        return self._whole[name]


def value_rows(x: Tensor, mask: Tensor, row_offsets: Tensor) -> dict[str, Tensor]:
    """Per-row summary of ``x`` over mask-1 tokens: moments, min, max and sign counts; ``(B,)`` each."""
    count, total, m2 = kernels.row_moments(x, mask, row_offsets)
    valid = mask > 0
    inf = torch.tensor(float("inf"), device=x.device)
    return {
        "count": count, "sum": total, "m2": m2,
        "min": kernels.segment_min(torch.where(valid, x, inf), row_offsets, empty=float("inf")),
        "max": kernels.segment_max(torch.where(valid, x, -inf), row_offsets, empty=float("-inf")),
        "positive": kernels.segment_sum((valid & (x > 0)).float(), row_offsets),
        "negative": kernels.segment_sum((valid & (x < 0)).float(), row_offsets),
    }


def token_stats(rows: RowTable, prefix: str) -> Stats:
    """Combine the per-row summaries stored as ``<prefix>_<field>`` into token-level ``Stats``."""
    n, mean, m2 = kernels.combine_moments(rows[f"{prefix}_count"], rows[f"{prefix}_sum"], rows[f"{prefix}_m2"])
    if n == 0:
        return Stats(count=0, mean=None, std=None, min=None, max=None)
    pos = float(rows[f"{prefix}_positive"].sum())
    neg = float(rows[f"{prefix}_negative"].sum())
    return Stats(
        count=int(n), mean=mean, std=math.sqrt(m2 / (n - 1)) if n > 1 else 0.0,
        min=float(rows[f"{prefix}_min"].min()), max=float(rows[f"{prefix}_max"].max()),
        fraction_positive=pos / n, fraction_negative=neg / n, fraction_zero=(n - pos - neg) / n,
    )


def group_flags(reward_total: Tensor, group_index: Tensor, size: Tensor) -> dict[str, Tensor]:
    """Per-group booleans ``(G,)``: ``singleton_group`` (one row) and ``all_equal_group`` (2+ rows, equal ``R``)."""
    g = size.numel()
    hi = torch.full((g,), float("-inf")).scatter_reduce(0, group_index, reward_total, "amax")
    lo = torch.full((g,), float("inf")).scatter_reduce(0, group_index, reward_total, "amin")
    return {"singleton_group": size == 1, "all_equal_group": (size > 1) & (hi == lo)}


class WarningBuilder:
    """Collects warnings as (code, message, flagged dataset-wide rows) and renders them with file:row."""

    def __init__(self, locate: Callable[[int], tuple[str, int]]):
        self._locate = locate
        self.items: list[ReportWarning] = []

    def add(self, code: str, message: str, count: int, rows: Tensor | list[int]) -> None:
        if count <= 0:
            return
        first = [int(r) for r in (rows[:FIRST_ROWS] if isinstance(rows, list) else rows[:FIRST_ROWS].tolist())]
        where = [self._locate(r) for r in first]
        self.items.append(
            ReportWarning(
                code=code, message=message, count=int(count), rows=[w[1] for w in where],
                where=[f"{p}:{r}" for p, r in where],
            )
        )

    def add_rows(self, code: str, message: str, flags: Tensor) -> None:
        """A warning over rows: ``flags (B_total,) bool``; count = flagged rows."""
        rows = torch.nonzero(flags).flatten()
        self.add(code, message.format(n=rows.numel()), rows.numel(), rows)
