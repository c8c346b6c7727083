"""``rladv explain``'s derivations: one row's advantages step by step, as each estimator computes them.

A derivation reads the row of ``rladv compute``'s output (``row[name]``: the row's values of a list column as a
float64 array) and shows the recursion with its constants; the advantages themselves are the computed ones,
never recomputed here. Group estimators have one advantage per row, explained by the row's group (``by_group``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Optional

import numpy as np

from .registry import Estimator

if TYPE_CHECKING:
    from ..config.settings import Params


@dataclass(frozen=True)
class Derivation:
    """The formula lines, the constants, and a per-token table (``columns``, one list of values per position);
    ``by_group``: the row is explained by its group's members instead of a table."""

    formula: list[str]
    constants: dict[str, float | str] = field(default_factory=dict)
    columns: list[str] = field(default_factory=list)
    tokens: list[list[Optional[float | str]]] = field(default_factory=list)
    by_group: bool = False


Row = Mapping[str, np.ndarray]


def by_group(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    """A group estimator's row: its formula, baseline and singleton rule; the group view shows the members."""
    constants = {**whitening, **({"epsilon": params.epsilon} if "epsilon" in est.settings else {})}
    return Derivation(formula=[est.summary_for(params), f"baseline: {est.baseline}", f"singleton: {est.singleton}"],
                      constants=constants, by_group=True)


def baseline_table(row: Row, formula: list[str]) -> Derivation:
    """Token estimators whose advantage is a return minus a baseline: ``G``, ``b = G − A`` and ``A`` per token."""
    m, r, adv, ret = row["response_mask"], row["token_level_rewards"], row["advantages"], row["returns"]
    tokens = [[t, int(m[t]), r[t], ret[t] if m[t] else None, float(ret[t] - adv[t]) if m[t] else None, adv[t]]
              for t in range(m.size)]
    return Derivation(formula=formula, columns=["t", "mask", "reward", "return G", "baseline", "advantage"],
                      tokens=tokens)
