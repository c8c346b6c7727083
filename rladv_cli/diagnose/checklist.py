"""The mask/group debugger for "the reward looks fine but the model does not learn" (chapter §13).

``inspect`` streams a dataset chunk by chunk with pyarrow/numpy (no torch; only the columns it needs; per row
and per group it keeps a few scalars, never tokens) and returns an ``Inspection``: CONTRACT §5's object
(``rows``, ``tokens``, ``groups``, ``columns``, ``checks``) plus ``layout``, ``scores``, ``masks``, ``kl``,
``advantages`` and ``dead_signal``. ``--row`` and ``--uid`` (one trajectory token by token, one uid group member
by member, computed through ``rladv_cli.compute``) live in ``views.py``.

Rows: ``rows`` are 0-based within their file, ``where`` gives file:row and ``dataset_rows`` the same rows 0-based
across all files in the order they are read, the numbering ``--row`` takes.

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

import math
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field

from ..contract import validation
from ..contract.columns import array_of, assemble_scores, flat_values, list_offsets, list_sums, score_positions
from ..contract.labels import Labels, uid_merges
from ..contract.schema import COLUMNS
from ..errors import ConfigError, InputError
from ..estimators.registry import Estimator, get_estimator
from ..io.read import Dataset
from ..io.write import check_output_path
from ..report.distributions import histogram
from ..report.model import Histogram, Stats, row_stats

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
    est = None if estimator is None else get_estimator(estimator)
    if chunk_rows <= 0:
        raise ConfigError(f"--chunk-rows must be > 0, got {chunk_rows}")
    if expected_n is not None and expected_n < 1:
        raise ConfigError(f"--expected-n must be >= 1, got {expected_n}")
    from ..config.settings import KL_MODES

    if kl_penalty.removesuffix("+") not in KL_MODES:
        raise ConfigError(f"--kl-penalty: '{kl_penalty}' is not a KL estimate verl implements; choose one of {', '.join(KL_MODES)}")
    ds = Dataset(inputs)
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
        from .html import write_inspection_html

        write_inspection_html(html_path, result)
    return result


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
        missing += [c for c in validation.required_columns(names, est.input_columns) if c not in names and c not in ("rm_scores", "score")]
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
