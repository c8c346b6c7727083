"""The checklist's hazard checks (docs/debugging.md, "Hazards"): conditions that leave a batch looking healthy
while its advantages are decided by something other than the task's reward. Each takes the per-row scalars and
the groups ``_group_checks`` formed; numpy only.

  score_on_empty_response (3)   a row without actor tokens whose score is not 0 (an empty response: the reward
                                manager put the score on a padding or masked position); it gets no advantage,
                                yet its score enters its group's mean and std
  batch_not_multiple_of_group (4) a step whose row count is not a multiple of the most common group size (warns
                                without ``--estimator`` only: verl groups by uid, so no verl estimator changes;
                                trainers that cut the batch into blocks of n would)
  uid_spans_prompts (4)         (a ``prompts`` column) a uid whose rows come from different prompts
  uid_spans_files (4)           (several files, no batch key) a uid whose rows are in two or more files: if each
                                file is a training step, its group merges a prompt's samples across steps
  epsilon_dominated_std (5)     a group with 0 < std <= 9·eps: epsilon makes at least a tenth of the denominator
                                ``std + eps``, so it, not the spread, sets the advantages' size
  kl_only_signal (5)            (KL shaping or a file's ``token_level_rewards``) a group whose scores tie but
                                whose shaped totals differ: advantages from the shaping alone
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..estimators.registry import Estimator
from ..report.verdict import EPS_TIE, group_mean_std, group_min_max
from .scan import Plan, RowScalars

if TYPE_CHECKING:
    from .checklist import _Checks



@dataclass(frozen=True)
class GroupView:
    """The groups as ``_group_checks`` formed them: each valid row's ``gid (B,)``, and per group ``(G,)`` its
    ``size``, ``first`` dataset row and whether it has a valid row (``present``); which estimator is judged
    (``est``, None: any group estimator) and whether it forms groups."""

    gid: np.ndarray
    size: np.ndarray
    first: np.ndarray
    present: np.ndarray
    est: Optional[Estimator]
    uses_groups: bool

    @property
    def irrelevant(self) -> str:
        return f"{self.est.name if self.est else ''} does not use groups"


def empty_response_score(checks: "_Checks", rows: RowScalars, est: Optional[Estimator]) -> None:
    """``score_on_empty_response``: no actor token, a non-zero score on a masked or padding position."""
    if "score_total" not in rows:
        return
    masked = (rows["score_on_observation"] + rows["score_on_padding"]) > 0
    hit = rows["drow"][(rows["actor"] == 0) & masked]
    groups = est is None or est.groups
    checks.add("score_on_empty_response", 3, hit.size, hit, "no row without actor tokens carries a score",
               f"{hit.size} row(s) have no actor token but a non-zero score on a padding or masked position (an "
               "empty response: the score went to the last position, which is not the model's): the row gets no "
               "advantage, yet its score enters its group's mean and std and moves the others' advantages",
               relevant=groups, irrelevant=f"{est.name if est else ''} forms no group baseline for it to enter")


def batch_multiple(checks: "_Checks", rows: RowScalars, view: GroupView, step_names: list[str]) -> None:
    """``batch_not_multiple_of_group``: a step (batch key value, or file) whose valid rows are not a multiple of
    the most common group size (ties: the larger)."""
    sizes = view.size[view.present]
    if not sizes.size:
        return
    values, counts = np.unique(sizes, return_counts=True)
    modal = int(values[counts == counts.max()].max())
    step = rows["step"].astype(np.int64)
    per_step = np.bincount(step, minlength=len(step_names))
    first = np.full(per_step.size, np.iinfo(np.int64).max)
    np.minimum.at(first, step, rows["drow"].astype(np.int64))
    off = np.flatnonzero((per_step > 0) & (per_step % modal != 0)) if modal > 1 else np.zeros(0, dtype=np.int64)
    shown = ", ".join(f"{step_names[s]}: {per_step[s]} rows" for s in off[:3])
    # the rows: the first rows of those steps' groups off the size, else (a group spread over files) the step's
    group_step = np.zeros(view.size.size, dtype=np.int64)
    group_step[view.gid] = step
    short = view.present & (view.size != modal) & np.isin(group_step, off)
    at = view.first[short] if short.any() else first[off]
    checks.add("batch_not_multiple_of_group", 4, off.size, np.sort(at),
               f"every step's row count is a multiple of the most common group size ({modal})",
               f"{off.size} step(s) have a row count that is not a multiple of the most common group size {modal} "
               f"({shown}): samples were dropped or groups split; a trainer that cuts the batch into blocks of "
               f"{modal} (TRL, OpenRLHF) groups rows of different prompts from the first short group on",
               relevant=view.est is None,
               irrelevant=f"verl groups by uid, so {view.est.name if view.est else ''}'s advantages do not depend on it")


def prompts_per_uid(checks: "_Checks", plan: Plan, rows: RowScalars, view: GroupView) -> None:
    """``uid_spans_prompts``: a uid group whose rows' ``prompts`` keys differ."""
    if not plan.prompts:
        return
    key = rows["prompt_key"].astype(np.uint64)
    G = view.size.size
    lo = np.full(G, np.iinfo(np.uint64).max, dtype=np.uint64)
    hi = np.zeros(G, dtype=np.uint64)
    np.minimum.at(lo, view.gid, key)
    np.maximum.at(hi, view.gid, key)
    mixed = view.present & (lo != hi)
    checks.add("uid_spans_prompts", 4, int(mixed.sum()), np.sort(view.first[mixed]),
               "every uid group's rows share one prompt",
               f"{int(mixed.sum())} uid group(s) hold rows of different prompts (the prompts column differs "
               "within the group): their baseline mixes prompts of different difficulty. Is uid the prompt's id?",
               relevant=view.uses_groups, irrelevant=view.irrelevant)


def files_per_uid(checks: "_Checks", rows: RowScalars, view: GroupView, files: int) -> None:
    """``uid_spans_files``: without a batch key (``rows["step"]`` is then each row's file) and with several
    ``files``, a uid group whose rows are in two or more of them."""
    if files < 2:
        return
    spread = group_span(rows["step"].astype(np.int64), view.gid, view.size.size)
    hit = view.present & spread
    checks.add("uid_spans_files", 4, int(hit.sum()), np.sort(view.first[hit]),
               "every uid group's rows are in one file",
               f"{int(hit.sum())} uid group(s) have rows in several input files, and no batch key splits them: if each "
               "file is a training step, each such group merges a prompt's samples across steps (give --batch-key "
               "COLUMN, or uids unique per step as verl's are)",
               relevant=view.uses_groups, irrelevant=view.irrelevant)


def group_span(values: np.ndarray, gid: np.ndarray, groups: int) -> np.ndarray:
    """Per group ``(G,)``: whether its rows' integer ``values`` ``(B,)`` differ."""
    lo = np.full(groups, np.iinfo(np.int64).max)
    hi = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(lo, gid, values)
    np.maximum.at(hi, gid, values)
    return hi > lo


def epsilon_std(checks: "_Checks", rows: RowScalars, view: GroupView, epsilon: Optional[float],
                checked: float) -> None:
    """``epsilon_dominated_std``: groups of 2+ rows with ``0 < std <= 9·eps`` (unbiased std of the reward totals,
    float64), with the largest ``|R - mean| / (std + eps)`` among them. ``epsilon``: what the estimator adds to
    the std before dividing (None: it does not divide so; the check then runs with ``checked`` and passes)."""
    if "reward_total" not in rows:
        return
    divides = epsilon is not None
    epsilon = checked if epsilon is None else epsilon
    r, gid, size = rows["reward_total"].astype(np.float64), view.gid, view.size
    mean, std = group_mean_std(r, gid, size)
    dev = r - mean[gid]
    lo, hi = group_min_max(r, gid, size.size)
    hit = view.present & (size > 1) & (hi > lo) & (std <= EPS_TIE * epsilon)
    if hit.any():
        amp = np.abs(dev) / (std[gid] + epsilon)
        worst = int(np.argmax(np.where(hit[gid], amp, -1)))
        detail = (f" (largest |R - mean| / (std + eps) {amp[worst]:.3g} in float64, which float32 rounding moves; "
                  f"group std {std[gid[worst]]:.3g}, dataset row {int(rows['drow'][worst])})")
    else:
        detail = ""
    checks.add("epsilon_dominated_std", 5, int(hit.sum()), np.sort(view.first[hit]),
               f"no group's reward std is within 9 x epsilon ({epsilon:g}) of 0 without being 0",
               f"{int(hit.sum())} group(s) have a reward std above 0 but at most 9 x epsilon ({epsilon:g}){detail}: "
               "epsilon makes a tenth or more of the denominator std + eps, so epsilon and float32 rounding, not "
               "the spread, set the advantages' size; a near tie (a verifier's rounding) passes for signal, and "
               "with a smaller epsilon becomes a full-size one",
               relevant=view.uses_groups and divides,
               irrelevant=f"{view.est.name if view.est else ''} does not divide by std + epsilon")


def kl_only(checks: "_Checks", plan: Plan, rows: RowScalars, view: GroupView, score_equal: np.ndarray,
            all_equal: np.ndarray) -> None:
    """``kl_only_signal``: groups tied on their scores whose shaped totals (the reward basis) differ."""
    if plan.basis == "score":
        return
    hit = view.present & score_equal & ~all_equal
    what = "the KL penalty" if plan.basis == "kl_shaped" else "the shaping in the file's token_level_rewards"
    checks.add("kl_only_signal", 5, int(hit.sum()), np.sort(view.first[hit]),
               "no group's advantages come from the shaping alone",
               f"{int(hit.sum())} group(s) tie on their scores but not on their shaped totals: their advantages "
               f"come from {what} alone (zero-std groups that still get updates, with no signal from the task)",
               relevant=view.uses_groups, irrelevant=view.irrelevant)
