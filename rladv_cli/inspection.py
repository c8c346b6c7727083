"""The mask/group debugger for "the reward looks fine but the model does not learn" (chapter §13).

``inspect`` streams a dataset chunk by chunk with pyarrow/numpy (no torch; only the columns it needs; per row
and per group it keeps a few scalars, never tokens) and returns an ``Inspection``: CONTRACT §5's object
(``rows``, ``tokens``, ``groups``, ``columns``, ``checks``) plus ``layout``, ``scores``, ``masks``, ``kl``,
``advantages`` and ``dead_signal``. ``row_view`` / ``group_view`` show one trajectory token by token / one
uid group member by member, computing advantages with torch through ``rladv_cli.compute``.

Rows: ``rows`` are 0-based within their file, ``where`` gives file:row and ``dataset_rows`` the same rows 0-based
across all files in the order they are read, the numbering ``--row`` (``row_view``) takes.

Actor tokens are the mask as read before rollout rejection, as ``rladv compute`` calls them (its m0): ``loss_mask``
when the file has one (an rladv output's original mask; its ``response_mask`` is the mask after rejection),
else ``response_mask``. ``tokens`` counts them as compute's report does (``rejected``: ``loss_mask`` 1,
``response_mask`` 0; ``used``: ``response_mask`` 1), and the layout, KL shaping, ``score_on_masked_position``
and ``row_without_actor_tokens`` use them, as compute does; advantages and ``credit_reset_at_mask`` use
``response_mask``, the mask the estimator saw. So on an rladv output inspect gives compute's numbers.

Checks, in the chapter's §13 order (``step``); every check is listed with ``pass`` when the data allows
checking it, ``rows`` are the first five rows:

  0 invalid_rows      fail  rows breaking the data contract (validation error, or a null / wrong-length /
                            non-finite ``token_level_rewards``, ``advantages``, null ``session_id``); each
                            is left out of every other statistic and check (it is still counted in ``rows``)
    invalid_columns   fail  a contract column whose Arrow type is wrong; it is ignored
    missing_columns   fail  no ``rm_scores``/``score``; a column ``estimator`` needs; log-probs for ``kl_coef``
  1 non_terminal_score warn (``rm_scores`` only) a non-zero score before the row's last non-padding position
  2 kl_raises_reward  warn  (``kl_coef`` != 0 with ``old_log_probs`` and ``ref_log_prob``) ``β·kld < 0`` on an
                            actor token (``kld`` masked with the actor tokens, as KL shaping runs before rejection)
    kl_flips_sign     warn  same; ``sign(score total) != 0`` and the shaped total has another sign
  3 score_on_masked_position warn  a non-zero score on a position that is not an actor token
    row_without_actor_tokens warn  no actor token
    row_fully_rejected warn (``loss_mask`` present) actor tokens, but no position with ``response_mask`` 1
    loss_mask_differs warn  (``loss_mask`` present) ``response_mask`` drops ``loss_mask`` tokens somewhere in the row
  4 group_size_mismatch warn (``uid``) the batch has a group whose size differs from ``expected_n`` (or, without
                            it, group sizes differ). ``count`` is batches, as in compute's report (inspect reads
                            the dataset as one batch: 0 or 1); ``rows`` are the first rows of the groups off
                            ``expected_n`` or the most common size (ties -> the larger), ``groups.size_mismatch``
                            their number. With ``session_id`` and ``grpo`` the size is the number of distinct
                            sessions (verl folds each session to one row)
    singleton_group   warn  a uid group of one row
    uid_merge_grpo_vectorized warn  distinct string uids that parse to one integer (verl's ``as_torch_index``)
  5 all_equal_group   warn  a group of 2+ rows whose total rewards are all equal (see "reward basis")
    tool_rewards_not_in_score warn (``tool_rewards`` present) an all-equal group whose rows' tool-reward sums
                            differ: signal the score leaves out (verl never adds tool rewards)
  6 advantage_on_masked_position fail  (``advantages`` present) a non-zero advantage where ``response_mask`` is 0
                            (the dead signal's causes are compute's: ``rejected``, ``all_equal_group``,
                            ``singleton``, ``other``)
  7 credit_reset_at_mask warn  a non-zero reward at or after a ``response_mask`` 0 position that has a
                            ``response_mask`` 1 token before it in its row: ``reinforce_plus_plus`` in reset
                            mode cuts that reward off from the earlier tokens (equal to the pipeline's check
                            for γ > 0, up to exact cancellations of rewards)

When ``estimator`` is given, a check whose condition cannot affect it (group checks for an estimator without
groups, ``uid_merge_grpo_vectorized`` for anything but ``grpo_vectorized``, ``credit_reset_at_mask`` for
anything but ``reinforce_plus_plus``) keeps its ``count`` but has status ``pass`` and says why.

Reward basis (``groups.basis``): the KL-shaped reward ``s − β·kld`` when ``kl_coef`` != 0 and both log-prob
columns exist (computed here in numpy from the scores, SEMANTICS §4, ``kld`` on the actor tokens; on an rladv
output made with the same coefficient this is its ``token_level_rewards``, and another coefficient asks
"what if"); else ``token_level_rewards`` when the file has it (a ``rladv compute`` output); else the scores.
Row totals are float64 sums of the float32 values, so an all-equal decision can differ from ``rladv compute``'s
float32 totals in rounding edge cases only.

A dataset that cannot be opened raises ``InputError`` (so does one without a usable ``response_mask``);
bad rows never stop ``inspect``.
"""
from __future__ import annotations

import contextlib
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from . import validation
from .errors import ConfigError, InputError, OutputError, RladvError, shown
from .estimators.registry import ESTIMATORS, Estimator
from .io import Dataset, TableSource, check_output_path
from .columns import array_of, assemble_scores, flat_values, list_offsets, list_sums, score_positions
from .labels import Labels, uid_merges
from .distributions import histogram
from .report import Histogram, Stats, row_stats
from .schema import COLUMNS

PathLike = str | os.PathLike
FIRST_ROWS = 5
Status = Literal["pass", "warn", "fail"]

# Columns inspect reads beyond the contract's: list<number> aligned with response_mask, and session ids.
EXTRA_LISTS = ("token_level_rewards", "advantages")
CAUSES = ("rejected", "all_equal_group", "singleton", "other")  # rladv compute's dead_signal causes, in its order


# ==================================================================================== models
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Check(_Model):
    """One entry of the checklist; ``code`` is a CONTRACT §4 warning code or one of inspect's own."""

    code: str
    status: Status
    message: str
    count: int
    rows: list[int] = Field(description="first few rows flagged (0-based within their file)")
    where: list[str] = Field(default_factory=list, description="the same rows as file:row")
    dataset_rows: list[int] = Field(default_factory=list, description="the same rows 0-based across all files, "
                                    "in the order they are read: what --row takes")
    step: int = Field(description="step of the chapter's §13 debugging order this check belongs to")


class TokenCounts(_Model):
    """As ``rladv compute``'s report counts them: actor tokens are the mask as read before rollout rejection
    (``loss_mask`` when the file has it, e.g. an rladv output; else ``response_mask``)."""

    total: int
    actor: int = Field(description="positions with loss_mask 1 when present, else response_mask 1")
    observation: int = Field(description="total - actor - padding: tool observations")
    padding: int = Field(description="attention_mask 0")
    rejected: int = Field(description="actor tokens with response_mask 0: removed by rollout rejection (0 without loss_mask)")
    used: int = Field(description="positions with response_mask 1: the tokens an estimator trains on")


class Groups(_Model):
    count: int
    sizes: dict[str, int] = Field(description="group size (rows) -> number of groups")
    singletons: int
    all_equal: int = Field(description="groups of 2+ rows whose total rewards (reward basis) are all equal")
    expected_n: Optional[int] = None
    all_equal_scores: int = Field(0, description="groups of 2+ rows whose score totals (before shaping) are equal")
    size_mismatch: int = Field(0, description="groups whose size differs from expected_n, or without it from the most "
                               "common size (sessions for an estimator that folds them)")
    basis: str = Field("score", description="what all_equal compares: score, kl_shaped or token_level_rewards")
    session_sizes: Optional[dict[str, int]] = Field(
        None, description="with a session_id column: distinct sessions per uid -> number of groups")


class Dist(_Model):
    """Mean / min / max of one value per row."""

    mean: Optional[float]
    min: Optional[float]
    max: Optional[float]


class Layout(_Model):
    """Rows as read, before rollout rejection: actor tokens are ``loss_mask`` 1 when present, else ``response_mask`` 1."""

    length: Dist = Field(description="positions per row")
    turns: Dist = Field(description="assistant turns per row: spans of actor tokens")
    observation_spans: Dist = Field(description="tool-observation spans per row (not actor tokens, not padding)")
    rows_ending_in_observation: int = Field(description="rows whose last non-padding position is not an actor token")
    rows_with_padding: int


class Scores(_Model):
    column: Optional[str] = Field(description="rm_scores (token-level) or score (scalar), None when absent")
    score_total: Stats = Field(description="per-row sum of the assembled scores")
    reward_total: Stats = Field(description="per-row sum of the reward basis (equal to score_total without shaping)")
    reward_basis: str
    rows_score_on_masked_position: int
    tokens_score_on_observation: int
    tokens_score_on_padding: int
    rows_non_terminal_score: int
    tool_rewards: Optional[Stats] = Field(None, description="per row with tool calls, the sum of its tool_rewards "
                                          "(None without the column); rladv compute adds them only with --tool-reward-coef")


class LossVsResponse(_Model):
    """``response_mask`` against ``loss_mask``, the mask before rollout rejection (a ``response_mask`` 1 under a
    ``loss_mask`` 0 breaks the contract: its row is an invalid row)."""

    rows: int = Field(description="rows where response_mask drops loss_mask tokens")
    loss_only_tokens: int = Field(description="loss_mask 1, response_mask 0 (rejected by rollout correction?)")


class Masks(_Model):
    has_loss_mask: bool
    has_attention_mask: bool
    loss_vs_response: Optional[LossVsResponse]
    padding_tokens: int
    loss_on_padding_tokens: int = Field(0, description="loss_mask 1 where attention_mask is 0")
    rows_without_actor_tokens: int = Field(description="rows without an actor token (loss_mask 1 when present, else response_mask 1)")
    rows_fully_rejected: int = Field(0, description="rows with actor tokens but no response_mask 1: all rejected")


class KLSummary(_Model):
    penalty: str
    coef: float
    mean: Optional[float] = Field(description="verl's actor/reward_kl_penalty: mean over rows of the row-mean estimate "
                                  "over the actor tokens (the mask before rejection, as KL shaping uses)")
    rows_raises_reward: int
    rows_flips_sign: int


class Advantages(Stats):
    """``advantages`` over response_mask 1 tokens, plus non-zero values where response_mask is 0."""

    masked_nonzero_tokens: int = 0
    masked_nonzero_rows: int = 0


class Cause(_Model):
    tokens: int
    share: float = Field(description="of all actor tokens")


class DeadSignal(_Model):
    base: str = Field(description="what counts as an actor token: loss_mask 1 when present, else response_mask 1")
    actor_tokens: int
    zero_tokens: int = Field(description="actor tokens whose advantage is exactly 0")
    share: float
    by_cause: dict[str, Cause] = Field(description="rladv compute's causes: rejected (response_mask 0), then the "
                                       "used tokens in all-equal groups, in singleton groups, and the other ones")


class RowDistributions(_Model):
    """Per-row histograms for ``inspect --html`` (None when no valid row has the value)."""

    length: Optional[Histogram] = Field(description="rows by positions")
    actor_tokens: Optional[Histogram] = Field(description="rows by actor tokens (loss_mask 1 when present, else response_mask 1)")
    turns: Optional[Histogram] = Field(description="rows by assistant turns")
    score_total: Optional[Histogram] = Field(description="rows by total score")
    reward_total: Optional[Histogram] = Field(description="rows by total reward on the reward basis; None when it is the score")


class Inspection(_Model):
    """What ``rladv inspect --json`` prints: CONTRACT §5's keys first, then inspect's own sections."""

    rows: int
    tokens: TokenCounts
    groups: Groups
    columns: dict[str, str]
    checks: list[Check]
    paths: list[str]
    estimator: Optional[str]
    invalid_rows: int
    layout: Layout
    scores: Optional[Scores]
    masks: Masks
    kl: Optional[KLSummary]
    advantages: Optional[Advantages]
    dead_signal: Optional[DeadSignal]
    distributions: RowDistributions

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    @property
    def status(self) -> Status:
        """The worst status of any check."""
        order = {"pass": 0, "warn": 1, "fail": 2}
        return max((c.status for c in self.checks), key=order.__getitem__, default="pass")

    def check(self, code: str) -> Optional[Check]:
        return next((c for c in self.checks if c.code == code), None)


# ==================================================================================== numpy helpers
def _paths(inputs) -> list:
    return [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)


def _seg_sum(x: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Per-row sums of a flat array (every row has ``L_i >= 1``); bools are counted."""
    if off.size <= 1:
        return np.zeros(0, dtype=np.int64 if x.dtype == bool else x.dtype)
    return np.add.reduceat(x.astype(np.int64) if x.dtype == bool else x, off[:-1])


def _in_row_cumsum(x: np.ndarray, off: np.ndarray, row_of: np.ndarray) -> np.ndarray:
    """Inclusive running sum of ``x`` inside each row."""
    c = np.cumsum(x.astype(np.int64))
    return c - (c - x)[off[:-1]][row_of]


def kl_estimate(logprob: np.ndarray, ref_logprob: np.ndarray, mode: str) -> np.ndarray:
    """verl's per-token KL estimate (SEMANTICS §4.1) in float32 numpy, ``d = logprob − ref_logprob``:
    ``kl``/``k1`` d, ``abs`` |d|, ``mse``/``k2`` 0.5·d², ``low_var_kl``/``k3`` clamp(e^k − k − 1, ±10) with
    ``k = clamp(ref − logprob, ±20)``; ``<mode>+`` has the base mode's value (NaN where 0.5·d² is not finite)."""
    logprob, ref_logprob = logprob.astype(np.float32), ref_logprob.astype(np.float32)
    d = logprob - ref_logprob
    base = mode.removesuffix("+")
    with np.errstate(over="ignore", invalid="ignore"):
        if base in ("kl", "k1"):
            value = d
        elif base == "abs":
            value = np.abs(d)
        elif base in ("mse", "k2"):
            value = np.float32(0.5) * np.square(d)
        elif base in ("low_var_kl", "k3"):
            k = np.clip(ref_logprob - logprob, np.float32(-20), np.float32(20))
            value = np.clip((np.exp(k) - k) - np.float32(1), np.float32(-10), np.float32(10))
        else:
            raise ConfigError(f"--kl-penalty {mode}: not a KL estimate verl implements")
        if mode.endswith("+"):
            k2 = np.float32(0.5) * np.square(d)
            value = value + (k2 - k2)
    return value.astype(np.float32, copy=False)


def _dist(v: np.ndarray) -> Dist:
    if v.size == 0:
        return Dist(mean=None, min=None, max=None)
    return Dist(mean=math.fsum(v.astype(np.float64)) / v.size, min=float(v.min()), max=float(v.max()))


# ==================================================================================== validation per row
def _check_extra(table: pa.Table, path: str, start: int) -> None:
    """Row checks of the non-contract columns inspect reads (same rules as a contract float list)."""
    names = table.column_names
    lengths = pc.list_value_length(array_of(table["response_mask"])).to_numpy(zero_copy_only=False)
    for name in names:
        arr = array_of(table[name])
        if name == "session_id":
            bad = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
            if bad.size:
                raise InputError(path, "is null; every row of a multi-output dataset needs one", row=start + int(bad[0]), column=name)
            continue
        if name not in EXTRA_LISTS:
            continue
        bad = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))
        if bad.size:
            raise InputError(path, "is null; every row needs a value", row=start + int(bad[0]), column=name)
        row_len = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(row_len != lengths)
        if bad.size:
            i = int(bad[0])
            raise InputError(path, f"has length {row_len[i]} but response_mask has {lengths[i]}", row=start + i, column=name)
        values = arr.flatten()
        v = values.to_numpy(zero_copy_only=False).astype(np.float64) if len(values) else np.zeros(0)
        bad = np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False) | ~np.isfinite(v)) if len(values) else bad[:0]
        if bad.size:
            parents = pc.list_parent_indices(arr).to_numpy()
            raise InputError(path, f"has {v[bad[0]]}; values must be finite", row=start + int(parents[bad[0]]), column=name)


def _check_rows(table: pa.Table, path: str, start: int) -> None:
    validation.check_chunk(table, path, start)
    _check_extra(table, path, start)


def invalid_rows(table: pa.Table, path: str, start: int) -> list[tuple[int, str]]:
    """``(row within table, message)`` of every row that fails inspect's checks (``validation.invalid_rows``)."""
    return [(row, str(err)) for row, err in validation.invalid_rows(table, path, start, _check_rows)]


# ==================================================================================== the streaming scan
@dataclass
class _Plan:
    """What the scan reads and computes, fixed from the schema before any row is read."""

    score: Optional[str]
    uid: bool
    attention: bool
    loss: bool
    kl: bool
    tlr: bool
    advantages: bool
    session: bool
    tools: bool
    columns: list[str]

    @property
    def basis(self) -> str:
        return "kl_shaped" if self.kl else "token_level_rewards" if self.tlr else "score"


@dataclass
class _Rows:
    """Per-row scalars of the valid rows, appended chunk by chunk (dataset order)."""

    parts: dict[str, list[np.ndarray]] = field(default_factory=dict)
    _whole: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, **cols: np.ndarray) -> None:
        for k, v in cols.items():
            self.parts.setdefault(k, []).append(np.asarray(v))
            self._whole.pop(k, None)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._whole:
            p = self.parts.get(name)
            self._whole[name] = np.concatenate(p) if p else np.zeros(0)
        return self._whole[name]

    def __contains__(self, name: str) -> bool:
        return name in self.parts


def _scan_chunk(t: pa.Table, plan: _Plan, beta: float, kl_mode: str) -> dict[str, np.ndarray]:
    """Per-row scalars of one validated chunk ``t`` (numpy only)."""
    off = list_offsets(array_of(t["response_mask"]))
    B, N = t.num_rows, int(off[-1])
    lengths = np.diff(off)
    row_of = np.repeat(np.arange(B), lengths)
    pos = np.arange(N) - off[:-1][row_of]
    m = flat_values(t, "response_mask", np.int8).astype(bool)
    pad = flat_values(t, "attention_mask", np.int8) == 0 if plan.attention else np.zeros(N, dtype=bool)
    # m0: the mask as read before rollout rejection (an rladv output's loss_mask), as rladv compute's m0
    m0 = flat_values(t, "loss_mask", np.int8).astype(bool) if plan.loss else m
    first = pos == 0
    actor = _seg_sum(m0, off)
    obs = ~m0 & ~pad
    prev_m0 = np.concatenate([[False], m0[:-1]]) & ~first
    prev_obs = np.concatenate([[False], obs[:-1]]) & ~first
    last = score_positions(off, (~pad).astype(np.int8) if plan.attention else None)[0] - off[:-1]
    used = _seg_sum(m, off) if plan.loss else actor
    out: dict[str, np.ndarray] = dict(
        length=lengths, actor=actor, used=used, padding=_seg_sum(pad, off),
        turns=_seg_sum(m0 & ~prev_m0, off), observation_spans=_seg_sum(obs & ~prev_obs, off),
        ends_in_observation=~m0[off[:-1] + last],
    )
    if plan.loss:
        out.update(loss_only=_seg_sum(m0 & ~m, off), loss_on_padding=_seg_sum(m0 & pad, off))
    r = None
    if plan.score is not None:
        s = assemble_scores(t, off, off[:-1] + last)
        nz = s != 0
        score_total = _seg_sum(s.astype(np.float64), off)
        out.update(score_total=score_total, score_on_observation=_seg_sum(nz & obs, off),
                   score_on_padding=_seg_sum(nz & pad, off),
                   non_terminal=_seg_sum(nz & (pos < last[row_of]), off) > 0)
        r = s
        if plan.kl:
            kld = kl_estimate(flat_values(t, "old_log_probs", np.float32), flat_values(t, "ref_log_prob", np.float32), kl_mode)
            kld = kld * m0.astype(np.float32)  # KL shaping runs before rejection (SEMANTICS §4.2, §10)
            penalty = np.float32(beta) * kld
            r = s - penalty
            out.update(kl_row=_seg_sum(kld.astype(np.float64), off) / (actor + 1e-8),
                       kl_raises=_seg_sum(penalty < 0, off) > 0)
        elif plan.tlr:
            r = flat_values(t, "token_level_rewards", np.float32)
        reward_total = _seg_sum(r.astype(np.float64), off) if r is not s else score_total
        out["reward_total"] = reward_total
        if plan.kl:
            sign = np.sign(score_total)
            out["kl_flips"] = (sign != 0) & (np.sign(reward_total) != sign)
        # credit_reset_at_mask: from the first mask-0 position that has an actor token before it, every
        # later reward (at a mask-0 position or beyond it) is cut off from those earlier actor tokens.
        actor_before = _in_row_cumsum(m, off, row_of) - m
        cut = _in_row_cumsum(~m & (actor_before > 0), off, row_of) > 0
        out["credit_cut"] = _seg_sum(cut & (r != 0), off) > 0
    if plan.tools:
        out["tool_sum"], out["tool_calls"] = list_sums(t, "tool_rewards")
    if plan.advantages:
        a = flat_values(t, "advantages", np.float32).astype(np.float64)
        am = np.where(m, a, 0.0)
        total = _seg_sum(am, off)
        mean = np.divide(total, used, out=np.zeros(B), where=used > 0)
        out.update(
            adv_count=used, adv_sum=total, adv_m2=_seg_sum(np.where(m, (a - mean[row_of]) ** 2, 0.0), off),
            adv_min=np.minimum.reduceat(np.where(m, a, np.inf), off[:-1]) if B else np.zeros(0),
            adv_max=np.maximum.reduceat(np.where(m, a, -np.inf), off[:-1]) if B else np.zeros(0),
            adv_pos=_seg_sum(m & (a > 0), off), adv_neg=_seg_sum(m & (a < 0), off),
            adv_masked_nonzero=_seg_sum(~m & (a != 0), off),
            dead_base=actor, dead_used=_seg_sum(m0 & m & (a == 0), off),
            dead_rejected=_seg_sum(m0 & ~m & (a == 0), off),
        )
    return out


def _plan(ds: Dataset, kl_coef: float) -> tuple[_Plan, list[str]]:
    """Columns to read and computations to run, and a message per unusable contract column."""
    schema = ds.schema
    bad: list[str] = []
    usable: set[str] = set()
    for f in schema:
        if f.name in COLUMNS:
            try:
                validation.check_schema(ds.paths[0], pa.schema([f]), [])
                usable.add(f.name)
            except InputError as err:
                if f.name == "response_mask":
                    raise
                bad.append(str(err))
        elif f.name in EXTRA_LISTS:
            t = f.type
            if validation.is_number_list(t):
                usable.add(f.name)
            else:
                bad.append(f"{ds.paths[0]}: column {f.name}: has type {t}; expected a list of numbers")
        elif f.name == "session_id":
            usable.add(f.name)
    if "response_mask" not in usable:
        raise InputError(ds.paths[0], "missing; inspect needs it to tell actor tokens from the rest", column="response_mask")
    score = "rm_scores" if "rm_scores" in usable else "score" if "score" in usable else None
    kl = kl_coef != 0.0 and score is not None and {"old_log_probs", "ref_log_prob"} <= usable
    plan = _Plan(
        score=score, uid="uid" in usable, attention="attention_mask" in usable, loss="loss_mask" in usable,
        kl=kl, tlr="token_level_rewards" in usable and not kl, advantages="advantages" in usable,
        session="session_id" in usable and "uid" in usable, tools="tool_rewards" in usable, columns=[],
    )
    wanted = {"response_mask", score, "uid" if plan.uid else None, "attention_mask" if plan.attention else None,
              "loss_mask" if plan.loss else None, "token_level_rewards" if plan.tlr else None,
              "advantages" if plan.advantages else None, "session_id" if plan.session else None,
              "tool_rewards" if plan.tools else None}
    if kl:
        wanted |= {"old_log_probs", "ref_log_prob"}
    plan.columns = [c for c in schema.names if c in wanted]
    return plan, bad


def inspect(inputs: Sequence[PathLike] | PathLike, *, expected_n: Optional[int] = None, kl_coef: float = 0.0,
            kl_penalty: str = "kl", estimator: Optional[str] = None, chunk_rows: int = 8192,
            html_path: Optional[PathLike] = None) -> Inspection:
    """Stream a dataset (file, files or folder) and check it in the chapter's §13 order; no torch.

    ``expected_n``: rows each uid group should have (verl's ``rollout.n``); ``kl_coef`` / ``kl_penalty``: check
    KL reward shaping as ``rladv compute`` would apply it; ``estimator``: word messages and statuses for it and
    require its columns; ``html_path``: also write the findings there as a self-contained HTML page. Memory: one
    chunk of ``chunk_rows`` rows plus a few scalars per row and per group.
    Raises ``InputError`` when the dataset cannot be read, ``ConfigError`` for bad arguments.
    """
    est = _estimator(estimator)
    if chunk_rows <= 0:
        raise ConfigError(f"--chunk-rows must be > 0, got {chunk_rows}")
    if expected_n is not None and expected_n < 1:
        raise ConfigError(f"--expected-n must be >= 1, got {expected_n}")
    from .config import KL_MODES

    if kl_penalty.removesuffix("+") not in KL_MODES:
        raise ConfigError(f"--kl-penalty: '{kl_penalty}' is not a KL estimate verl implements; choose one of {', '.join(KL_MODES)}")
    ds = Dataset(_paths(inputs))
    if html_path is not None:
        check_output_path(str(html_path), ds.paths, "--html")
    plan, bad_columns = _plan(ds, kl_coef)
    rows = _Rows()
    labels = Labels(None)
    sessions: set[tuple[int, Any]] = set()
    bad_rows: list[tuple[int, str]] = []  # (dataset row, message)
    for chunk in ds.chunks(plan.columns, chunk_rows):
        t = chunk.table
        bad = invalid_rows(t, chunk.path, chunk.start)
        if bad:
            bad_rows += [(chunk.first_row + i, msg) for i, msg in bad]
            keep = np.ones(t.num_rows, dtype=bool)
            keep[[i for i, _ in bad]] = False
            t = t.filter(pa.array(keep))
            drow = chunk.first_row + np.flatnonzero(keep)
        else:
            drow = chunk.first_row + np.arange(t.num_rows)
        if t.num_rows == 0:
            continue
        cols = _scan_chunk(t, plan, kl_coef, kl_penalty)
        if plan.uid:
            gids = labels.group_ids(t, np.zeros(t.num_rows, dtype=np.int64), chunk.path, chunk.start)
            cols["gid"] = gids
            if plan.session:
                enc = pc.dictionary_encode(t["session_id"]).combine_chunks()
                values = enc.dictionary.to_pylist()
                codes = enc.indices.to_numpy(zero_copy_only=False)
                sessions.update(zip(gids.tolist(), (values[c] for c in codes.tolist())))
        rows.add(drow=drow, **cols)
    result = _summarise(ds, plan, est, rows, labels, sessions, bad_rows, bad_columns, expected_n, kl_coef, kl_penalty)
    if html_path is not None:
        from .html_inspect import write_inspection_html

        write_inspection_html(html_path, result)
    return result


def _estimator(name: Optional[str]) -> Optional[Estimator]:
    if name is None:
        return None
    if name not in ESTIMATORS:
        raise ConfigError(f"--estimator: unknown estimator '{name}'; choose one of {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]


# ==================================================================================== summary and checks
class _Checks:
    """Builds the checklist; rows given as dataset rows are shown 0-based within their file."""

    def __init__(self, ds: Dataset):
        self.ds = ds
        self.items: list[Check] = []

    def add(self, code: str, step: int, count: int, rows, ok: str, bad: str, *, severity: Status = "warn",
            relevant: bool = True, irrelevant: str = "") -> None:
        first = [int(r) for r in list(rows)[:FIRST_ROWS]]
        where = [self.ds.locate(r) for r in first]
        if count == 0:
            status, message = "pass", ok
        elif relevant:
            status, message = severity, bad
        else:
            status, message = "pass", f"{bad} ({irrelevant})"
        self.items.append(Check(code=code, status=status, message=message, count=int(count), rows=[w[1] for w in where],
                                where=[f"{p}:{r}" for p, r in where], dataset_rows=first, step=step))


def _flagged(rows: _Rows, name: str) -> np.ndarray:
    return rows["drow"][rows[name].astype(bool)] if name in rows else np.zeros(0, dtype=np.int64)


def _summarise(ds: Dataset, plan: _Plan, est: Optional[Estimator], rows: _Rows, labels: Labels,
               sessions: set, bad_rows: list, bad_columns: list[str], expected_n: Optional[int],
               kl_coef: float, kl_penalty: str) -> Inspection:
    checks = _Checks(ds)
    name = est.name if est else None
    # ---- step 0: the data contract
    checks.add("invalid_rows", 0, len(bad_rows), [r for r, _ in bad_rows],
               "every row passed the data contract (CONTRACT §1) on the columns inspect reads",
               f"{len(bad_rows)} row(s) break the data contract and are left out of everything below; first: "
               f"{bad_rows[0][1] if bad_rows else ''}", severity="fail")
    checks.add("invalid_columns", 0, len(bad_columns), [], "every contract column has an accepted Arrow type",
               f"{len(bad_columns)} column(s) have the wrong type and are ignored: {'; '.join(bad_columns)}", severity="fail")
    missing = []
    if plan.score is None:
        missing.append("rm_scores or score (a dataset needs one; score checks skipped)")
    if est is not None:
        names = set(ds.columns)
        missing += [c for c in validation.required_columns(names, name) if c not in names and c not in ("rm_scores", "score")]
    if kl_coef != 0.0 and not {"old_log_probs", "ref_log_prob"} <= set(ds.columns):
        missing.append("old_log_probs and ref_log_prob (needed for --kl-coef; KL checks skipped)")
    checks.add("missing_columns", 0, len(missing), [], "every column the checks" + (f" and {name}" if name else "") + " need is present",
               "missing: " + "; ".join(missing), severity="fail")

    length, actor, used, padding = rows["length"], rows["actor"], rows["used"], rows["padding"]
    total_tokens, actor_tokens, pad_tokens = int(length.sum()), int(actor.sum()), int(padding.sum())
    used_tokens = int(used.sum())
    rejected_tokens = int(rows["loss_only"].sum()) if plan.loss else 0
    scored = plan.score is not None
    # ---- step 1: are the score totals what you expect?
    if plan.score == "rm_scores":
        fl = _flagged(rows, "non_terminal")
        checks.add("non_terminal_score", 1, fl.size, fl, "every non-zero rm_score sits on its row's last non-padding position",
                   f"{fl.size} row(s) have a non-zero rm_score before their last position: expected for a process "
                   "reward; for an outcome reward check that the row total is what you meant")
    # ---- step 2: KL shaping
    kl = None
    if plan.kl:
        raises, flips = _flagged(rows, "kl_raises"), _flagged(rows, "kl_flips")
        checks.add("kl_raises_reward", 2, raises.size, raises, f"no token's reward rises through {kl_penalty} shaping",
                   f"{raises.size} row(s) have a token whose KL estimate times the coefficient is negative, so shaping "
                   f"raised its reward ({kl_penalty} estimates are signed; k3/low_var_kl is not)")
        checks.add("kl_flips_sign", 2, flips.size, flips, "KL shaping changes no row's total-reward sign",
                   f"{flips.size} row(s) changed the sign of their total reward through KL shaping "
                   f"(coefficient {kl_coef:g} too large for these scores?)")
        kl_row = rows["kl_row"]
        kl = KLSummary(penalty=kl_penalty, coef=kl_coef, mean=float(math.fsum(kl_row) / kl_row.size) if kl_row.size else None,
                       rows_raises_reward=int(raises.size), rows_flips_sign=int(flips.size))
    # ---- step 3: masks
    # actor tokens: the mask before rollout rejection (an rladv output's loss_mask), as compute's checks use
    actor_mask = "loss_mask" if plan.loss else "response_mask"
    if scored:
        fl = rows["drow"][(rows["score_on_observation"] + rows["score_on_padding"]) > 0]
        checks.add("score_on_masked_position", 3, fl.size, fl, f"every non-zero score sits on a {actor_mask} 1 position",
                   f"{fl.size} row(s) carry a non-zero score on a {actor_mask} 0 position (a tool observation or "
                   "padding): outcome estimators still count it, GAE/REINFORCE++/REMAX drop it")
    without = rows["drow"][actor == 0]
    checks.add("row_without_actor_tokens", 3, without.size, without, f"every row has a token with {actor_mask} 1",
               f"{without.size} row(s) have no position with {actor_mask} 1: they get no advantage (and still enter "
               "their group's baseline)")
    fully_rejected = rows["drow"][(actor > 0) & (used == 0)]
    if plan.loss:
        checks.add("row_fully_rejected", 3, fully_rejected.size, fully_rejected,
                   "every row with loss_mask 1 somewhere keeps a response_mask 1 token",
                   f"{fully_rejected.size} row(s) lost every actor token to rollout rejection (loss_mask 1 but "
                   "response_mask 0 everywhere): they get no advantage and still enter their group's baseline")
        fl = rows["drow"][rows["loss_only"] > 0]
        checks.add("loss_mask_differs", 3, fl.size, fl, "loss_mask equals response_mask everywhere",
                   f"{fl.size} row(s) where response_mask drops {int(rows['loss_only'].sum())} loss_mask token(s) "
                   "(rollout-rejected tokens in an rladv or verl output; compute's estimator leaves them out)")
    # ---- steps 4-5: groups
    groups = Groups(count=0, sizes={}, singletons=0, all_equal=0, expected_n=expected_n, basis=plan.basis)
    group_flags: dict[str, np.ndarray] = {}
    if plan.uid:
        groups, group_flags = _group_checks(checks, plan, est, rows, labels, sessions, expected_n)
    # ---- step 6: advantages
    adv, dead = None, None
    if plan.advantages:
        adv, dead = _advantage_summary(checks, plan, rows, group_flags)
    # ---- step 7: REINFORCE++ credit
    if scored:
        fl = _flagged(rows, "credit_cut")
        checks.add("credit_reset_at_mask", 7, fl.size, fl,
                   "no reward sits at or after a mask-0 position that follows a response_mask 1 token",
                   f"{fl.size} row(s) have a reward at or after a response_mask 0 position that follows a "
                   "response_mask 1 token: reinforce_plus_plus in reset mode (the default) cuts it off from the "
                   "earlier tokens (--rpp-mask-mode carry passes it through)",
                   relevant=name in (None, "reinforce_plus_plus"), irrelevant=f"only reinforce_plus_plus resets; {name} is unaffected")

    scores = None
    if scored:
        scores = Scores(
            column=plan.score, score_total=row_stats(rows["score_total"]), reward_total=row_stats(rows["reward_total"]),
            reward_basis=plan.basis,
            rows_score_on_masked_position=int(((rows["score_on_observation"] + rows["score_on_padding"]) > 0).sum()),
            tokens_score_on_observation=int(rows["score_on_observation"].sum()),
            tokens_score_on_padding=int(rows["score_on_padding"].sum()),
            rows_non_terminal_score=int(rows["non_terminal"].sum()) if "non_terminal" in rows else 0,
            tool_rewards=row_stats(rows["tool_sum"][rows["tool_calls"] > 0]) if plan.tools else None,
        )
    masks = Masks(
        has_loss_mask=plan.loss, has_attention_mask=plan.attention,
        loss_vs_response=LossVsResponse(
            rows=int((rows["loss_only"] > 0).sum()), loss_only_tokens=int(rows["loss_only"].sum()),
        ) if plan.loss else None,
        padding_tokens=pad_tokens, loss_on_padding_tokens=int(rows["loss_on_padding"].sum()) if plan.loss else 0,
        rows_without_actor_tokens=int(without.size), rows_fully_rejected=int(fully_rejected.size),
    )
    layout = Layout(length=_dist(length), turns=_dist(rows["turns"]), observation_spans=_dist(rows["observation_spans"]),
                    rows_ending_in_observation=int(rows["ends_in_observation"].astype(bool).sum()),
                    rows_with_padding=int((padding > 0).sum()))
    checks.items.sort(key=lambda c: c.step)  # stable: the order above within a step
    return Inspection(
        rows=ds.num_rows,
        tokens=TokenCounts(total=total_tokens, actor=actor_tokens, observation=total_tokens - actor_tokens - pad_tokens,
                           padding=pad_tokens, rejected=rejected_tokens, used=used_tokens),
        groups=groups, columns={f.name: str(f.type) for f in ds.schema}, checks=checks.items, paths=list(ds.paths),
        estimator=name, invalid_rows=len(bad_rows), layout=layout, scores=scores,
        masks=masks, kl=kl, advantages=adv, dead_signal=dead,
        distributions=RowDistributions(
            length=histogram(length, integer=True), actor_tokens=histogram(actor, integer=True),
            turns=histogram(rows["turns"], integer=True),
            score_total=histogram(rows["score_total"]) if scored else None,
            reward_total=histogram(rows["reward_total"]) if scored and plan.basis != "score" else None,
        ),
    )


def _group_checks(checks: _Checks, plan: _Plan, est: Optional[Estimator], rows: _Rows, labels: Labels,
                  sessions: set, expected_n: Optional[int]) -> tuple[Groups, dict[str, np.ndarray]]:
    """Steps 4-5: group sizes, singletons, uid merges, all-equal groups; per-group flags for the dead signal."""
    gid, drow = rows["gid"].astype(np.int64), rows["drow"].astype(np.int64)
    G = len(labels.groups)
    size = np.bincount(gid, minlength=G)
    first = np.full(G, np.iinfo(np.int64).max)
    np.minimum.at(first, gid, drow)
    present = size > 0  # groups whose rows were all invalid have no valid member
    uses_groups = est is None or est.groups
    no_groups = f"{est.name if est else ''} does not use groups"

    session_sizes = None
    size_for_n = size
    if plan.session:
        per_group = np.bincount(np.array([g for g, _ in sessions], dtype=np.int64), minlength=G)
        session_sizes = {str(k): int(v) for k, v in sorted(Counter(per_group[present].tolist()).items())}
        if est is not None and est.folds_sessions:
            size_for_n = per_group
    counts = Counter(size_for_n[present].tolist())
    reference = expected_n if expected_n is not None else (
        max(counts, key=lambda s: (counts[s], s)) if counts else 0)
    mismatch = present & (size_for_n != reference)
    what = "sessions" if size_for_n is not size else "rows"
    hist = ", ".join(f"{k} {what} x{v}" for k, v in sorted(counts.items()))
    off = int(mismatch.sum())
    # count: batches whose group sizes differ, as rladv compute's report counts; inspect has no --batch-key, so
    # the dataset is one batch. The rows point at the groups off the reference size.
    checks.add("group_size_mismatch", 4, 1 if off else 0, np.sort(first[mismatch]),
               f"every uid group has {reference} {what}" + (" (--expected-n)" if expected_n is not None else ""),
               ("group sizes differ from --expected-n" if expected_n is not None else "group sizes differ")
               + f" in the batch (count: batches, as in rladv compute's report; inspect reads the dataset as one "
               f"batch): {off} of {int(present.sum())} uid group(s) do not have {reference} {what}"
               + (" (--expected-n)" if expected_n is not None else " (the most common size)")
               + f", their first rows shown; sizes: {hist}. Check that every prompt got rollout.n samples"
               + ("; with multi-output sessions grpo counts sessions, other estimators count output rows"
                  if plan.session else ""),
               relevant=uses_groups, irrelevant=no_groups)
    single = present & (size == 1)
    singleton_text = (est.singleton if est is not None and est.singleton else
                      "grpo gives R/(1+eps) (the raw score, not 0), rloo keeps R, rloo_vectorized gives 0")
    checks.add("singleton_group", 4, int(single.sum()), np.sort(first[single]), "no uid group has a single row",
               f"{int(single.sum())} uid group(s) have one row, so there is no group baseline; "
               f"{est.name + ': ' if est else ''}{singleton_text}", relevant=uses_groups, irrelevant=no_groups)
    uids = [u for (_, u) in labels.groups]
    merges = uid_merges(uids)
    merged_gids = [i for (_, u), i in labels.groups.items() if present[i] and any(u in m for m in merges)]
    shown = "; ".join("/".join(repr(u) for u in m) for m in merges[:3])
    checks.add("uid_merge_grpo_vectorized", 4, len(merges), np.sort(first[merged_gids]) if merged_gids else [],
               "no two uids would be merged by verl's grpo_vectorized",
               f"{len(merges)} set(s) of uids that verl's grpo_vectorized converts to one integer and merges into "
               f"one group ({shown}); rladv compute merges them too for grpo_vectorized",
               relevant=est is None or est.int_uids,
               irrelevant=f"only grpo_vectorized merges; {est.name if est else ''} keeps them apart")
    if plan.session:
        uid_of = {g: u for (_, u), g in labels.groups.items()}
        joined = [sorted(pairs, key=repr) for pairs in labels.session_key_collisions(sessions)]
        joined_gids = sorted({g for pairs in joined for g, _ in pairs})
        shown = "; ".join(" and ".join(f"({uid_of[g]!r}, {s!r})" for g, s in pairs) for pairs in joined[:3])
        checks.add("session_key_collision", 4, len(joined), np.sort(first[joined_gids]) if joined_gids else [],
                   "no two (uid, session_id) pairs join to the same verl session key",
                   f"{len(joined)} verl session key(s) f'{{uid}}_{{session_id}}' shared by two or more sessions "
                   f"({shown}): verl 0.9.1 folds them into one session, rladv compute keeps them apart and warns",
                   relevant=est is None or est.folds_sessions,
                   irrelevant=f"only grpo folds sessions; {est.name if est else ''} counts every output row")

    flags: dict[str, np.ndarray] = {"singleton": single}
    all_equal_scores = 0
    all_equal = np.zeros(G, dtype=bool)
    if plan.score is not None:
        def equal(total: np.ndarray) -> np.ndarray:
            lo, hi = np.full(G, np.inf), np.full(G, -np.inf)
            np.minimum.at(lo, gid, total)
            np.maximum.at(hi, gid, total)
            return (size > 1) & (lo == hi)

        eq_scores = equal(rows["score_total"])
        all_equal = equal(rows["reward_total"]) if plan.basis != "score" else eq_scores
        all_equal_scores = int(eq_scores.sum())
        basis = {"score": "score totals", "kl_shaped": "KL-shaped reward totals",
                 "token_level_rewards": "token_level_rewards totals"}[plan.basis]
        extra = "" if plan.basis == "score" else f" ({all_equal_scores} by score totals before shaping)"
        checks.add("all_equal_group", 5, int(all_equal.sum()), np.sort(first[all_equal]),
                   f"no group of 2+ rows has equal {basis}",
                   f"{int(all_equal.sum())} group(s) of 2+ rows have equal {basis}{extra}: R - mean = 0, no learning "
                   "signal from them (float32 rounding can leave tiny non-zero advantages, as in verl)",
                   relevant=uses_groups, irrelevant=no_groups)
        if plan.tools:
            differ = all_equal & ~equal(rows["tool_sum"])
            checks.add("tool_rewards_not_in_score", 5, int(differ.sum()), np.sort(first[differ]),
                       "no all-equal group has rows whose tool_rewards differ",
                       f"{int(differ.sum())} all-equal group(s) have rows whose tool_rewards differ: a signal the "
                       f"{basis} leave out (verl never adds tool rewards; rladv compute --tool-reward-coef C adds C * "
                       "their sum to each row's score)", relevant=uses_groups, irrelevant=no_groups)
    flags["all_equal_group"] = all_equal
    groups = Groups(
        count=int(present.sum()), sizes={str(k): int(v) for k, v in sorted(Counter(size[present].tolist()).items())},
        singletons=int(single.sum()), all_equal=int(all_equal.sum()), expected_n=expected_n,
        all_equal_scores=all_equal_scores, size_mismatch=off, basis=plan.basis, session_sizes=session_sizes,
    )
    flags["gid"] = gid
    return groups, flags


def _advantage_summary(checks: _Checks, plan: _Plan, rows: _Rows,
                       group_flags: dict[str, np.ndarray]) -> tuple[Advantages, DeadSignal]:
    """Step 6: advantages over response_mask 1 tokens; non-zero values off the mask; the dead signal by cause."""
    count, total, m2 = rows["adv_count"], rows["adv_sum"], rows["adv_m2"]
    n = int(count.sum())
    masked_nz = rows["adv_masked_nonzero"]
    fl = rows["drow"][masked_nz > 0]
    checks.add("advantage_on_masked_position", 6, fl.size, fl, "advantages are 0 wherever response_mask is 0",
               f"{fl.size} row(s) have a non-zero advantage on a response_mask 0 position "
               f"({int(masked_nz.sum())} token(s)): observation/padding tokens would be trained on "
               "(verl's GAE does this before masking in the loss)", severity="fail")
    off_mask = dict(masked_nonzero_tokens=int(masked_nz.sum()), masked_nonzero_rows=int(fl.size))
    if n == 0:
        adv = Advantages(count=0, mean=None, std=None, min=None, max=None, **off_mask)
    else:
        mean = math.fsum(total) / n
        with np.errstate(invalid="ignore", divide="ignore"):
            row_mean = np.where(count > 0, total / np.maximum(count, 1), 0.0)
        M2 = math.fsum(m2) + math.fsum(count * (row_mean - mean) ** 2)
        pos, neg = int(rows["adv_pos"].sum()), int(rows["adv_neg"].sum())
        adv = Advantages(
            count=n, mean=mean, std=math.sqrt(M2 / (n - 1)) if n > 1 else 0.0,
            min=float(rows["adv_min"][count > 0].min()), max=float(rows["adv_max"][count > 0].max()),
            fraction_positive=pos / n, fraction_negative=neg / n, fraction_zero=(n - pos - neg) / n, **off_mask,
        )
    base, live = rows["dead_base"], rows["dead_used"]
    by = dict.fromkeys(CAUSES, 0)
    by["rejected"] = int(rows["dead_rejected"].sum())
    if group_flags:
        gid = group_flags["gid"]
        eq = group_flags["all_equal_group"][gid]
        single = group_flags["singleton"][gid] & ~eq
        by["all_equal_group"] = int(live[eq].sum())
        by["singleton"] = int(live[single].sum())
        by["other"] = int(live[~eq & ~single].sum())
    else:
        by["other"] = int(live.sum())
    n_base = int(base.sum())
    zero = sum(by.values())
    share = (lambda k: k / n_base if n_base else 0.0)
    dead = DeadSignal(base="loss_mask" if plan.loss else "response_mask", actor_tokens=n_base, zero_tokens=zero,
                      share=share(zero), by_cause={k: Cause(tokens=v, share=share(v)) for k, v in by.items()})
    return adv, dead


# ==================================================================================== rendering
_STATUS_STYLE = {"pass": "[green]PASS[/green]", "warn": "[yellow]WARN[/yellow]", "fail": "[bold red]FAIL[/bold red]"}
STEP_TITLES = {
    0: "data contract", 1: "score totals", 2: "KL shaping", 3: "masks", 4: "group sizes",
    5: "all-equal groups", 6: "advantages", 7: "REINFORCE++ credit",
}


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.6g}"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.1%}"


def render_inspection(ins: Inspection, console) -> None:
    """Print an ``Inspection`` with rich: inputs, layout, groups, scores, masks, advantages, then the checklist
    (status, code, count, first rows) in the chapter's order."""
    from rich.table import Table

    console.print(
        f"[bold]rladv inspect[/bold]  {ins.rows} rows ({ins.invalid_rows} invalid) from {len(ins.paths)} file(s)"
        + (f"  estimator [cyan]{ins.estimator}[/cyan]" if ins.estimator else "")
    )
    t = Table(title="layout", show_header=False, box=None, pad_edge=False)
    tk = ins.tokens
    t.add_row("tokens actor / observation / padding", f"{tk.actor} / {tk.observation} / {tk.padding} (of {tk.total})"
              + (f"; {tk.rejected} actor token(s) rejected, {tk.used} used" if tk.rejected else ""))
    lay = ins.layout
    t.add_row("length per row mean / max", f"{_fmt(lay.length.mean)} / {_fmt(lay.length.max)}")
    t.add_row("assistant turns per row mean / max", f"{_fmt(lay.turns.mean)} / {_fmt(lay.turns.max)}")
    t.add_row("observation spans per row mean / max", f"{_fmt(lay.observation_spans.mean)} / {_fmt(lay.observation_spans.max)}")
    t.add_row("rows ending in an observation", str(lay.rows_ending_in_observation))
    t.add_row("rows with padding", str(lay.rows_with_padding))
    g = ins.groups
    sizes = ", ".join(f"{k}x{v}" for k, v in g.sizes.items()) or "-"
    t.add_row("groups (size x count)", f"{g.count} ({sizes})" + (f", expected n={g.expected_n}" if g.expected_n else ""))
    if g.session_sizes is not None:
        t.add_row("sessions per uid (size x count)", ", ".join(f"{k}x{v}" for k, v in g.session_sizes.items()))
    t.add_row("singletons / all-equal", f"{g.singletons} / {g.all_equal} (basis: {g.basis})")
    m = ins.masks
    if m.loss_vs_response is not None:
        lv = m.loss_vs_response
        t.add_row("loss_mask vs response_mask", f"{lv.rows} rows differ: {lv.loss_only_tokens} loss-only tokens")
    if ins.kl is not None:
        t.add_row("KL", f"{ins.kl.penalty}, coef {_fmt(ins.kl.coef)}, mean estimate {_fmt(ins.kl.mean)}")
    console.print(t)
    if ins.scores is not None or ins.advantages is not None:
        s = Table(title="values (+ - 0: shares)", header_style="bold")
        for col in ("", "count", "mean", "std", "min", "max", "+", "-", "0"):
            s.add_column(col, justify="right" if col else "left", no_wrap=not col)
        entries = []
        if ins.scores is not None:
            entries.append((f"{ins.scores.column} / row", ins.scores.score_total))
            if ins.scores.reward_basis != "score":
                entries.append(("reward / row", ins.scores.reward_total))
            if ins.scores.tool_rewards is not None:
                entries.append(("tool_rewards / row with calls", ins.scores.tool_rewards))
        if ins.advantages is not None:
            entries.append(("advantage / token", ins.advantages))
        for label, st in entries:
            s.add_row(label, str(st.count), _fmt(st.mean), _fmt(st.std), _fmt(st.min), _fmt(st.max),
                      *(_pct(f) for f in (st.fraction_positive, st.fraction_negative, st.fraction_zero)))
        console.print(s)
    if ins.dead_signal is not None:
        d = ins.dead_signal
        causes = ", ".join(f"{k} {c.tokens} ({c.share:.1%})" for k, c in d.by_cause.items() if c.tokens)
        console.print(f"dead signal: {d.zero_tokens} of {d.actor_tokens} actor tokens ({d.share:.1%}) have advantage 0"
                      + (f" - {causes}" if causes else ""))
    one_file = len(ins.paths) == 1
    c = Table(title="checks, in the chapter's §13 order" + (f" (rows of {ins.paths[0]})" if one_file else ""),
              header_style="bold")
    for col in ("status", "code", "count", "first rows", "message"):
        c.add_column(col, overflow="fold", no_wrap=col in ("status", "count"))
    step = None
    for item in ins.checks:
        if item.step != step:
            step = item.step
            c.add_row("", f"[bold]{step}. {STEP_TITLES.get(step, '')}[/bold]", "", "", "")
        rows = ", ".join(str(r) for r in item.rows) if one_file else ", ".join(
            f"{w} (row {d})" for w, d in zip(item.where[:3], item.dataset_rows))
        c.add_row(_STATUS_STYLE[item.status], item.code, str(item.count), rows, item.message)
    console.print(c)


# ==================================================================================== row and group views
class Span(_Model):
    kind: Literal["assistant", "observation", "padding", "rejected"]
    start: int
    end: int = Field(description="exclusive")


class RowView(_Model):
    """One trajectory, token by token; lists are per position (None when the column is absent/not computed)."""

    path: str
    row: int = Field(description="0-based within its file")
    dataset_row: int = Field(description="0-based across all files in the order they are read: what --row takes")
    uid: Optional[str]
    estimator: Optional[str]
    source: str = Field(description="where rewards/advantages come from: 'file' or 'compute (scope)'")
    length: int
    token_id: Optional[list[int]]
    response_mask: list[int]
    loss_mask: Optional[list[int]]
    attention_mask: Optional[list[int]]
    score: Optional[list[float]]
    reward: Optional[list[float]]
    value: Optional[list[float]]
    advantage: Optional[list[float]]
    returns: Optional[list[float]]
    spans: list[Span]
    score_total: Optional[float]
    reward_total: Optional[float]
    tool_rewards: Optional[list[float]] = Field(None, description="the row's tool_rewards, one per tool call (None "
                                                "without the column or for a null list)")
    notes: list[str]
    error: Optional[str] = None


class Reason(_Model):
    code: str
    message: str


class GroupMember(_Model):
    path: str
    row: int = Field(description="0-based within its file")
    dataset_row: int = Field(description="0-based across all files: what --row takes")
    batch: Optional[str]
    length: int
    actor_tokens: int
    rejected_tokens: int
    score_total: Optional[float]
    reward_total: Optional[float]
    advantage: Optional[float] = Field(description="advantage on the row's first response_mask 1 token")
    advantage_min: Optional[float]
    advantage_max: Optional[float]


class GroupStat(_Model):
    batch: Optional[str]
    size: int
    mean: Optional[float] = Field(description="mean of the members' total rewards")
    std: Optional[float] = Field(description="Bessel std of the total rewards (None for one row)")
    all_equal: bool
    singleton: bool


class GroupView(_Model):
    uid: str
    estimator: str
    scope: str = Field(description="rows compute ran on: group (the uid's rows), dataset (whole), or row")
    formula: str
    members: list[GroupMember]
    groups: list[GroupStat] = Field(description="one per batch (one entry without --batch-key)")
    why: list[Reason]
    error: Optional[str] = None


def _scope(est: Estimator, settings: dict) -> str:
    """Rows an estimator needs, with these settings (``Config`` fields), to give one row its exact advantage:
    the row, its group, or the whole dataset (batch whitening or a batch-wide scale; an adaptive KL coefficient
    stepped batch by batch; rollout correction, whose batch statistics and checks take every row)."""
    adaptive_kl = settings.get("kl_coef") and settings.get("kl_ctrl") == "adaptive" and settings.get("batch_key")
    if est.whiten or est.batch_wide or adaptive_kl or settings.get("rollout_rs") or settings.get("rollout_is"):
        return "dataset"
    return "group" if est.groups else "row"


def _read_all(ds: Dataset) -> pa.Table:
    tables = [c.table for c in ds.chunks(None, 65536)]
    return pa.concat_tables(tables) if tables else ds.schema.empty_table()


def _read_rows(ds: Dataset, keep) -> tuple[pa.Table, np.ndarray]:
    """Rows for which ``keep(chunk_table) -> (B,) bool`` holds, and their dataset-wide indices, in order."""
    parts, index = [], []
    for c in ds.chunks(None, 8192):
        sel = np.asarray(keep(c), dtype=bool)
        if sel.any():
            parts.append(c.table.filter(pa.array(sel)))
            index.append(c.first_row + np.flatnonzero(sel))
    if not parts:
        return ds.schema.empty_table(), np.zeros(0, dtype=np.int64)
    return pa.concat_tables(parts), np.concatenate(index)


def _read_row(ds: Dataset, row: int) -> pa.Table:
    """Dataset row ``row`` as a one-row table (reading stops at its chunk)."""
    for c in ds.chunks(None, 8192):
        if c.first_row <= row < c.first_row + c.table.num_rows:
            return c.table.slice(row - c.first_row, 1)
    raise ConfigError(f"--row {row}: the dataset has {ds.num_rows} rows (0-based)")


def _uid_equals(table: pa.Table, uid: str) -> np.ndarray:
    as_str = pc.cast(table["uid"], pa.string())
    return pc.fill_null(pc.equal(as_str, pa.scalar(str(uid), pa.string())), False).to_numpy(zero_copy_only=False)


def _group_rows(ds: Dataset, uid: str) -> tuple[pa.Table, np.ndarray]:
    """The rows of uid group ``uid`` and their dataset-wide indices; errors when there is no such group."""
    if "uid" not in ds.columns:
        raise InputError(ds.paths[0], "missing; --uid needs a uid column", column="uid")
    table, index = _read_rows(ds, lambda c: _uid_equals(c.table, uid))
    if table.num_rows == 0:
        raise ConfigError(f"--uid {uid}: no row has this uid")
    return table, index


_TABLE = TableSource(pa.table({})).paths[0]  # how ``compute`` names an in-memory table
_TABLE_ROW = re.compile(re.escape(_TABLE) + r"(?:(:?) row (\d+))?")


def _in_files(err: RladvError, ds: Dataset, index: np.ndarray) -> RladvError:
    """``err``, raised computing the rows ``index`` (dataset-wide) read into one table, as ``rladv compute``
    would give it: naming the file and the row within it instead of the table and the row within that."""
    if isinstance(err, InputError) and err.path == _TABLE:
        path, row = ds.locate(int(index[err.row])) if err.row is not None else (ds.paths[0], None)
        return InputError(path, err.message, row=row, column=err.column, kind=err.kind)

    def where(m: re.Match) -> str:
        if m.group(2) is None:
            return shown(ds.paths[0])  # a whole-table problem (a column's type): every file has the schema
        path, row = ds.locate(int(index[int(m.group(2))]))
        return f"{shown(path)}{m.group(1)} row {row}"

    message = _TABLE_ROW.sub(where, str(err))
    return err if message == str(err) else type(err)(message)


def pad_widths(ds: Dataset, batch_key: Optional[str]) -> Optional[dict]:
    """Each batch's longest response in the dataset (batch key value, None without one -> length), for
    ``compute(pad_widths=...)`` on rows taken out of it; None where the columns for it are missing (``compute``
    then says what is)."""
    if "response_mask" not in ds.columns or (batch_key is not None and batch_key not in ds.columns):
        return None
    labels, widths = Labels(batch_key), np.zeros(0, dtype=np.int64)
    for c in ds.chunks(["response_mask", *([batch_key] if batch_key else [])], 65536):
        ids = labels.batch_ids(c.table, c.path, c.start)
        widths = np.pad(widths, (0, len(labels.batches) - widths.size))
        np.maximum.at(widths, ids, pc.list_value_length(c.table["response_mask"]).fill_null(0).to_numpy())
    return {value: int(widths[i]) for value, i in labels.batches.items()}


def _compute_on(table: pa.Table, estimator: str, settings: dict, widths: Optional[dict] = None) -> pa.Table:
    from .api import compute

    out, _ = compute(table, estimator=estimator, pad_widths=widths, **settings)
    return out


def _compute_rows(ds: Dataset, est: Estimator, target: np.ndarray, uid: Optional[str], settings: dict,
                  ) -> tuple[pa.Table, np.ndarray, str]:
    """Run ``compute`` on the rows ``est`` needs and return the output rows ``target`` (dataset indices) plus
    the scope used. Group-local estimators run on the uid's rows only, padded to their batches' longest
    responses in the dataset (``pad_widths``), so they round as in a run over it; whitened/batch-wide ones on
    the whole dataset (in memory), as are runs whose settings tie rows together (``_scope``)."""
    scope = _scope(est, settings)
    if scope == "dataset":
        table, index, widths = _read_all(ds), np.arange(ds.num_rows), None
    else:
        if scope == "group" and uid is not None:
            table, index = _read_rows(ds, lambda c: _uid_equals(c.table, uid))
        else:
            table, index = _read_rows(ds, lambda c: np.isin(c.first_row + np.arange(c.table.num_rows), target))
        widths = pad_widths(ds, settings.get("batch_key"))
    try:
        out = _compute_on(table, est.name, settings, widths)
    except RladvError as err:
        raise _in_files(err, ds, index) from None
    return out.take(pa.array(np.searchsorted(index, target))), target, scope


def _list(table: pa.Table, name: str, i: int = 0):
    return table[name][i].as_py() if name in table.column_names else None


def _spans(m: list[int], loss: Optional[list[int]], att: Optional[list[int]]) -> list[Span]:
    kinds = []
    for t, mt in enumerate(m):
        if att is not None and att[t] == 0:
            kinds.append("padding")
        elif mt:
            kinds.append("assistant")
        elif loss is not None and loss[t]:
            kinds.append("rejected")
        else:
            kinds.append("observation")
    spans: list[Span] = []
    for t, k in enumerate(kinds):
        if spans and spans[-1].kind == k:
            spans[-1].end = t + 1
        else:
            spans.append(Span(kind=k, start=t, end=t + 1))
    return spans


def _row_scores(table: pa.Table, i: int) -> Optional[list[float]]:
    t = table.slice(i, 1)
    off = list_offsets(array_of(t["response_mask"]))
    pad = flat_values(t, "attention_mask", np.int8) == 0 if "attention_mask" in t.column_names else None
    column = "rm_scores" if "rm_scores" in t.column_names else "score" if "score" in t.column_names else None
    if column is None:
        return None
    position, _ = score_positions(off, None if pad is None else (~pad).astype(np.int8))
    return assemble_scores(t, off, position).astype(np.float64).tolist()


def row_view(inputs: Sequence[PathLike] | PathLike, row: int, *, estimator: Optional[str] = None,
             **settings) -> RowView:
    """Row ``row`` token by token: 0-based across all the files of ``inputs`` in the order they are read (files
    as given, a folder's or glob's sorted), so for a single file its row within the file. The view carries
    both numbers: ``dataset_row`` (``row`` here) and ``path``/``row`` (within that file).

    Without ``estimator`` rewards/advantages/returns are the file's own columns (an ``rladv compute`` output has
    them). With one, ``rladv_cli.compute`` runs with ``settings`` (``Config`` fields) on the rows that estimator
    needs: the row alone (e.g. ``remax``), its uid group (group estimators), or the whole dataset for whitened
    ones (``gae``, ``reinforce_plus_plus*``) and ``gpg``, whose numbers depend on every row of the batch, and
    where the settings tie rows together (``_scope``). Rows run on their own are padded to their batch's
    longest response in the dataset, as the whole run pads them (``pad_widths``), so their totals round the
    same (SEMANTICS §7.2). A failing computation is reported in ``error``, not raised.
    """
    est = _estimator(estimator)
    ds = Dataset(_paths(inputs))
    if not 0 <= row < ds.num_rows:
        across = f" across its {len(ds.paths)} files" if len(ds.paths) > 1 else ""
        raise ConfigError(f"--row {row}: the dataset has {ds.num_rows} rows{across} (0-based)")
    table = _read_row(ds, row)
    path, file_row = ds.locate(row)
    validation.check_chunk(table, path, file_row)
    uid = str(table["uid"][0].as_py()) if "uid" in table.column_names else None
    source, error, out = "file", None, None
    if est is not None:
        try:
            out, _, scope = _compute_rows(ds, est, np.array([row]), uid, settings)
            source = f"compute ({scope})"
        except RladvError as err:
            error = str(err)
    src = out if out is not None else table
    m = _list(src, "response_mask")
    loss = _list(src, "loss_mask")
    att = _list(table, "attention_mask")
    score = _row_scores(table, 0)
    reward = _list(src, "token_level_rewards")
    advantage, returns = _list(src, "advantages"), _list(src, "returns")
    notes = []
    spans = _spans(m, loss, att)
    if score is not None:
        for t, v in enumerate(score):
            if v != 0 and not m[t]:
                kind = "padding" if att is not None and att[t] == 0 else "rejected" if loss and loss[t] else "observation"
                notes.append(f"score_on_masked_position: score {v:g} at position {t} ({kind}): outcome estimators count "
                             "it, GAE/REINFORCE++/REMAX drop it")
    basis = reward if reward is not None else score
    if estimator in (None, "reinforce_plus_plus") and basis is not None and _credit_cut(m, basis):
        notes.append("credit_reset_at_mask: a reward sits at or after a response_mask 0 position that follows an actor "
                     "token; reinforce_plus_plus in reset mode (the default) cuts it off from the earlier tokens")
    if not any(m):
        notes.append("row_without_actor_tokens: no position has response_mask 1, so no token gets an advantage")
    tools = table["tool_rewards"][0].as_py() if "tool_rewards" in table.column_names else None
    if tools:
        notes.append(f"tool_rewards: {len(tools)} tool call(s), sum {math.fsum(tools):g}; in the score only if "
                     "rladv compute ran with --tool-reward-coef (verl never adds them)")
    if loss is not None and any(lt and not mt for lt, mt in zip(loss, m)):
        notes.append(f"{sum(1 for lt, mt in zip(loss, m) if lt and not mt)} assistant token(s) rejected "
                     "(loss_mask 1, response_mask 0): advantage 0, their reward still counts in R")
    return RowView(
        path=path, row=file_row, dataset_row=row, uid=uid, estimator=estimator, source=source, length=len(m),
        token_id=_list(table, "responses"), response_mask=[int(x) for x in m],
        loss_mask=None if loss is None else [int(x) for x in loss], attention_mask=att, score=score,
        reward=reward, value=_list(table, "values"), advantage=advantage, returns=returns, spans=spans,
        score_total=math.fsum(score) if score is not None else None,
        reward_total=math.fsum(reward) if reward is not None else None, tool_rewards=tools, notes=notes, error=error,
    )


def _credit_cut(m: list[int], reward: list[float]) -> bool:
    """One row: a non-zero reward at or after a mask-0 position that has an actor token before it."""
    seen_actor = cut = False
    for mt, r in zip(m, reward):
        cut = cut or (seen_actor and not mt)
        seen_actor = seen_actor or bool(mt)
        if cut and r != 0:
            return True
    return False


_KIND_STYLE = {"assistant": "green", "observation": "cyan", "padding": "dim", "rejected": "red"}


def _num(values: Optional[list], t: int) -> str:
    if values is None:
        return ""
    v = values[t]
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def render_row(view: RowView, console, *, max_tokens: int = 200) -> None:
    """Print a ``RowView`` as a table, one line per position, coloured by span (assistant green, observation
    cyan, rejected red, padding dim). Rows longer than ``max_tokens`` show the first and last tokens of each
    span and one summary line for the middle."""
    from rich.table import Table

    v = view
    spans = ", ".join(f"{s.kind} {s.start}-{s.end - 1}" for s in v.spans[:12])
    spans += f" ({len(v.spans) - 12} more spans)" if len(v.spans) > 12 else ""
    # --row N counts across all files; where that differs from the row within its file, show both
    where = f"{v.path}:{v.row}" if v.dataset_row == v.row else f"row {v.dataset_row} of the dataset = {v.path}:{v.row}"
    console.print(f"[bold]{where}[/bold]" + (f"  uid {v.uid}" if v.uid is not None else "")
                  + f"  {v.length} positions: {spans}")
    console.print(f"score total {_fmt(v.score_total)}, reward total {_fmt(v.reward_total)}; values from {v.source}"
                  + (f" ({v.estimator})" if v.estimator else ""))
    if v.error:
        console.print(f"[bold red]compute failed:[/bold red] {v.error}")
    t = Table(header_style="bold")
    cols = [("pos", None), ("token", v.token_id), ("kind", None), ("resp", v.response_mask), ("loss", v.loss_mask),
            ("att", v.attention_mask), ("score", v.score), ("reward", v.reward), ("value", v.value),
            ("advantage", v.advantage), ("return", v.returns)]
    cols = [(n, vals) for n, vals in cols if n in ("pos", "kind") or vals is not None]
    for n, _ in cols:
        t.add_column(n, justify="left" if n == "kind" else "right", overflow="fold", no_wrap=n in ("kind", "pos"))

    def line(pos: int, kind: str) -> None:
        cells = [str(pos) if n == "pos" else kind if n == "kind" else _num(vals, pos) for n, vals in cols]
        t.add_row(*cells, style=_KIND_STYLE[kind])

    def summary(s: Span, a: int, b: int) -> None:
        """One line for positions ``a..b-1``: each column shows its range (or its one value) over them."""
        cells = []
        for n, vals in cols:
            if n == "pos":
                cells.append(f"{a}-{b - 1}")
            elif n == "kind":
                cells.append(f"{s.kind} x{b - a}")
            elif n == "token":
                cells.append("...")
            else:
                seg = vals[a:b]
                lo, hi = min(seg), max(seg)
                cells.append(_num([lo], 0) if lo == hi else f"{_num([lo], 0)}..{_num([hi], 0)}")
        t.add_row(*cells, style="italic " + _KIND_STYLE[s.kind])

    if v.length <= max_tokens:
        for s in v.spans:
            for pos in range(s.start, s.end):
                line(pos, s.kind)
    else:
        k = max_tokens // (2 * len(v.spans))
        for s in v.spans:
            if s.end - s.start <= max(2 * k + 1, 1):
                for pos in range(s.start, s.end):
                    line(pos, s.kind)
            elif k == 0:
                summary(s, s.start, s.end)
            else:
                for pos in range(s.start, s.start + k):
                    line(pos, s.kind)
                summary(s, s.start + k, s.end - k)
                for pos in range(s.end - k, s.end):
                    line(pos, s.kind)
    console.print(t)
    for note in v.notes:
        console.print(f"[yellow]note[/yellow] {note}")


def group_view(inputs: Sequence[PathLike] | PathLike, uid: str, *, estimator: str = "grpo", **settings) -> GroupView:
    """The rows of uid group ``uid``: each member's score and reward totals, the group mean/std, each member's
    advantage under ``estimator``, and why (singleton fallback, all-equal totals, rejected or empty rows still
    in the baseline, scores on masked positions).

    ``rladv_cli.compute`` runs with ``settings`` on the uid's rows only for group-local estimators (their
    numbers depend on the group alone); whitened estimators (``gae``, ``reinforce_plus_plus*``) and ``gpg``
    depend on the whole batch, so they run on the whole dataset (held in memory) and the members are taken
    from it (as for settings that tie rows together, ``_scope``). A group run on its own is padded to its
    batch's longest response in the dataset (``pad_widths``), so its totals round as in the whole run
    (SEMANTICS §7.2). With ``batch_key`` the uid's rows in different batches are
    different groups: ``groups`` has one entry per batch. A failing computation (e.g. ``grpo_passk`` on a
    singleton) is reported in ``error``, not raised.
    """
    est = _estimator(estimator)
    ds = Dataset(_paths(inputs))
    table, index = _group_rows(ds, uid)
    for i in range(table.num_rows):
        path, file_row = ds.locate(int(index[i]))
        validation.check_chunk(table.slice(i, 1), path, file_row)
    scope, error, out = _scope(est, settings), None, None
    try:
        out, _, scope = _compute_rows(ds, est, index, uid, settings)
    except RladvError as err:
        error = str(err)
    batch_key = settings.get("batch_key")
    members: list[GroupMember] = []
    totals: list[Optional[float]] = []
    for i in range(table.num_rows):
        path, file_row = ds.locate(int(index[i]))
        score = _row_scores(table, i)
        src = out.slice(i, 1) if out is not None else table.slice(i, 1)
        m = _list(src, "response_mask")
        loss = _list(src, "loss_mask")
        reward = _list(src, "token_level_rewards")
        adv = _list(src, "advantages")
        reward_total = math.fsum(reward) if reward is not None else (math.fsum(score) if score is not None else None)
        totals.append(reward_total)
        actor_adv = [a for a, mt in zip(adv, m) if mt] if adv is not None else []
        members.append(GroupMember(
            path=path, row=file_row, dataset_row=int(index[i]),
            batch=None if batch_key not in table.column_names else f"{batch_key}={table[batch_key][i].as_py()}",
            length=len(m), actor_tokens=int(sum(m)),
            rejected_tokens=sum(1 for lt, mt in zip(loss, m) if lt and not mt) if loss is not None else 0,
            score_total=math.fsum(score) if score is not None else None, reward_total=reward_total,
            advantage=actor_adv[0] if actor_adv else None,
            advantage_min=min(actor_adv) if actor_adv else None, advantage_max=max(actor_adv) if actor_adv else None,
        ))
    stats: list[GroupStat] = []
    for b in dict.fromkeys(mb.batch for mb in members):
        vals = [t for mb, t in zip(members, totals) if mb.batch == b and t is not None]
        n = sum(1 for mb in members if mb.batch == b)
        mean = math.fsum(vals) / len(vals) if vals else None
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in vals) / (len(vals) - 1)) if len(vals) > 1 else None
        stats.append(GroupStat(batch=b, size=n, mean=mean, std=std, all_equal=len(vals) > 1 and len(set(vals)) == 1,
                               singleton=n == 1))
    return GroupView(uid=str(uid), estimator=est.name, scope=scope, formula=f"{est.summary}; baseline: {est.baseline}",
                     members=members, groups=stats, why=_why(est, members, stats, table, out), error=error)


def _why(est: Estimator, members: list[GroupMember], stats: list[GroupStat], table: pa.Table,
         out: Optional[pa.Table]) -> list[Reason]:
    why: list[Reason] = []
    if not est.groups:
        why.append(Reason(code="no_groups", message=f"{est.name} does not use groups; advantages come from "
                          f"{est.baseline}"))
    for g in stats:
        where = f" ({g.batch})" if g.batch else ""
        if g.singleton:
            why.append(Reason(code="singleton_group", message=f"one row{where}: no group baseline; {est.name}: "
                              f"{est.singleton or 'no group fallback'}"))
        elif g.all_equal:
            why.append(Reason(code="all_equal_group", message=f"every member{where} has total {g.mean:.6g}: R - mean = 0, "
                              "no learning signal (float32 rounding can leave tiny non-zero advantages)"))
        elif g.mean is not None:
            why.append(Reason(code="group_stats", message=f"{g.size} rows{where}: mean {g.mean:.6g}, std {_fmt(g.std)}; "
                              f"a member above the mean gets a positive advantage"))
    for mb in members:
        where = f"{mb.path}:{mb.row}"
        if mb.actor_tokens == 0 and mb.rejected_tokens:
            why.append(Reason(code="row_fully_rejected", message=f"{where}: every actor token rejected; its reward "
                              f"{_fmt(mb.reward_total)} still moves the group baseline"))
        elif mb.rejected_tokens:
            why.append(Reason(code="rejected_in_group_baseline", message=f"{where}: {mb.rejected_tokens} rejected "
                              f"token(s); its full reward {_fmt(mb.reward_total)} still counts in the baseline"))
        elif mb.actor_tokens == 0:
            why.append(Reason(code="row_without_actor_tokens", message=f"{where}: no actor token, so no advantage; "
                              "its reward still enters the group statistics"))
    for i, mb in enumerate(members):
        score = _row_scores(table, i)
        src = out.slice(i, 1) if out is not None else table.slice(i, 1)
        m = _list(src, "response_mask")
        if score is not None and any(v != 0 and not mt for v, mt in zip(score, m)):
            why.append(Reason(code="score_on_masked_position", message=f"{mb.path}:{mb.row}: the score sits on a "
                              "response_mask 0 position; group estimators still count it in R"))
    return why


def render_group(view: GroupView, console) -> None:
    """Print a ``GroupView``: the estimator's formula, group statistics, one line per member, and the reasons."""
    from rich.table import Table

    v = view
    console.print(f"[bold]uid {v.uid}[/bold]  estimator [cyan]{v.estimator}[/cyan] (computed on: {v.scope})")
    console.print(f"[dim]{v.formula}[/dim]")
    for g in v.groups:
        console.print(("" if g.batch is None else f"{g.batch}: ") + f"{g.size} row(s), mean {_fmt(g.mean)}, "
                      f"std {_fmt(g.std)}" + (", all equal" if g.all_equal else "") + (", singleton" if g.singleton else ""))
    if v.error:
        console.print(f"[bold red]compute failed:[/bold red] {v.error}")
    paths = {mb.path for mb in v.members}
    batches = any(mb.batch for mb in v.members)
    shifted = any(mb.dataset_row != mb.row for mb in v.members)  # not the dataset's first file: --row N differs
    t = Table(header_style="bold", title=f"rows of {next(iter(paths))}" if len(paths) == 1 else None)
    cols = ["row"] + (["batch"] if batches else []) + ["actor", "rejected", "score total", "reward total", "advantage",
                                                       "adv min..max"]
    for col in cols:
        t.add_column(col, justify="left" if col in ("row", "batch") else "right", overflow="fold")
    for mb in v.members:
        span = "" if mb.advantage_min is None else (
            f"{mb.advantage_min:.6g}" if mb.advantage_min == mb.advantage_max else f"{mb.advantage_min:.6g}..{mb.advantage_max:.6g}")
        style = "red" if mb.advantage is None else "green" if mb.advantage > 0 else "yellow" if mb.advantage < 0 else "dim"
        cells = [(str(mb.row) if len(paths) == 1 else f"{mb.path}:{mb.row}")
                 + (f" (row {mb.dataset_row})" if shifted else "")] + ([mb.batch or ""] if batches else [])
        cells += [str(mb.actor_tokens), str(mb.rejected_tokens), _fmt(mb.score_total), _fmt(mb.reward_total),
                  _fmt(mb.advantage), span]
        t.add_row(*cells, style=style)
    console.print(t)
    for r in v.why:
        console.print(f"[yellow]{r.code}[/yellow] {r.message}")


def export_group(inputs: Sequence[PathLike] | PathLike, uid: str, folder: PathLike, *, estimator: str = "grpo",
                 **settings) -> list[str]:
    """Write a minimal reproducer of group ``uid`` into ``folder`` (created when missing): ``group.parquet`` (the
    group's rows, only the columns the run reads) and ``command.txt`` (the ``rladv compute`` line, with paths
    relative to ``folder``, so the folder can travel). Whitened and batch-wide estimators also depend on rows
    outside the group; the command file says so. Returns the paths written."""
    import shlex

    from .config import Config, command_flags
    from .io import SideFiles

    run = Config(estimator=estimator, **settings)
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ConfigError(f"--export {folder}: exists and is not a folder")
    ds = Dataset(_paths(inputs))
    table, _ = _group_rows(ds, uid)
    needed = set(validation.required_columns(
        ds.columns, estimator, kl=bool(settings.get("kl_coef")),
        rollout_correction=bool(settings.get("rollout_rs") or settings.get("rollout_is")),
        batch_key=settings.get("batch_key"), reward_components=settings.get("reward_components") or (),
        tool_rewards=settings.get("tool_reward_coef") is not None))
    needed |= {c for c in ("uid", "attention_mask", "loss_mask", "responses", "old_log_probs", "rollout_log_probs",
                           "session_id", "output_index") if c in ds.columns}
    import pyarrow.parquet as pq

    parquet = pa.BufferOutputStream()
    pq.write_table(table.select([c for c in ds.columns if c in needed]), parquet, compression="zstd")
    command = ["rladv", "compute", "group.parquet", "--estimator", estimator, *command_flags(run.changed()), "-o", "group.adv.parquet"]
    text = " ".join(shlex.quote(part) for part in command) + "\n"
    text += ("# run it in this folder. Row totals are summed as verl sums a row padded to its batch's longest "
             "response, so alone the group's totals (and advantages) can differ from the full run's by float32 "
             "rounding\n")
    if _scope(ESTIMATORS[estimator], settings) == "dataset":
        text += (f"# note: with these settings {estimator} also depends on rows outside this group (batch "
                 "whitening, a batch-wide scale, an adaptive KL coefficient or rollout correction's batch "
                 "statistics); on this file alone the numbers can differ from the full dataset's\n")
    created = not os.path.isdir(folder)
    if created:
        try:
            os.makedirs(folder)
        except OSError as err:
            raise OutputError(f"--export {folder}: cannot create the folder ({err.strerror})") from None
    data, script = os.path.join(folder, "group.parquet"), os.path.join(folder, "command.txt")
    try:
        for target in (data, script):
            check_output_path(target, ds.paths, option="--export")
        with SideFiles() as files:  # both files, or neither
            files.write(data, parquet.getvalue().to_pybytes())
            files.write(script, text)
            files.commit()
    except BaseException:
        if created:  # the folder this export made, empty again: it goes too (never masking the error)
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    return [data, script]
