"""The report of a finished run (docs/contract.md §4): every section and every warning, built once the write
pass is over from what the passes established (``Finished``); and ``finish_report``, which adds the output, the
settings' notes and what a verl YAML contributed, and writes the JSON and HTML files."""
from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa

from .. import __version__
from ..config.settings import setting_notes
from ..contract.columns import mask_before_rejection
from ..contract.labels import Labels
from ..estimators.registry import names_where
from ..io.read import RowSource
from ..io.write import SideFiles
from ..report import replay
from ..report.checks import CHECKS, group_size_words
from ..report.diagnostics import (RowTable, TokenSketches, WarningBuilder, distributions, first_rows, group_flags,
                                  group_min_max, token_stats)
from ..report.model import (KL, FileInfo, Groups, Inputs, KLBatch, Report, Scores, Timing, Tokens, example_command,
                            row_filter, row_stats)
from ..report.tables import RowFacts, verdict_tables, write_tables
from ..loss.scale import Weighing
from ..report.gradient import Gradient, WeighedRows, gradient
from ..report.verdict import Context, RowsToJudge, Verdict, judge, label
from ..tensors import xp as X
from ..tensors.groups import GroupStats
from ..tensors.kernels import torch_mean
from .shard import Established, Plan

# whitening warns when one float32 ulp of the batch mean moves advantages by this much (10 ulps: the 1e-5 tolerance)
ILL_CONDITIONED_SHIFT = 1e-6


@dataclass(frozen=True)
class Finished:
    """A run after its last pass: the source and plan, the whole per-row table (``rows``), the labels, what the
    passes established, the groups' ``flags`` (``group_flags``), each row's session's final output
    (``fold_source``, folded sessions only), the whitening entries per batch, the uids merged as verl's
    ``grpo_vectorized`` merges them (sets, first rows), the optimal-token baselines' worst rounding effect and
    the groups over ``ILL_CONDITIONED_SHIFT``, the rollout-correction statistics per batch, the write pass's
    value sketches, the basis of the outcome split, the seconds per stage, under a convention that cuts blocks
    the first rows of the blocks that mix uids, and with ``--loss-agg-mode`` the weighing of the rows."""

    source: RowSource
    plan: Plan
    has_sessions: bool
    replay_skipped: dict
    rows: RowTable
    labels: Labels
    known: Established
    flags: dict[str, np.ndarray]
    fold_source: Optional[np.ndarray]
    whitening: list[dict]
    uid_merges: tuple[list[tuple], np.ndarray]
    baseline_ill_conditioned: tuple[float, np.ndarray]
    correction_stats: dict[int, object]
    sketches: TokenSketches
    outcome_basis: str
    seconds: dict[str, float]
    mixed_blocks: Optional[np.ndarray] = None  # first rows of blocks (a blocks convention) holding several uids
    group_size: Optional[int] = None  # the blocks' size, under a convention that cuts blocks
    weighing: Optional[Weighing] = None  # the loss aggregation's per-row scales (--loss-agg-mode)

    @property
    def groups(self) -> Optional[GroupStats]:
        """The group statistics as numpy arrays (None without a uid column)."""
        return None if self.known.groups is None else self.known.groups.on_host()


def _ulp_shift(whitening: dict) -> float:
    """What one float32 step of a batch's whitening mean, at its values' magnitude ``sqrt(μ² + M2/N)``, moves
    every advantage by once divided by ``sqrt(var + 1e-8)``: verl sums the mean in float32 in an order rladv
    cannot follow, so its advantages sit a few such steps from rladv's."""
    n, mean, var = whitening["tokens"], whitening["mean"], whitening["var"]
    magnitude = math.sqrt(mean * mean + var * (n - 1) / n)
    return float(np.spacing(np.float32(magnitude))) / math.sqrt(var + 1e-8)


def build_report(run: Finished) -> Report:
    """The ``Report`` of a finished run; warnings in a fixed order (groups, rows, conditioning, KL, tools)."""
    rows, cfg, source = run.rows, run.plan.cfg, run.source
    device = run.plan.chain.device
    warn = WarningBuilder(source.locate)
    tokens_total = int(rows["length"].sum())
    actor, used, padding = int(rows["actor"].sum()), int(rows["used"].sum()), int(rows["padding"].sum())
    groups = _groups_report(run, warn)
    _row_warnings(run, warn)
    _files_warning(run, warn)
    _conditioning_warnings(run, warn)
    kl = _kl_report(run, warn)
    correction = {}
    if run.correction_stats:
        per = {run.labels.batch_name(b) or "all": s.metrics() for b, s in sorted(run.correction_stats.items())}
        correction = next(iter(per.values())) if len(per) == 1 else {"batches": per}
    total_s = run.seconds.get("total", 0.0)
    has_uid = run.plan.grouped
    verdict, (group_table, row_table), grad = _verdict(run)
    return Report(
        rladv_version=__version__,
        verdict=verdict,
        inputs=Inputs(paths=list(source.paths), skipped=list(source.skipped), files=_file_infos(run),
                      rows=source.num_rows, tokens=tokens_total,
                      filter=row_filter(source), sequence_level=source.names.one_position),
        output=None,
        config={**cfg.model_dump(), "score_column": "rm_scores" if "rm_scores" in source.columns else "score",
                **({"score_column_ignored": "score"} if {"rm_scores", "score"} <= set(source.columns)
                   and not cfg.reward_components else {}),
                "device_resolved": str(device)},
        tokens=Tokens(total=tokens_total, actor=actor, observation=tokens_total - actor - padding,
                      padding=padding, rejected=actor - used, used=used),
        groups=groups,
        scores=Scores(score_total=row_stats(X.float64(rows["score_total"])),
                      reward_total=row_stats(X.float64(rows["reward_total"]))),
        kl=kl,
        rollout_rejection=correction,
        dead_signal=_dead_signal_report(run),
        whitening=run.whitening or None,
        overlong=_overlong_report(run),
        tool_rewards=_tool_rewards_report(run, warn),
        sessions=_sessions_report(run),
        replay=replay.report(rows, list(run.plan.replay_columns), run.replay_skipped, source.locate,
                             rows["group_id"] if has_uid else None, "loss_mask" in source.columns),
        advantages=token_stats(rows, "adv"),
        returns=token_stats(rows, "ret"),
        distributions=distributions(rows, run.sketches, run.outcome_basis, rows["group_id"] if has_uid else None),
        gradient=grad,
        warnings=warn.items,
        timing=Timing(
            seconds={k: round(v, 6) for k, v in run.seconds.items()},
            tokens_per_second=tokens_total / total_s if total_s > 0 else 0.0,
            device=str(device),
        ),
    ).with_tables(group_table, row_table)


def _files_warning(run: Finished, warn: WarningBuilder) -> None:
    """``uid_spans_files``: without a batch key, the rows of uid groups with rows in several input files (if each
    file is a training step, such a group merges a prompt's samples across steps)."""
    shards = run.source.shards
    if run.plan.cfg.batch_column is not None or len(shards) < 2 or run.plan.group_key != "uid":
        return
    file_of = np.repeat(np.arange(len(shards), dtype=np.int64), [s.num_rows for s in shards])
    gid, G = X.int64(run.rows["group_id"]), run.groups.size.size
    lo, hi = X.scatter_min(G, gid, file_of, len(shards)), X.scatter_max(G, gid, file_of, -1)
    spread = hi > lo
    rows = np.flatnonzero(spread[gid])
    warn.add("uid_spans_files", rows.size, rows, groups=int(spread.sum()), members=rows.size)


def _row_warnings(run: Finished, warn: WarningBuilder) -> None:
    """The warnings about single rows: scores off the mask, rows without (or with rejected) actor tokens, the
    estimators' own row checks, and sessions whose verl key collides."""
    rows, cfg, est = run.rows, run.plan.cfg, run.plan.est
    mask = mask_before_rejection(run.source.columns)
    grouped = run.plan.grouped and est.groups  # rows enter a group's baseline
    warn.add_rows("score_on_masked_position", rows["score_on_masked_position"], mask=mask, est=est)
    warn.add_rows("row_without_actor_tokens", rows["actor"] == 0, mask=mask, grouped=grouped)
    if "unscorable" in rows:
        warn.add_rows("unscorable_row", rows["unscorable"], trainer=cfg.conv.trainer)
    if "credit_reset_at_mask" in rows:
        warn.add_rows("credit_reset_at_mask", rows["credit_reset_at_mask"], mode=cfg.rpp_mask_mode)
    if "negative_token_weight" in rows:
        warn.add_rows("negative_token_weight", rows["negative_token_weight"])
    if run.plan.fold:
        uids = {g: uid for (_, uid), g in run.labels.groups.items()}
        warn.add_rows("session_key_collision",
                      np.isin(rows["session"], run.labels.colliding_sessions()),
                      collisions=run.labels.session_key_collisions(run.labels.sessions), uids=uids)
    # rejected: by this run's rollout rejection, or already in the input (response_mask below its loss_mask)
    rejected = rows["actor"] - rows["used"]
    warn.add_rows("row_fully_rejected", (rows["actor"] > 0) & (rows["used"] == 0), grouped=grouped)
    if CHECKS["rejected_in_group_baseline"].applies(est):
        warn.add_rows("rejected_in_group_baseline", rejected > 0)


def _conditioning_warnings(run: Finished, warn: WarningBuilder) -> None:
    """Batches whose whitening, and groups whose optimal-token baseline, one float32 rounding moves by 1e-6 or more."""
    rows = run.rows
    centred_only = run.plan.est.biased_whitening and not run.plan.cfg.norm_adv_by_std  # nothing is divided
    shifts = {} if centred_only else {b: _ulp_shift(w) for b, w in enumerate(run.whitening)}  # one entry per batch
    ill = {b: shift for b, shift in shifts.items() if shift >= ILL_CONDITIONED_SHIFT}
    if ill:
        first = [int(np.flatnonzero(rows["batch_id"] == b)[0]) for b in ill]
        worst = max(ill.values())
        warn.add("whitening_ill_conditioned", len(first), sorted(first), batches=len(first), worst=worst)
    worst, ill_groups = run.baseline_ill_conditioned
    if ill_groups.size:
        first = np.sort(first_rows(rows["group_id"], run.labels.group_count)[ill_groups])
        warn.add("baseline_ill_conditioned", ill_groups.size, first, groups=ill_groups.size, worst=worst)


def _verdict(run: Finished) -> tuple[Verdict, tuple, Optional[Gradient]]:
    """The verdict on the computed advantages (each row's actor, used and zero-advantage tokens, its group and
    total reward R, its batch and KL, its gradient mass), the tables behind it (``report.tables``: groups, rows),
    and with token weights the gradient section, whose hazards join the verdict."""
    rows, cfg, est, labels = run.rows, run.plan.cfg, run.plan.est, run.labels
    has_groups = run.known.groups is not None
    uid_of = {g: uid for (_, uid), g in labels.groups.items()}
    paths = list(run.source.paths)
    if len(labels.batches) > 1:  # steps: the batches in key order, else the files
        rank, step_names = labels.step_ranks()
        step = rank[rows["batch_id"]]
    elif len(paths) > 1:
        step_names = paths
        step = np.repeat(np.arange(len(paths)), run.source.file_rows)
    else:
        step_names, step = [], None
    judged = RowsToJudge(
        actor=rows["actor"], used=rows["used"], zero=rows["adv_zero"],
        group=rows["group_id"] if has_groups else None, reward=X.float64(rows["reward_total"]),
        all_equal=run.flags["all_equal_group"] if has_groups else None,
        score_equal=group_flags(rows["score_total"], rows["group_id"], run.groups.size)["all_equal_group"]
        if has_groups and not cfg.reward_components else None,
        dataset_row=np.arange(run.source.num_rows), step=step,
        kl=X.float64(rows["kl_row"]) if cfg.kl_in_reward else None,
        mass=rows["w_abs"] if run.weighing is not None else None)
    agg = cfg.aggregation
    ctx = Context(estimator=cfg.estimator, uses_groups=est.groups, singleton_rule=est.singleton,
                  row_command=lambda r: example_command(paths, cfg, row=r),
                  group_command=lambda g: example_command(paths, cfg, uid=uid_of[g]) if cfg.conv.grouping == "uid"
                  else example_command(paths, cfg, row=int(first_rows(rows["group_id"], len(uid_of))[g])),
                  step_names=step_names, epsilon=est.std_epsilon(cfg.epsilon, cfg.norm_adv_by_std),
                  thresholds=cfg.levels, weighing=f"{agg.trainer} {cfg.loss_agg_mode}" if cfg.loss_agg_mode else None)
    grad = _gradient(run, judged, ctx, uid_of) if run.weighing is not None else None
    file_index, file_row = run.source.row_origins()
    padding = rows["padding"] if "padding" in rows else 0
    facts = RowFacts(score_total=X.float64(rows["score_total"]),
                     observation=rows["length"] - rows["actor"] - padding,
                     file_index=file_index, file_row=file_row, paths=paths,
                     uids=[uid_of[g] for g in range(len(uid_of))] if has_groups else None,
                     adv_sum=rows["adv_sum"], adv_count=rows["adv_count"],
                     adv_min=rows["adv_min"], adv_max=rows["adv_max"],
                     batch=(labels.batch_key, labels.batch_values()) if labels.batch_key is not None else None)
    groups, row_table = verdict_tables(judged, ctx, facts)
    if run.weighing is not None:
        row_table = _weight_columns(row_table, run)
    return judge(judged, ctx, hazards=grad.hazards if grad else ()), (groups, row_table), grad


def _weight_columns(table: pa.Table, run: Finished) -> pa.Table:
    """The row table with each row's weighing (docs/weights.md): its mini- and micro-batch, ``weight_scale`` (c_i),
    the terms c_i was made of (a struct), and its gradient mass and net sum of token weights."""
    w, rows = run.weighing, run.rows
    terms = pa.StructArray.from_arrays([pa.array(np.asarray(v, dtype=np.float64)) for v in w.terms.values()],
                                       names=list(w.terms)) if w.terms else pa.nulls(table.num_rows, pa.struct([]))
    added = {"mini_batch": pa.array(w.split.mini), "micro_batch": pa.array(w.split.micro),
             "weight_scale": pa.array(w.scale.astype(np.float64)), "weight_terms": terms,
             "weight_mass": pa.array(rows["w_abs"]),
             "weight_net": pa.array(rows["w_pos"] + rows["w_neg"])}
    for name, values in added.items():
        table = table.append_column(name, values)
    return table


def _gradient(run: Finished, judged: RowsToJudge, ctx: Context, uid_of: dict) -> Gradient:
    """The gradient section (docs/weights.md) from the write pass's per-row weight sums, the verdict's causes
    and the weighing; the truncated rows from the truncated column, else (overlong shaping on) the rows at least
    --max-resp-len long."""
    rows, cfg, w = run.rows, run.plan.cfg, run.weighing
    width = rows["length"] - rows["padding"]
    truncated, source = None, ""
    if "truncated" in rows:
        truncated, source = rows["truncated"], "the truncated column"
    elif cfg.overlong_buffer_len is not None and cfg.max_resp_len is not None:
        truncated, source = width >= cfg.max_resp_len, f"rows of at least --max-resp-len {cfg.max_resp_len} positions"
    has_groups = run.plan.grouped
    weighed = WeighedRows(
        mass=rows["w_abs"], positive=rows["w_pos"], negative=rows["w_neg"],
        tokens=rows["used"], scale=w.scale, cause=label(judged, ctx).row_cause,
        turn_mass=rows["w_turn"], turn_tokens=rows["t_turn"],
        group=rows["group_id"] if has_groups else None,
        group_names=[uid_of[g] for g in range(len(uid_of))] if has_groups else None,
        truncated=truncated, truncated_source=source)
    agg = cfg.aggregation
    return gradient(weighed, trainer=agg.trainer, option=agg.option, mode=w.mode.name,
                    default=w.mode.name == agg.default, formula=f"w_t = A_t · ρ_t · m_t · c_i, c_i = {w.mode.formula}",
                    mini_batch_size=cfg.mini_batch_size, micro_batch_size=cfg.micro_batch_size,
                    loss_scale_factor=cfg.loss_scale_factor, mini_batches=int(w.split.mini_rows.size), terms=w.terms,
                    thresholds=ctx.thresholds, row_command=ctx.row_command)


def _dead_signal_report(run: Finished) -> dict:
    """Actor tokens (input response_mask 1) whose advantage is exactly 0, by cause: rejected by rollout
    rejection, in an all-equal group, in a singleton group, or otherwise (e.g. grpo_passk's non-best rows)."""
    rows = run.rows
    actor = float(rows["actor"].sum())
    zero = rows["adv_zero"]
    rejected = rows["actor"] - rows["used"]
    causes = {"rejected": float(rejected.sum())}
    if run.known.groups is not None and run.plan.est.groups:
        gid = rows["group_id"]
        all_equal, single = run.flags["all_equal_group"][gid], run.flags["singleton_group"][gid]
        causes["all_equal_group"] = float(zero[all_equal].sum())
        causes["singleton"] = float(zero[single & ~all_equal].sum())
        causes["other"] = float(zero[~all_equal & ~single].sum())
    else:
        causes["other"] = float(zero.sum())
    dead = sum(causes.values())
    return {"actor_tokens": int(actor), "zero_advantage_tokens": int(dead),
            "share": dead / actor if actor else 0.0, "causes": {k: int(v) for k, v in causes.items()}}


def _overlong_report(run: Finished) -> Optional[dict]:
    if run.plan.cfg.overlong_buffer_len is None:
        return None
    penalty = run.rows["overlong_penalty"]
    hit = penalty < 0
    return {"rows_penalised": int(hit.sum()),
            "mean_penalty_of_penalised": float(np.mean(X.float64(penalty[hit]))) if bool(hit.any()) else 0.0,
            "min_penalty": float(penalty.min())}


def _tool_rewards_report(run: Finished, warn: WarningBuilder) -> Optional[dict]:
    """The ``tool_rewards`` column: rows and calls, each row's sum, whether they were added to the score,
    and (left out, group estimators) the all-equal groups whose rows' tool rewards differ."""
    rows = run.rows
    if "tool_reward_sum" not in rows:
        return None
    sums, calls = rows["tool_reward_sum"], rows["tool_calls"]
    called = calls > 0
    coef = run.plan.cfg.tool_reward_coef
    out = {"added": coef is not None, "coef": coef, "rows_with_calls": int(called.sum()), "calls": int(calls.sum()),
           "sum_per_row": row_stats(sums[called]).model_dump()}
    groups = run.groups
    if groups is not None and CHECKS["tool_rewards_not_in_score"].applies(run.plan.est):
        gid, size = rows["group_id"], groups.size
        differ = run.flags["all_equal_group"] & ~group_flags(sums, gid, size)["all_equal_group"]
        out["all_equal_groups_with_differing_tool_rewards"] = int(differ.sum())
        if coef is None:
            hit = np.flatnonzero(differ)
            warn.add("tool_rewards_not_in_score", hit.size, np.sort(first_rows(gid, size.size)[hit]),
                     groups=hit.size, basis=_basis(run))
    return out


def _sessions_report(run: Finished) -> Optional[dict]:
    rows = run.source.num_rows
    if run.plan.steps:
        conv = run.plan.cfg.conv
        return {"folded": True, "trajectories": np.unique(run.fold_source).size, "rows": rows,
                "note": f"{conv.trainer}'s step-wise trajectories ({run.plan.steps}): only each trajectory's last "
                        "step enters the group statistics; every step gets that step's advantage"}
    if not run.has_sessions:
        return None
    folders = names_where(lambda e: e.folds_sessions)
    if not run.plan.fold:
        return {"folded": False, "rows": rows,
                "note": f"{run.plan.cfg.estimator} counts every output row as a group member (verl folds sessions "
                        f"for {', '.join(folders)} only)"}
    final = np.unique(run.fold_source).size
    return {"folded": True, "sessions": final, "rows": rows,
            "note": f"{run.plan.cfg.estimator}: only each session's final output enters the group statistics; every "
                    "output of the session gets that output's advantage"}


def _file_infos(run: Finished) -> list[FileInfo]:
    lengths = run.rows["length"]
    infos, start = [], 0
    for path, n in zip(run.source.paths, run.source.file_rows):
        infos.append(FileInfo(path=path, rows=n, tokens=int(lengths[start:start + n].sum())))
        start += n
    return infos


def _groups_report(run: Finished, warn: WarningBuilder) -> Groups:
    cfg, est, rows = run.plan.cfg, run.plan.est, run.rows
    n_batches = len(run.labels.batches)
    groups = run.groups
    if groups is None:
        return Groups(count=0, sizes={}, singletons=0, all_equal=0, batches=n_batches, formed_by="none")
    gid, size, flags = rows["group_id"], groups.size, run.flags
    first_row = first_rows(gid, size.size)
    group_batch = np.zeros(size.size, dtype=np.int64)
    group_batch[gid] = rows["batch_id"]
    if CHECKS["all_equal_group"].applies(est):  # an estimator without groups computes the same whatever the groups
        single = np.flatnonzero(flags["singleton_group"])
        warn.add("singleton_group", single.size, np.sort(first_row[single]), groups=single.size, est=est)
        _all_equal_warning(run, first_row, warn)
        _size_mismatch(size, group_batch, first_row, n_batches, warn)
    merges, merged_rows = run.uid_merges
    if merges:
        warn.add("uid_merge_grpo_vectorized", len(merges), merged_rows, merges=merges)
    mixed = run.mixed_blocks
    if mixed is not None and mixed.size:
        warn.add("block_mixes_uids", mixed.size, mixed, n=mixed.size, trainer=cfg.conv.trainer)
    hist = np.bincount(size)
    return Groups(
        count=size.size, sizes={str(k): int(v) for k, v in enumerate(hist.tolist()) if v},
        singletons=int((size == 1).sum()), all_equal=int(flags["all_equal_group"].sum()), batches=n_batches,
        formed_by=f"blocks of {run.group_size} rows" if run.group_size else run.plan.group_key,
    )


def _basis(run: Finished) -> str:
    """What the all-equal decision compared, a key of ``report.checks.BASES``: the reward components, the
    KL-shaped totals, the score totals when nothing shaped them, else the shaped totals."""
    cfg, rows = run.plan.cfg, run.rows
    if cfg.reward_components:
        return "components"
    if cfg.kl_in_reward:
        return "kl_shaped"
    return "score" if np.array_equal(rows["reward_total"], rows["score_total"]) else "shaped"


def _all_equal_warning(run: Finished, first_row: np.ndarray, warn: WarningBuilder) -> None:
    """``all_equal_group``, with the groups tied before shaping and the shares of the groups of 2+ rows that are
    all 0 and all at the batch's largest total R."""
    rows, size, tied = run.rows, run.groups.size, run.flags["all_equal_group"]
    gid, reward = rows["group_id"], X.float64(rows["reward_total"])
    hit = np.flatnonzero(tied)
    lo, _ = group_min_max(reward, gid, size.size)
    top = float(reward.max()) if hit.size else 0.0
    basis = _basis(run)
    before = (int(group_flags(rows["score_total"], gid, size)["all_equal_group"].sum())
              if basis in ("kl_shaped", "shaped") else None)
    warn.add("all_equal_group", hit.size, np.sort(first_row[hit]), groups=hit.size, basis=basis,
             before_shaping=before, multi=int((size > 1).sum()), all_zero=int((tied & (lo == 0)).sum()),
             all_top=int((tied & (lo == top) & (top > 0)).sum()))


def _size_mismatch(size: np.ndarray, group_batch: np.ndarray, first_row: np.ndarray, n_batches: int,
                   warn: WarningBuilder) -> None:
    """``group_size_mismatch``: batches whose groups differ in size; its rows are the first rows of the groups off
    their batch's most common size (ties: the larger), as ``rladv inspect`` points at them."""
    off_groups, references, batches = [], set(), 0
    for b in range(n_batches):
        in_batch = np.flatnonzero(group_batch == b)
        sizes, counts = np.unique(size[in_batch], return_counts=True)
        if not sizes.size:
            continue
        modal = sizes[counts == counts.max()].max()
        references.add(int(modal))
        if sizes.size < 2:
            continue
        batches += 1
        off_groups.append(in_batch[size[in_batch] != modal])
    if batches:
        off = np.concatenate(off_groups)
        common = next(iter(references)) if len(references) == 1 else None
        warn.add("group_size_mismatch", batches, np.sort(first_row[off]), off=off.size,
                 groups=size.size, batches=batches, size=group_size_words(common, "rows", None),
                 sizes=Counter(size.tolist()), unit="rows", expected=False)


def _kl_report(run: Finished, warn: WarningBuilder) -> KL:
    cfg, rows, labels = run.plan.cfg, run.rows, run.labels
    if not cfg.kl_in_reward:
        return KL(enabled=False, penalty=cfg.kl_penalty, ctrl=cfg.kl_ctrl, coef=cfg.kl_coef)
    warn.add_rows("kl_raises_reward", rows["kl_raises_reward"], penalty=cfg.kl_penalty)
    warn.add_rows("kl_flips_sign", rows["kl_flips_sign"], coef=cfg.kl_coef)
    kl_row, batch_of_row, beta = rows["kl_row"], rows["batch_id"], run.known.shaping.beta
    batches = []
    for b in labels.batch_order():
        sel = batch_of_row == b
        coef = cfg.kl_coef if beta is None else float(beta[b])
        batches.append(KLBatch(batch=labels.batch_name(b), rows=int(sel.sum()), kl=float(torch_mean(kl_row[sel])), coef=coef))
    return KL(enabled=True, penalty=cfg.kl_penalty, ctrl=cfg.kl_ctrl, mean=float(torch_mean(kl_row)), coef=cfg.kl_coef,
              batches=batches)


def finish_report(report: Report, output: str, config_source: Optional[dict], report_path, html_path,
                  side: Optional[SideFiles] = None, tables_out: tuple = (None, None),
                  started: Optional[float] = None) -> Report:
    """``report`` with its output, the settings' notes (``Config.notes``), what a verl YAML contributed and the
    run's wall time since ``started`` (``time.perf_counter``), written as JSON and HTML where asked, and the
    tables behind its verdict (``tables_out``: the groups' and the rows' Parquet paths): staged in ``side``
    (renamed by its ``commit``), else at once."""
    notes = setting_notes(report.config)
    config = {**report.config, **({"notes": notes} if notes else {}),
              **({"verl_config": config_source} if config_source else {})}
    timing = report.timing if started is None else report.timing.model_copy(
        update={"wall_seconds": round(time.perf_counter() - started, 6)})
    report = report.model_copy(update={"output": output, "config": config, "timing": timing})
    if report_path is None and html_path is None and tables_out == (None, None):
        return report
    with SideFiles() as own:
        files = side if side is not None else own
        write_tables(files, report, tables_out)
        if report_path is not None:
            files.write(report_path, report.to_json())
        if html_path is not None:
            from ..report.html import render_html

            files.write(html_path, render_html(report))
        own.commit()
    return report
