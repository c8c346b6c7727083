"""The checklist's verdict (``report.verdict``) and the tables behind it (``report.tables``): its per-row scalars
judged under the chosen estimator, with ``rladv inspect`` / ``rladv explain`` lines that show an example of each
cause."""
from __future__ import annotations

import shlex
from typing import Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from ..estimators.registry import Estimator
from ..report.tables import RowFacts, verdict_tables
from ..report.verdict import THRESHOLDS, Context, RowsToJudge, Verdict, judge
from .findings import Check
from .scan import Plan, RowScalars


def checklist_flags(est: Optional[Estimator], kl_coef: float, kl_penalty: str, columns: Optional[Mapping[str, str]],
                    batch_key: Optional[str], where: Optional[str]) -> list[str]:
    """The checklist's settings as command-line flags, for the example commands."""
    flags = [] if est is None else ["--estimator", est.name]
    if kl_coef:
        flags += ["--kl-coef", f"{kl_coef:g}"] + (["--kl-penalty", kl_penalty] if kl_penalty != "kl" else [])
    if batch_key is not None:
        flags += ["--batch-key", batch_key]
    if where is not None:
        flags += ["--where", where]
    for name, column in sorted((columns or {}).items()):
        flags += ["--column", f"{name}={column}"]
    return flags


def _commands(paths: Sequence[str], est: Optional[Estimator], flags: Sequence[str]):
    """``(row_command, group_command)`` with the checklist's own settings (``flags``)."""
    files = " ".join(shlex.quote(p) for p in paths)
    tail = " ".join(shlex.quote(f) for f in flags)
    tail = f" {tail}" if tail else ""
    verb = "explain" if est is not None else "inspect"
    return (lambda row: f"rladv {verb} {files} --row {row}{tail}",
            lambda uid: f"rladv inspect {files} --uid {shlex.quote(str(uid))}{tail}")


def checklist_verdict(rows: RowScalars, plan: Plan, est: Optional[Estimator], uids: Mapping[int, object],
                      group_flags: Mapping[str, np.ndarray], checks: list[Check], paths: Sequence[str],
                      step_names: Sequence[str], flags: Sequence[str], epsilon: Optional[float],
                      thresholds: Optional[Mapping[str, tuple]] = None,
                      batch: Optional[tuple[str, Sequence[object]]] = None,
                      ) -> tuple[Verdict, tuple[Optional[pa.Table], pa.Table]]:
    """The verdict and the tables behind it (``verdict_tables``: groups, rows) on the valid rows: actor tokens (the mask before rejection), used tokens, zero advantages
    when the file has advantages, groups (``group_flags``: all-equal, and tied on scores) under the estimator
    (any group estimator without ``--estimator``). A failing check (a broken contract, a missing column) fails
    it too and is named in its hints; without ``uid`` and an estimator it warns that no group was judged.
    ``thresholds``: the levels per check over ``THRESHOLDS``; ``batch``: the batch key and its values
    (``RowFacts.batch``)."""
    row_command, by_uid = _commands(paths, est, flags)
    uses_groups = est.groups if est is not None else plan.uid
    ctx = Context(estimator=est.name if est else None, uses_groups=uses_groups,
                  singleton_rule=est.singleton if est else None, row_command=row_command,
                  group_command=lambda g: by_uid(uids[g]), step_names=list(step_names),
                  epsilon=epsilon if uses_groups else None, thresholds={**THRESHOLDS, **(thresholds or {})},
                  weighing="the file's token_weight" if plan.weights else None)
    judged = RowsToJudge(
        actor=rows["actor"], used=rows["used"], zero=rows["adv_zero"] if plan.advantages else None,
        group=rows["group_id"].astype(np.int64) if plan.uid else None,
        reward=rows["reward_total"] if plan.score is not None else None, all_equal=group_flags.get("all_equal_group"),
        score_equal=group_flags.get("score_equal") if plan.basis != "score" else None,
        dataset_row=rows["drow"].astype(np.int64), step=rows["step"].astype(np.int64) if "step" in rows else None,
        kl=rows["kl_row"] if plan.kl else None, mass=rows["w_abs"] if plan.weights else None)
    no_uid = est is not None and est.groups and not plan.uid
    verdict = judge(judged, ctx, no_uid=no_uid)
    tables = verdict_tables(judged, ctx, RowFacts(
        score_total=rows["score_total"] if plan.score is not None else None,
        observation=rows["length"] - rows["actor"] - rows["padding"], file_index=rows["file"].astype(np.int64),
        file_row=rows["file_row"].astype(np.int64), paths=list(paths),
        uids=[uids[g] for g in range(len(uids))] if plan.uid else None,
        **({"adv_sum": rows["adv_sum"], "adv_count": rows["adv_count"], "adv_min": rows["adv_min"],
            "adv_max": rows["adv_max"]} if plan.advantages else {}), batch=batch), no_uid=no_uid)
    if est is None and not plan.uid:
        verdict = verdict.model_copy(update={"level": "warn" if verdict.level in ("ok", "note") else verdict.level,
                                             "hints": [*verdict.hints, "no uid column: no groups, so the group checks "
                                                       "did not run; judged as an estimator without groups would "
                                                       "see the batch (--column uid=COLUMN names the group column)"]})
    failing = [c.code for c in checks if c.status == "fail"]
    if failing:
        verdict = verdict.model_copy(update={
            "level": "fail", "hints": [*verdict.hints, f"failing check(s): {', '.join(failing)} (the checklist below)"]})
    return verdict, tables
