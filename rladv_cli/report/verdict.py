"""The verdict (docs/debugging.md, "The verdict"): what share of a batch's actor tokens, rows and groups carry
learning signal under the chosen estimator, and why the rest does not, largest cause first.

Both ``rladv compute`` (from the advantages it computed) and ``rladv inspect`` (from the file's advantages, or
predicted from its groups and masks) call ``judge`` with one value per row; it needs numpy only. Causes are
disjoint shares of the actor tokens (the mask before rollout rejection), assigned in this order:

- ``rejected``: actor tokens rollout rejection removed (``response_mask`` 0 under ``loss_mask`` 1);
- ``no_uid``: a group estimator without a ``uid`` column: no group, no baseline;
- ``singleton_group``: the used tokens of rows alone in their group: no baseline to compare against (whatever
  the estimator's fallback gives them, it is not a group-relative signal);
- ``all_equal_group``: the used tokens of groups whose rows all have the same total reward: ``R - mean = 0``;
- ``kl_only_group``: the used tokens of groups whose rows tie on their scores but not on their KL-shaped totals:
  their advantages come from the KL penalty alone, with no signal from the task;
- ``epsilon_tie_group``: for an estimator that divides by ``std + eps``, the used tokens of groups whose reward
  std is above 0 but at most ``9·eps``: a near tie (a verifier's rounding) whose advantages epsilon and float32
  rounding decide, not the task;
- ``zero_advantage``: any other used token whose advantage is exactly 0 (known only from advantages).

Each cause's level comes from its own thresholds (``THRESHOLDS``: a share at or above ``warn`` warns, at or
above ``fail`` fails, anything less is a note; docs/debugging.md says why each is where it is), and so does the
share without signal as a whole (``no_signal``). With token weights (``--loss-agg-mode``), each cause also has its
share of the gradient mass, and the gradient hazards (``report.gradient``) join the verdict with their levels.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Literal, Mapping, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .checks import MEASURES, Limits

Level = Literal["ok", "note", "warn", "fail"]
LEVELS: tuple[Level, ...] = ("ok", "note", "warn", "fail")
Thresholds = Mapping[str, Limits]
# Each check's measure and its levels (docs/debugging.md, "Levels"), declared in the catalogue of checks
THRESHOLDS: Thresholds = MappingProxyType({code: m.limits for code, m in MEASURES.items()})


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VerdictCause(_Model):
    code: str = Field(description="rejected, no_uid, singleton_group, all_equal_group, kl_only_group, "
                      "epsilon_tie_group or zero_advantage")
    level: Level
    tokens: int = Field(description="actor tokens this cause leaves without signal")
    share: float = Field(description="of all actor tokens")
    rows: int = Field(description="rows it touches")
    groups: Optional[int] = Field(None, description="groups it touches (group causes)")
    mass_share: Optional[float] = Field(None, description="of the gradient mass sum |token_weight| (with "
                                        "--loss-agg-mode): what these tokens weigh in the update")
    message: str
    example: Optional[str] = Field(None, description="one command that shows an example")


class VerdictHazard(_Model):
    """A gradient hazard (docs/weights.md): how the loss aggregation spreads the update, not whether tokens
    carry signal."""

    code: str = Field(description="length_bias, mass_concentration or truncated_negative_mass")
    level: Level
    measure: float = Field(description="the figure its thresholds apply to (docs/debugging.md, Levels)")
    message: str
    example: Optional[str] = Field(None, description="one command that shows an example")


class GroupOutcomes(_Model):
    """Groups of 2+ rows by how their rows' total rewards (the estimator's R) split."""

    groups: int = Field(description="groups of 2+ rows")
    all_zero: float = Field(description="share whose rows all have R = 0 (too hard, or the reward never arrives)")
    all_top: float = Field(description="share whose rows all have the batch's largest R, above 0 (too easy)")
    all_equal_other: float = Field(description="share whose rows all have another common R")
    mixed: float = Field(description="share whose rows' R differ: the groups a group estimator learns from")


class StepVerdict(_Model):
    """One training step (a ``--batch-key`` value, or a file when several are read without one)."""

    step: str
    rows: int
    actor_tokens: int
    signal_share: float
    level: Level
    singleton_share: Optional[float] = Field(None, description="of the step's groups")
    all_zero_share: Optional[float] = Field(None, description="of the step's groups of 2+ rows")
    all_top_share: Optional[float] = Field(None, description="of the step's groups of 2+ rows")
    rejected_share: float = Field(description="of the step's actor tokens")
    kl_mean: Optional[float] = Field(None, description="mean per-row KL estimate, when KL shaping is on")


class Verdict(_Model):
    level: Level
    headline: str
    estimator: Optional[str]
    basis: Literal["advantages", "groups"] = Field(
        description="advantages: zero advantages counted; groups: predicted from groups and masks (no advantages)")
    actor_tokens: int
    signal_tokens: int
    signal_share: float = Field(description="of the actor tokens")
    rows: int
    signal_rows: int = Field(description="rows with at least one token that carries signal")
    groups: Optional[int] = Field(None, description="uid groups (None without uid or for an estimator without groups)")
    signal_groups: Optional[int] = Field(None, description="groups with at least one row that carries signal")
    causes: list[VerdictCause] = Field(description="why the rest carries no signal, largest share first")
    signal_mass_share: Optional[float] = Field(
        None, description="of the gradient mass, on the tokens that carry signal (with --loss-agg-mode)")
    hazards: list[VerdictHazard] = Field(default_factory=list, description="gradient hazards at warn or above "
                                         "(with --loss-agg-mode)")
    hints: list[str] = Field(default_factory=list, description="the likely causes, named")
    group_outcomes: Optional[GroupOutcomes] = None
    steps: Optional[list[StepVerdict]] = Field(None, description="per training step, when there are several")

    def at_least(self, level: str) -> bool:
        """Whether this verdict is ``level`` (``note``, ``warn`` or ``fail``) or worse."""
        return LEVELS.index(self.level) >= LEVELS.index(level)


@dataclass(frozen=True)
class RowsToJudge:
    """One value per row ``(B,)`` of what a run found, for ``judge``.

    ``actor``: actor tokens (before rejection); ``used``: those left after rejection; ``zero``: used tokens whose
    advantage is exactly 0 (None when no advantages are known); ``group``: dense group id (None without
    ``uid``); ``reward``: the row's total reward R (the basis of the all-equal decision); ``dataset_row``: the
    row's number across the dataset (for the example commands); ``all_equal``: per group ``(G,)``, the groups
    the run found all-equal (default: equal ``reward``; ``gdpo`` compares its components); ``step``: dense step
    id (None: one step); ``kl``: per-row mean KL estimate (None without KL shaping); ``score_equal``: per group
    ``(G,)``, the groups whose scores tie before shaping (None: the same as ``all_equal``); ``mass``: the row's
    gradient mass ``Σ_t |token_weight|`` (None without token weights)."""

    actor: np.ndarray
    used: np.ndarray
    zero: Optional[np.ndarray]
    group: Optional[np.ndarray]
    reward: Optional[np.ndarray]
    dataset_row: np.ndarray
    all_equal: Optional[np.ndarray] = None
    step: Optional[np.ndarray] = None
    kl: Optional[np.ndarray] = None
    score_equal: Optional[np.ndarray] = None
    mass: Optional[np.ndarray] = None


@dataclass(frozen=True)
class Context:
    """What ``judge`` says the verdict is about: the estimator (None: judged as a group estimator would be when
    ``uid`` exists), whether it forms groups, its singleton rule (the registry's text), the step names, and how
    to show an example: ``row_command(dataset_row)``, ``group_command(group_id)``; ``epsilon``: what the
    estimator adds to the group std before dividing by it (None: it does not divide so); ``thresholds``: the
    levels of the checks (``THRESHOLDS`` where a code is missing); ``weighing``: the trainer and loss mode the
    token weights follow (e.g. "verl token-mean"), None without them."""

    estimator: Optional[str]
    uses_groups: bool
    singleton_rule: Optional[str]
    row_command: Callable[[int], str]
    group_command: Callable[[int], str]
    step_names: Sequence[str] = ()
    epsilon: Optional[float] = None
    thresholds: Thresholds = field(default_factory=lambda: THRESHOLDS)
    weighing: Optional[str] = None


def check_thresholds(given: Mapping[str, Limits]) -> None:
    """``ValueError`` naming the first entry of ``given`` that is not a check's, or whose levels are not numbers
    >= 0 with warn <= fail."""
    import difflib

    for code, (warn, fail) in given.items():
        if code not in THRESHOLDS:
            close = difflib.get_close_matches(code, list(THRESHOLDS), n=1)
            raise ValueError(f"{code}: not a check of the verdict; " + (f"did you mean {close[0]}?" if close else
                                                                       f"one of {', '.join(THRESHOLDS)}"))
        if any(x is not None and not x >= 0 for x in (warn, fail)):
            raise ValueError(f"{code}: a level's threshold is a number >= 0")
        if warn is not None and fail is not None and fail < warn:
            raise ValueError(f"{code}: fail at {fail:g} is below warn at {warn:g}")


def level_for(code: str, measure: float, thresholds: Thresholds = THRESHOLDS) -> Level:
    """The level of check ``code`` at ``measure``: ok at 0 or below, fail or warn at or above its thresholds
    (``thresholds``, else ``THRESHOLDS``), a note below them."""
    if measure <= 0:
        return "ok"
    warn, fail = thresholds.get(code, THRESHOLDS[code])
    if fail is not None and measure >= fail:
        return "fail"
    return "warn" if warn is not None and measure >= warn else "note"


def pct(x: float) -> str:
    """A share as a percentage that never rounds to 0% or 100% unless it is."""
    if x in (0, 1):
        return f"{x:.0%}"
    s = f"{x:.1%}"
    return ">99.9%" if s == "100.0%" else "<0.1%" if s == "0.0%" else s


@dataclass(frozen=True)
class _Split:
    """Per row: tokens of each cause and of signal; per group: singleton, all-equal, common value."""

    causes: dict[str, np.ndarray]
    signal: np.ndarray
    singleton: Optional[np.ndarray]  # (G,)
    all_equal: Optional[np.ndarray]  # (G,)
    kl_only: Optional[np.ndarray]  # (G,) tied on scores, not on the shaped totals
    eps_tie: Optional[np.ndarray]  # (G,) 0 < std <= 9·eps
    value: Optional[np.ndarray]  # (G,) each group's smallest R: an all-equal group's only one
    top: float  # the largest R of any row
    present: Optional[np.ndarray]  # (G,) groups with a row here


EPS_TIE = 9.0  # a group std at most this many epsilons: epsilon is a tenth or more of the denominator


def group_min_max(x: np.ndarray, g: np.ndarray, G: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-group minimum and maximum ``(G,)`` of the rows' ``x (B,)`` in float64 (±inf for a group without rows)."""
    lo, hi = np.full(G, np.inf), np.full(G, -np.inf)
    np.minimum.at(lo, g, x.astype(np.float64))
    np.maximum.at(hi, g, x.astype(np.float64))
    return lo, hi


def group_mean_std(x: np.ndarray, g: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-group mean and unbiased std ``(G,)`` of the rows' ``x (B,)`` in float64 (std 0 for one row)."""
    x = x.astype(np.float64)
    mean = np.bincount(g, weights=x, minlength=size.size) / np.maximum(size, 1)
    dev = x - mean[g]
    return mean, np.sqrt(np.bincount(g, weights=dev * dev, minlength=size.size) / np.maximum(size - 1, 1))


def _near_ties(rows: RowsToJudge, g: np.ndarray, size: np.ndarray, epsilon: Optional[float]) -> np.ndarray:
    """Groups ``(G,)`` of 2+ rows whose unbiased std of R (float64) is above 0 and at most ``EPS_TIE·epsilon``."""
    if epsilon is None or rows.reward is None:
        return np.zeros(size.size, dtype=bool)
    std = group_mean_std(rows.reward, g, size)[1]
    return (size > 1) & (std > 0) & (std <= EPS_TIE * epsilon)


def _split(rows: RowsToJudge, ctx: Context, no_uid: bool) -> _Split:
    actor = rows.actor.astype(np.int64)
    used = np.minimum(rows.used.astype(np.int64), actor)
    causes = {"rejected": actor - used}
    left = used.copy()
    singleton = all_equal = value = present = kl_only = eps_tie = None
    top = float(rows.reward.max()) if rows.reward is not None and rows.reward.size else 0.0
    if no_uid:
        causes["no_uid"], left = left, np.zeros_like(left)
    elif ctx.uses_groups and rows.group is not None and rows.group.size:
        g = rows.group.astype(np.int64)
        G = int(g.max()) + 1
        size = np.bincount(g, minlength=G)
        present = size > 0
        singleton = size == 1
        if rows.reward is not None:
            lo, hi = group_min_max(rows.reward, g, G)
            all_equal, value = (size > 1) & (lo == hi), lo
        else:
            all_equal = np.zeros(G, dtype=bool)
        if rows.all_equal is not None:
            all_equal = rows.all_equal.astype(bool)
        kl_only = np.zeros(G, dtype=bool) if rows.score_equal is None else (
            rows.score_equal.astype(bool) & ~all_equal & ~singleton)
        eps_tie = _near_ties(rows, g, size, ctx.epsilon) & ~all_equal & ~singleton & ~kl_only
        in_single, in_equal, in_kl, in_eps = singleton[g], all_equal[g], kl_only[g], eps_tie[g]
        causes["singleton_group"] = np.where(in_single, left, 0)
        causes["all_equal_group"] = np.where(in_equal, left, 0)
        causes["kl_only_group"] = np.where(in_kl, left, 0)
        causes["epsilon_tie_group"] = np.where(in_eps, left, 0)
        left = np.where(in_single | in_equal | in_kl | in_eps, 0, left)
    if rows.zero is not None:
        zero = np.minimum(rows.zero.astype(np.int64), left)
        causes["zero_advantage"], left = zero, left - zero
    return _Split(causes, left, singleton, all_equal, kl_only, eps_tie, value, top, present)


def _outcomes(split: _Split) -> Optional[GroupOutcomes]:
    if split.all_equal is None or split.value is None:
        return None
    multi = split.present & ~split.singleton
    n = int(multi.sum())
    if n == 0:
        return None
    eq, v = split.all_equal & multi, split.value
    zero = eq & (v == 0)
    at_top = eq & (v == split.top) & (split.top > 0)
    other = eq & ~zero & ~at_top
    share = lambda m: float(m.sum()) / n  # noqa: E731
    return GroupOutcomes(groups=n, all_zero=share(zero), all_top=share(at_top), all_equal_other=share(other),
                         mixed=share(multi & ~eq))


def _first(mask: np.ndarray) -> Optional[int]:
    hit = np.flatnonzero(mask)
    return int(hit[0]) if hit.size else None


def _cause_entries(rows: RowsToJudge, ctx: Context, split: _Split, actor_total: int) -> list[VerdictCause]:
    """The causes with tokens, largest first, each with its message and an example command."""
    est = ctx.estimator or "a group estimator"
    out = []
    for code, tokens in split.causes.items():
        hit = tokens > 0
        n_tokens = int(tokens.sum())
        if code in ("singleton_group", "all_equal_group", "kl_only_group", "epsilon_tie_group"):
            flag = {"singleton_group": split.singleton, "all_equal_group": split.all_equal,
                    "kl_only_group": split.kl_only, "epsilon_tie_group": split.eps_tie}[code]
            touched = int((flag & split.present).sum())
            hit = flag[rows.group.astype(np.int64)]
            if not touched:
                continue
        elif not n_tokens:
            continue
        share = n_tokens / actor_total if actor_total else 0.0
        first = _first(hit)
        groups = None
        if code == "rejected":
            msg = f"{n_tokens} actor token(s) in {int(hit.sum())} row(s) were removed by rollout rejection"
            example = ctx.row_command(int(rows.dataset_row[first]))
        elif code == "no_uid":
            msg = f"no uid column: {est} forms no group, so no token has a baseline"
            example = None
        elif code == "singleton_group":
            groups = touched
            rule = f"; {ctx.estimator}: {ctx.singleton_rule}" if ctx.estimator and ctx.singleton_rule else ""
            msg = f"{groups} group(s) have one row: no baseline to compare against{rule}"
            example = ctx.group_command(int(rows.group[first]))
        elif code == "all_equal_group":
            groups = touched
            eq = split.all_equal & split.present
            kinds = [(int((eq & (split.value == 0)).sum()), "all 0: too hard?"),
                     (int((eq & (split.value == split.top) & (split.top > 0)).sum()), "all at the top score: too easy?")]
            kinds = "; ".join(f"{n} {what}" for n, what in kinds if n)
            msg = (f"{groups} group(s) score the same on every row, so R - mean = 0" + (f" ({kinds})" if kinds else ""))
            example = ctx.group_command(int(rows.group[first]))
        elif code == "kl_only_group":
            groups = touched
            msg = (f"{groups} group(s) tie on their scores; only the KL penalty separates their rows, so their "
                   "advantages pull toward the reference with no signal from the task")
            example = ctx.group_command(int(rows.group[first]))
        elif code == "epsilon_tie_group":
            groups = touched
            msg = (f"{groups} group(s) nearly tie: their reward std is at most {EPS_TIE:g} x epsilon "
                   f"({ctx.epsilon:g}), so epsilon and float32 rounding, not the task, set their advantages (a "
                   "verifier's rounding breaking ties?)")
            example = ctx.group_command(int(rows.group[first]))
        else:
            msg = f"{n_tokens} other used token(s) in {int(hit.sum())} row(s) have advantage exactly 0"
            example = ctx.row_command(int(rows.dataset_row[first]))
        mass_share = None
        if rows.mass is not None:
            total = float(rows.mass.sum())
            on = float(rows.mass[hit].sum()) if groups is not None else 0.0  # rejected and zero tokens weigh 0
            mass_share = on / total if total > 0 else 0.0
        out.append(VerdictCause(code=code, level=level_for(code, share, ctx.thresholds), tokens=n_tokens, share=share,
                                rows=int(hit.sum()), groups=groups, mass_share=mass_share, message=msg,
                                example=example))
    out.sort(key=lambda c: (-c.share, -(c.groups or 0)))
    return out


def _hints(ctx: Context, split: _Split, causes: list[VerdictCause], outcomes: Optional[GroupOutcomes],
           n_rows: int) -> list[str]:
    """The likely causes of a large share, named."""
    hints = []
    by = {c.code: c for c in causes}
    if "no_uid" in by:
        hints.append("no uid column: name your prompt-id column with --column uid=COLUMN, or pick an estimator "
                     "without groups (gae, reinforce_plus_plus, remax)")
    if split.singleton is not None and n_rows >= 2 and bool(split.singleton[split.present].all()):
        hints.append("every row has its own uid: is the group column the prompt id? (--column uid=COLUMN names "
                     "another column)")
    if outcomes is not None and outcomes.mixed == 0:
        if outcomes.all_zero == 1:
            hints.append("every reward is 0: too hard for the model, or the reward never reaches the rows (check "
                         "the score column and the verifier)")
        else:
            hints.append("every group scored the same on every sample: the reward does not separate samples")
    if "rejected" in by and by["rejected"].level == "fail":
        hints.append("rollout rejection removes most actor tokens: is the threshold too tight for this policy gap?")
    return hints


def _step_level(split: _Split, actor: int, signal: float, thresholds: Thresholds) -> Level:
    """A step's level: its share without signal, or its worst cause, at their thresholds."""
    if not actor:
        return "fail"
    levels = [level_for("no_signal", 1 - signal, thresholds)]
    levels += [level_for(code, int(tokens.sum()) / actor, thresholds) for code, tokens in split.causes.items()]
    return max(levels, key=LEVELS.index)


def _steps(rows: RowsToJudge, ctx: Context, no_uid: bool) -> Optional[list[StepVerdict]]:
    """Each step's rows judged alone (its groups renumbered; "top" is the step's largest R): one sort by step,
    then a slice per step, so the cost is the rows' and groups', not steps x rows."""
    if rows.step is None or len(ctx.step_names) < 2:
        return None
    order = np.argsort(rows.step, kind="stable")
    bounds = np.searchsorted(rows.step[order], np.arange(len(ctx.step_names) + 1))
    take = lambda a, sel: None if a is None else a[sel]  # noqa: E731
    out = []
    for s, name in enumerate(ctx.step_names):
        sel = order[bounds[s]:bounds[s + 1]]
        if not sel.size:
            continue
        part = RowsToJudge(actor=rows.actor[sel], used=rows.used[sel], zero=take(rows.zero, sel),
                           group=take(rows.group, sel), reward=take(rows.reward, sel), dataset_row=rows.dataset_row[sel])
        if part.group is not None:
            kept, renumbered = np.unique(part.group, return_inverse=True)
            part = RowsToJudge(**{**part.__dict__, "group": renumbered, "all_equal": take(rows.all_equal, kept),
                                  "score_equal": take(rows.score_equal, kept)})
        split = _split(part, ctx, no_uid)
        actor = int(part.actor.sum())
        signal = int(split.signal.sum()) / actor if actor else 0.0
        outcomes = _outcomes(split)
        out.append(StepVerdict(
            step=name, rows=int(sel.size), actor_tokens=actor, signal_share=signal,
            level=_step_level(split, actor, signal, ctx.thresholds),
            singleton_share=None if split.singleton is None else float(split.singleton[split.present].mean()),
            all_zero_share=None if outcomes is None else outcomes.all_zero,
            all_top_share=None if outcomes is None else outcomes.all_top,
            rejected_share=int(split.causes["rejected"].sum()) / actor if actor else 0.0,
            kl_mean=None if rows.kl is None else float(np.mean(rows.kl[sel]))))
    return out


CAUSES = ("ok", "no_actor_tokens", "rejected", "no_uid", "singleton", "all_0", "all_top", "tied", "kl_only",
          "epsilon_tie", "zero_advantage")
_CODE = {name: np.int8(i) for i, name in enumerate(CAUSES)}


@dataclass(frozen=True)
class Labels:
    """What the tables behind the verdict say of each row ``(B,)`` and group ``(G,)``: tokens with signal, and
    the cause as an index into ``CAUSES`` (int8; a group's is ``ok``, ``singleton``, ``all_0``, ``all_top``,
    ``tied``, ``kl_only`` or ``epsilon_tie``). ``group_*`` are None without groups."""

    row_signal: np.ndarray
    row_cause: np.ndarray
    group_signal: Optional[np.ndarray]
    group_cause: Optional[np.ndarray]


def label(rows: RowsToJudge, ctx: Context, *, no_uid: bool = False) -> Labels:
    """Each row's and group's signal tokens and cause, by ``judge``'s rules: a row carries signal when one of its
    tokens does; otherwise its cause is its group's, or what it lacks (actor tokens, tokens left after
    rejection, a uid), or ``zero_advantage``."""
    split = _split(rows, ctx, no_uid)
    group_cause = group_signal = None
    B = rows.actor.size
    from_group = np.full(B, _CODE["ok"])
    if split.present is not None:
        G = split.present.size
        group_cause = np.full(G, _CODE["ok"])
        for flags, name in ((split.eps_tie, "epsilon_tie"), (split.kl_only, "kl_only"), (split.all_equal, "tied")):
            if flags is not None:
                group_cause[flags] = _CODE[name]
        if split.all_equal is not None and split.value is not None:
            group_cause[split.all_equal & (split.value == 0)] = _CODE["all_0"]
            group_cause[split.all_equal & (split.value == split.top) & (split.top > 0)] = _CODE["all_top"]
        group_cause[split.singleton] = _CODE["singleton"]
        g = rows.group.astype(np.int64)
        group_signal = np.bincount(g, weights=split.signal, minlength=G).astype(np.int64)
        from_group = group_cause[g]
    used = np.minimum(rows.used.astype(np.int64), rows.actor.astype(np.int64))
    none = split.signal == 0
    cause = np.where(~none, _CODE["ok"], np.where(from_group != _CODE["ok"], from_group, _CODE["zero_advantage"]))
    if no_uid:
        cause[none] = _CODE["no_uid"]
    cause[none & (used == 0)] = _CODE["rejected"]
    cause[rows.actor == 0] = _CODE["no_actor_tokens"]
    return Labels(split.signal, cause.astype(np.int8), group_signal, group_cause)


def judge(rows: RowsToJudge, ctx: Context, *, no_uid: bool = False,
          hazards: Sequence[VerdictHazard] = ()) -> Verdict:
    """The verdict on ``rows``: the signal's share of actor tokens, rows and groups, the causes of the rest and,
    with token weights, their shares of the gradient mass.

    ``no_uid``: a group estimator was chosen and the dataset has no ``uid`` column; ``hazards``: the gradient
    hazards found (``report.gradient``), which raise the level as causes do."""
    split = _split(rows, ctx, no_uid)
    actor_total = int(rows.actor.sum())
    signal_tokens = int(split.signal.sum())
    share = signal_tokens / actor_total if actor_total else 0.0
    causes = _cause_entries(rows, ctx, split, actor_total)
    outcomes = _outcomes(split)
    n_rows = int(rows.actor.size)
    signal_rows = int((split.signal > 0).sum())
    groups = signal_groups = None
    if split.present is not None:
        groups = int(split.present.sum())
        with_signal = np.zeros(split.present.size, dtype=bool)
        with_signal[rows.group.astype(np.int64)[split.signal > 0]] = True
        signal_groups = int(with_signal.sum())
    level = level_for("no_signal", 1 - share, ctx.thresholds) if actor_total else "fail"
    hints = _hints(ctx, split, causes, outcomes, n_rows)
    if hints and any("every row has its own uid" in h or "every reward is 0" in h for h in hints):
        level = "fail"
    for c in (*causes, *hazards):  # the verdict is at least as severe as its worst cause or hazard
        if LEVELS.index(c.level) > LEVELS.index(level):
            level = c.level
    signal_mass = None
    if rows.mass is not None:
        signal_mass = max(0.0, 1.0 - sum(c.mass_share or 0.0 for c in causes)) if float(rows.mass.sum()) > 0 else 0.0
    under = (f"under {ctx.estimator}" if ctx.estimator else "under a group estimator" if ctx.uses_groups
             else "under an estimator without groups")
    parts = [f"{signal_rows} of {n_rows} rows"] + ([f"{signal_groups} of {groups} groups"] if groups is not None else [])
    headline = (f"{pct(share)} of actor tokens ({', '.join(parts)}) carry learning signal {under}"
                if actor_total else "no actor tokens: nothing to learn from")
    if signal_mass is not None and actor_total:
        headline += f"; they hold {pct(signal_mass)} of the gradient mass ({ctx.weighing})"
    return Verdict(level=level, headline=headline, estimator=ctx.estimator,
                   basis="advantages" if rows.zero is not None else "groups", actor_tokens=actor_total,
                   signal_tokens=signal_tokens, signal_share=share, rows=n_rows, signal_rows=signal_rows,
                   groups=groups, signal_groups=signal_groups, causes=causes, signal_mass_share=signal_mass,
                   hazards=list(hazards), hints=hints, group_outcomes=outcomes, steps=_steps(rows, ctx, no_uid))


# ==================================================================================== terminal
_STYLE = {"ok": "green", "note": "cyan", "warn": "yellow", "fail": "bold red"}
TERMINAL_STEPS = 10  # with more than twice as many steps, the terminal shows the first and the last this many


def render_verdict(v: Verdict, console) -> None:
    """The verdict on a terminal: one line with its level, then a line per cause (share, code, what, an example
    command), the likely causes, and with several steps a table of them."""
    from rich.markup import escape
    from .terminal import Table

    style = _STYLE[v.level]
    basis = "" if v.basis == "advantages" else " (predicted from groups and masks: no advantages in the file)"
    console.print(f"[{style}]verdict {v.level.upper()}[/{style}]: {escape(v.headline)}{basis}")
    if v.causes or v.hints or v.hazards:
        grid = Table.grid(padding=(0, 1))
        grid.add_column(justify="right", no_wrap=True)
        grid.add_column(overflow="fold")
        for c in v.causes:
            mass = "" if c.mass_share is None else f" [dim](gradient mass {pct(c.mass_share)})[/dim]"
            text = (f"{c.code}: {escape(c.message)}{mass}"
                    + (f"\n[dim]e.g. {escape(c.example)}[/dim]" if c.example else ""))
            grid.add_row(f"[{_STYLE[c.level]}]{pct(c.share)}[/{_STYLE[c.level]}]", text)
        for h in v.hazards:
            text = f"{h.code}: {escape(h.message)}" + (f"\n[dim]e.g. {escape(h.example)}[/dim]" if h.example else "")
            grid.add_row(f"[{_STYLE[h.level]}]{h.level}[/{_STYLE[h.level]}]", text)
        for h in v.hints:
            grid.add_row("[bold]->[/bold]", escape(h))
        console.print(grid)
    if v.steps:
        n = len(v.steps)
        cut = n > 2 * TERMINAL_STEPS
        more = f" (first and last {TERMINAL_STEPS} of {n}; --json and --html have all)" if cut else ""
        t = Table(title=f"verdict per step{more}", header_style="bold", box=None)
        for col in ("step", "rows", "signal", "singletons", "all 0", "all top", "rejected", "KL"):
            t.add_column(col, justify="left" if col == "step" else "right")
        shown = lambda x: "-" if x is None else pct(x)  # noqa: E731
        for i, s in enumerate(v.steps):
            if cut and TERMINAL_STEPS <= i < n - TERMINAL_STEPS:
                if i == TERMINAL_STEPS:
                    t.add_row("...", *[""] * 7)
                continue
            t.add_row(s.step, str(s.rows), f"[{_STYLE[s.level]}]{pct(s.signal_share)}[/{_STYLE[s.level]}]",
                      shown(s.singleton_share), shown(s.all_zero_share), shown(s.all_top_share), pct(s.rejected_share),
                      "-" if s.kl_mean is None else f"{s.kl_mean:.4g}")
        console.print(t)
        worst = min(v.steps, key=lambda s: s.signal_share)
        failing = next((s for s in v.steps if s.level == "fail"), None)
        console.print(f"lowest signal: {escape(worst.step)} ({pct(worst.signal_share)})"
                      + (f"; first failing step: {escape(failing.step)}" if failing else ""))
