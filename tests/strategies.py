"""Hypothesis strategies for rladv's property tests: random ragged rollout batches in the docs/contract.md §1 layout.

A drawn ``Rollout`` holds plain Python rows (so ``tests/reference.py`` can read them) and builds the Arrow
table ``rladv_cli.compute`` reads.  What the strategies aim at (docs/semantics.md: "rladv's position", §1, §7):

- 1..24 rows of 1..40 tokens, uids forming singletons and groups of 2..6, the rows shuffled so a group is
  never contiguous by construction;
- masks with random 0-spans (tool observations), rows ending in 0s (the score then sits on a mask-0
  position) and some rows with no 1 at all;
- scores from a dyadic set (multiples of 1/8 in [-2, 2]): row totals and group sums are exact in float32,
  so an all-equal group's mean is exact and its advantages exactly 0 (docs/semantics.md §7.2: otherwise ulp noise
  is divided by a ~ulp std and explodes); token-level (``rm_scores``, mostly zeros) or a scalar ``score``;
- finite ``values`` and log-probs (NaN/inf are validation errors, not something to compare).
"""
from __future__ import annotations

import os
import string
from dataclasses import dataclass, field, replace
from typing import Optional

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

F32 = np.float32
KL_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "k1+", "k3+", "low_var_kl+", "mse+", "abs+")

# multiples of 1/8 in [-2, 2]: sums of up to 40 of them are exact in float32
dyadic = st.integers(-16, 16).map(lambda k: k / 8)
unit_interval = st.one_of(st.sampled_from([0.0, 0.5, 0.9, 0.95, 0.99, 1.0]), st.floats(0, 1))


@dataclass
class Rollout:
    """One rollout batch as Python rows; ``table()`` gives the Arrow input of ``rladv_cli.compute``."""

    uids: list[str]
    masks: list[list[int]]
    rm_scores: Optional[list[list[float]]] = None  # token-level scores, or
    score: Optional[list[float]] = None            # one scalar per row (on the last position)
    values: Optional[list[list[float]]] = None
    old_log_probs: Optional[list[list[float]]] = None
    ref_log_prob: Optional[list[list[float]]] = None
    sum_pi_squared: Optional[list[list[float]]] = None
    reward_baselines: Optional[list[float]] = None
    row_id: list[int] = field(default_factory=list)
    step: Optional[list[int]] = None

    def __post_init__(self):
        if not self.row_id:
            self.row_id = list(range(len(self.uids)))

    @property
    def num_rows(self) -> int:
        return len(self.uids)

    @property
    def lengths(self) -> list[int]:
        return [len(m) for m in self.masks]

    @property
    def valid_tokens(self) -> int:
        return sum(sum(m) for m in self.masks)

    def _row_columns(self) -> dict[str, list]:
        cols = {"row_id": self.row_id, "uid": self.uids, "masks": self.masks, "rm_scores": self.rm_scores,
                "score": self.score, "values": self.values, "old_log_probs": self.old_log_probs,
                "ref_log_prob": self.ref_log_prob, "sum_pi_squared": self.sum_pi_squared,
                "reward_baselines": self.reward_baselines, "step": self.step}
        return {k: v for k, v in cols.items() if v is not None}

    def take(self, rows: list[int]) -> "Rollout":
        """The rows ``rows`` (in that order) as a new rollout; ``row_id`` travels with them."""
        picked = {k: [v[i] for i in rows] for k, v in self._row_columns().items()}
        return Rollout(uids=picked.pop("uid"), masks=picked.pop("masks"), **picked)

    def with_columns(self, **cols) -> "Rollout":
        return replace(self, **cols)

    def table(self) -> pa.Table:
        f32, i8 = pa.list_(pa.float32()), pa.list_(pa.int8())
        cols = {
            "row_id": pa.array(self.row_id, pa.int64()),
            "uid": pa.array(self.uids, pa.string()),
            "response_mask": pa.array(self.masks, i8),
        }
        if self.step is not None:
            cols["step"] = pa.array(self.step, pa.int64())
        if self.rm_scores is not None:
            cols["rm_scores"] = pa.array(self.rm_scores, f32)
        if self.score is not None:
            cols["score"] = pa.array(self.score, pa.float32())
        for name in ("values", "old_log_probs", "ref_log_prob", "sum_pi_squared"):
            rows = getattr(self, name)
            if rows is not None:
                cols[name] = pa.array(rows, f32)
        if self.reward_baselines is not None:
            cols["reward_baselines"] = pa.array(self.reward_baselines, pa.float32())
        return pa.table(cols)


# --------------------------------------------------------------------------- pieces


@st.composite
def masks(draw, length: int) -> list[int]:
    """A 0/1 mask of ``length``: all ones, ones with 0-spans (tool observations, possibly at the end), all
    zeros, or fully random."""
    kind = draw(st.sampled_from(["ones", "spans", "spans", "spans", "trailing", "zeros", "random"]))
    if kind == "ones":
        return [1] * length
    if kind == "zeros":
        return [0] * length
    if kind == "random":
        return draw(st.lists(st.integers(0, 1), min_size=length, max_size=length))
    m = [1] * length
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, length - 1))
        span = draw(st.integers(1, max(1, length // 3)))
        m[start:start + span] = [0] * len(m[start:start + span])
    if kind == "trailing":  # the row ends in a tool observation: its score sits on a mask-0 position
        tail = draw(st.integers(1, max(1, length // 2)))
        m[length - tail:] = [0] * tail
    return m


@st.composite
def token_scores(draw, length: int) -> list[float]:
    """Token-level dyadic scores: the outcome score on the last position, a few more non-zero positions."""
    row = [0.0] * length
    row[-1] = draw(dyadic)
    for _ in range(draw(st.integers(0, 2))):
        row[draw(st.integers(0, length - 1))] = draw(dyadic)
    return row


@st.composite
def float_row(draw, lo: float, hi: float, length: int) -> list[float]:
    """``length`` float32 values in [lo, hi]: spread uniformly from a drawn seed, then up to three positions set to
    values hypothesis picks (its bounds, 0, its favourites). A seed per row, not a choice per element: a batch's
    choices must fit hypothesis's 8 KB, which held about a thousand floats, so large batches were never drawn."""
    row = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).uniform(lo, hi, length).astype(F32)
    for _ in range(draw(st.integers(0, 3))):
        row[draw(st.integers(0, length - 1))] = draw(st.floats(lo, hi, width=32))
    return [float(x) for x in row]


@st.composite
def group_sizes(draw, max_rows: int, min_group: int = 1, min_rows: int = 1) -> list[int]:
    """Sizes of the uid groups: singletons (unless ``min_group`` > 1) and groups of 2..6, between
    ``min_rows`` and ``max_rows`` rows in all."""
    total = draw(st.integers(max(min_group, min_rows), max_rows))
    sizes: list[int] = []
    while sum(sizes) < total:
        left = total - sum(sizes)
        size = min(draw(st.integers(min_group, 6)), left)
        if left - size and left - size < min_group:  # never leave a remainder too small for a group
            size = left
        sizes.append(size)
    return sizes


# --------------------------------------------------------------------------- batches


@st.composite
def rollouts(draw, *, max_rows: int = 24, max_len: int = 40, values: bool = True, log_probs: bool = True,
             score_kind: Optional[str] = None, steps: Optional[int] = None, min_valid: int = 0,
             min_group: int = 1, min_rows: int = 1, baselines: bool = False, pi_squared: bool = False,
             binary: bool = False) -> Rollout:
    """A random ragged rollout batch (see the module docstring).

    values / log_probs: add ``values`` / ``old_log_probs`` + ``ref_log_prob`` columns.
    score_kind: "rm_scores" or "score" (drawn when None).
    steps: add a ``step`` column with values in ``0..steps-1`` (every value used when there are enough
    groups); each group sits in one step and uids are reused across steps, so equal uids of different
    steps must not form one group.
    min_valid: at least this many mask-1 tokens in the batch (the first row is made all-valid if needed).
    min_group: smallest uid group (2 for estimators that refuse singletons, e.g. grpo_passk).
    min_rows: fewest rows.
    baselines / pi_squared: add ``reward_baselines`` (remax) / ``sum_pi_squared`` (optimal token baselines).
    binary: every row's score is 0 or 1 (one outcome per row: estimators of binary rewards).
    """
    sizes = draw(group_sizes(max_rows, min_group, min_rows))
    if steps is None:
        names = draw(st.lists(st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=4),
                              min_size=len(sizes), max_size=len(sizes), unique=True))
        group_step = [None] * len(sizes)
    else:
        # each group lives in one step (the first groups cover every step); names repeat across steps,
        # and "1"/"01" are distinct uids that verl's grpo_vectorized would merge
        pool = ["a", "b", "c", "1", "01", "x7"]
        group_step = [g if g < steps else draw(st.integers(0, steps - 1)) for g in range(len(sizes))]
        names, used = [], set()
        for st_g in group_step:
            free = [p for p in pool if (st_g, p) not in used] or [f"g{len(used)}"]
            name = draw(st.sampled_from(free))
            used.add((st_g, name))
            names.append(name)
    rows = [(name, step) for name, step, size in zip(names, group_step, sizes) for _ in range(size)]
    n = len(rows)
    rows = [rows[i] for i in draw(st.permutations(range(n)))]
    uids = [u for u, _ in rows]
    lengths = [draw(st.integers(1, max_len)) for _ in range(n)]
    row_masks = [draw(masks(L)) for L in lengths]
    if min_valid and sum(map(sum, row_masks)) < min_valid:
        row_masks[0] = [1] * lengths[0]
        if sum(map(sum, row_masks)) < min_valid:
            lengths[0] = max(lengths[0], min_valid)
            row_masks[0] = [1] * lengths[0]
    kind = score_kind or draw(st.sampled_from(["rm_scores", "rm_scores", "score"]))
    r = Rollout(uids=uids, masks=row_masks)
    if binary:
        outcome = [float(draw(st.integers(0, 1))) for _ in range(n)]
        if kind == "rm_scores":
            r.rm_scores = [[0.0] * (L - 1) + [x] for L, x in zip(lengths, outcome)]
        else:
            r.score = outcome
    elif kind == "rm_scores":
        r.rm_scores = [draw(token_scores(L)) for L in lengths]
    else:
        r.score = [draw(dyadic) for _ in range(n)]
    if values:
        r.values = [draw(float_row(-4, 4, L)) for L in lengths]
    if log_probs:
        r.old_log_probs = [draw(float_row(-3, 0, L)) for L in lengths]
        r.ref_log_prob = [draw(float_row(-3, 0, L)) for L in lengths]
    if baselines:
        r.reward_baselines = [draw(dyadic) for _ in range(n)]
    if pi_squared:
        if r.old_log_probs is not None and draw(st.sampled_from(["policy", "policy", "policy", "any"])) == "policy":
            # a policy's own: π² ≤ Σπ² ≤ π² + (1 − π)², π = exp(old_log_prob) (so w = 1 − 2π + Σπ² ≥ 0)
            r.sum_pi_squared = [
                [float(F32(np.exp(F32(lp)) ** 2 + f * (1 - np.exp(F32(lp))) ** 2)) for lp, f in zip(row, fractions)]
                for row, fractions in ((row, draw(float_row(0, 1, len(row)))) for row in r.old_log_probs)]
        else:  # anything in [0, 1]: weights of both signs, which can cancel (baseline_ill_conditioned)
            r.sum_pi_squared = [draw(float_row(0, 1, L)) for L in lengths]
    if steps is not None:
        r.step = [step for _, step in rows]
    return r


@st.composite
def kl_settings(draw, allow_off: bool = True) -> dict:
    """KL reward shaping settings: off (kl_coef 0), or kl_coef > 0 with one of verl's modes (``+`` included)."""
    if allow_off and draw(st.booleans()):
        return {"kl_coef": 0.0}
    coef = draw(st.one_of(st.sampled_from([0.001, 0.01, 0.05, 0.1, 0.2]), st.floats(1e-4, 0.2)))
    return {"kl_coef": coef, "kl_penalty": draw(st.sampled_from(KL_MODES))}


@st.composite
def estimator_settings(draw) -> dict:
    """gamma / lam in [0, 1], std normalisation on or off, both REINFORCE++ mask modes."""
    return {
        "gamma": draw(unit_interval),
        "lam": draw(unit_interval),
        "norm_adv_by_std": draw(st.booleans()),
        "rpp_mask_mode": draw(st.sampled_from(["reset", "carry"])),
    }


def mask_zero_positions(r: Rollout) -> list[tuple[int, int]]:
    """(row, position) of every mask-0 token."""
    return [(i, t) for i, m in enumerate(r.masks) for t, x in enumerate(m) if x == 0]


# ------------------------------------------------------------------ property tests of every estimator
# RLADV_PROPERTY_SCALE=N multiplies every example count (a longer hunt; the default keeps the files short)
SCALE = max(1, int(os.environ.get("RLADV_PROPERTY_SCALE", "1")))
# draws of up to 24 rows x 40 tokens x 3 float lists are large (that is the point): data_too_large is
# expected; the tmp_path_factory fixture is session-wide and each example makes its own folder
HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
# columns these strategies know how to draw; an estimator needing anything else is skipped, not guessed at
DRAWABLE = {"values", "old_log_probs", "ref_log_prob", "reward_baselines", "sum_pi_squared"}


def examples(n: int) -> settings:
    return settings(max_examples=n * SCALE, deadline=None, suppress_health_check=HEALTH)


def needs(name: str) -> dict:
    """``rollouts`` arguments giving the columns (and group sizes) the estimator ``name`` declares it needs
    (the registry's ``columns``, its smallest group with the default settings, and 0/1 scores for an estimator of
    binary rewards); skips estimators that need columns these strategies do not draw."""
    from rladv_cli.config.settings import Params
    from rladv_cli.estimators.registry import ESTIMATORS

    est = ESTIMATORS[name]
    extra = set(est.columns) - DRAWABLE
    if extra:
        pytest.skip(f"{name} needs {sorted(extra)}, which these strategies do not draw")
    return dict(values="values" in est.columns, baselines="reward_baselines" in est.columns,
                pi_squared="sum_pi_squared" in est.columns, min_group=est.min_group(Params()) or 1,
                binary=est.binary_rewards)


def attempt(fn, *args, **kw):
    """``fn(...)``'s result, or the ``ComputeError`` it raised (data on which verl raises too, e.g. a
    whitened batch with <= 1 valid token or a grpo_passk singleton); other errors propagate."""
    from rladv_cli.errors import ComputeError

    try:
        return fn(*args, **kw)
    except ComputeError as err:
        return err


def failed(outcome) -> bool:
    from rladv_cli.errors import ComputeError

    return isinstance(outcome, ComputeError)
