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
from typing import Optional

import numpy as np

from ..report.verdict import EPS_TIE, group_mean_std, group_min_max
from .findings import Checklist
from .scan import Plan, RowScalars


@dataclass(frozen=True)
class GroupView:
    """The groups as ``_group_checks`` formed them: each valid row's ``gid (B,)``, and per group ``(G,)`` its
    ``size``, ``first`` dataset row and whether it has a valid row (``present``); whether the estimator judged
    forms groups."""

    gid: np.ndarray
    size: np.ndarray
    first: np.ndarray
    present: np.ndarray
    uses_groups: bool


def empty_response_score(checks: Checklist, rows: RowScalars) -> None:
    """``score_on_empty_response``: no actor token, a non-zero score on a masked or padding position."""
    if "score_total" not in rows:
        return
    masked = (rows["score_on_observation"] + rows["score_on_padding"]) > 0
    hit = rows["drow"][(rows["actor"] == 0) & masked]
    checks.add("score_on_empty_response", hit.size, hit, n=hit.size)


def batch_multiple(checks: Checklist, rows: RowScalars, view: GroupView, step_names: list[str]) -> None:
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
    checks.add("batch_not_multiple_of_group", off.size, np.sort(at), n=off.size, modal=modal, shown=shown)


def prompts_per_uid(checks: Checklist, plan: Plan, rows: RowScalars, view: GroupView) -> None:
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
    checks.add("uid_spans_prompts", int(mixed.sum()), np.sort(view.first[mixed]), n=int(mixed.sum()))


def files_per_uid(checks: Checklist, rows: RowScalars, view: GroupView, files: int) -> None:
    """``uid_spans_files``: without a batch key (``rows["step"]`` is then each row's file) and with several
    ``files``, a uid group whose rows are in two or more of them."""
    if files < 2:
        return
    spread = group_span(rows["step"].astype(np.int64), view.gid, view.size.size)
    hit = view.present & spread
    checks.add("uid_spans_files", int(hit.sum()), np.sort(view.first[hit]), groups=int(hit.sum()),
               members=int(view.size[hit].sum()))


def group_span(values: np.ndarray, gid: np.ndarray, groups: int) -> np.ndarray:
    """Per group ``(G,)``: whether its rows' integer ``values`` ``(B,)`` differ."""
    lo = np.full(groups, np.iinfo(np.int64).max)
    hi = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(lo, gid, values)
    np.maximum.at(hi, gid, values)
    return hi > lo


def epsilon_std(checks: Checklist, rows: RowScalars, view: GroupView, epsilon: Optional[float],
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
    checks.add("epsilon_dominated_std", int(hit.sum()), np.sort(view.first[hit]), relevant=view.uses_groups and divides,
               n=int(hit.sum()), epsilon=epsilon, detail=detail)


def kl_only(checks: Checklist, plan: Plan, rows: RowScalars, view: GroupView, score_equal: np.ndarray,
            all_equal: np.ndarray) -> None:
    """``kl_only_signal``: groups tied on their scores whose shaped totals (the reward basis) differ."""
    if plan.basis == "score":
        return
    hit = view.present & score_equal & ~all_equal
    what = "the KL penalty" if plan.basis == "kl_shaped" else "the shaping in the file's token_level_rewards"
    checks.add("kl_only_signal", int(hit.sum()), np.sort(view.first[hit]), n=int(hit.sum()), shaping=what)
