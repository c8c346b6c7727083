"""The report of a finished run (docs/contract.md §4): every section and every warning, built once the write
pass is over from what the passes established (``Finished``); and ``finish_report``, which adds the output, the
settings' notes and what a verl YAML contributed, and writes the JSON and HTML files."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from .. import __version__
from ..config.settings import setting_notes
from ..contract.labels import Labels
from ..estimators.registry import names_where
from ..io.read import RowSource
from ..io.write import SideFiles
from ..report import replay
from ..report.diagnostics import (RowTable, TokenSketches, WarningBuilder, distributions, first_rows, group_flags,
                                  token_stats)
from ..report.model import (KL, FileInfo, Groups, Inputs, KLBatch, Report, Scores, Timing, Tokens, example_command,
                            row_filter, row_stats)
from ..report.tables import RowFacts, verdict_tables, write_tables
from ..loss.scale import Weighing
from ..report.gradient import Gradient, WeighedRows, gradient
from ..report.verdict import Context, RowsToJudge, Verdict, judge, label
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
    flags: dict[str, Tensor]
    fold_source: Optional[Tensor]
    whitening: list[dict]
    uid_merges: tuple[list[tuple], Tensor]
    baseline_ill_conditioned: tuple[float, Tensor]
    correction_stats: dict[int, object]
    sketches: TokenSketches
    outcome_basis: str
    seconds: dict[str, float]
    mixed_blocks: Optional[Tensor] = None  # first rows of blocks (a blocks convention) holding several uids
    group_size: Optional[int] = None  # the blocks' size, under a convention that cuts blocks
    weighing: Optional[Weighing] = None  # the loss aggregation's per-row scales (--loss-agg-mode)

    @property
    def groups(self):
        """The group statistics on the CPU (None without a uid column)."""
        return None if self.known.groups is None else self.known.groups.to(torch.device("cpu"))


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
        scores=Scores(score_total=row_stats(rows["score_total"].double().numpy()),
                      reward_total=row_stats(rows["reward_total"].double().numpy())),
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
    file_of = torch.repeat_interleave(torch.arange(len(shards)), torch.tensor([s.num_rows for s in shards]))
    gid, G = run.rows["group_id"].long(), run.groups.size.numel()
    lo = torch.full((G,), len(shards), dtype=torch.long).scatter_reduce(0, gid, file_of, "amin")
    hi = torch.full((G,), -1, dtype=torch.long).scatter_reduce(0, gid, file_of, "amax")
    warn.add_rows("uid_spans_files", "{n} row(s) are in uid groups with rows in several input files, and no batch key "
                  "splits them: if each file is a training step, each such group merges a prompt's samples across "
                  "steps (give --batch-key COLUMN, or uids unique per step as verl's are)", (hi > lo)[gid])


def _row_warnings(run: Finished, warn: WarningBuilder) -> None:
    """The warnings about single rows: scores off the mask, rows without (or with rejected) actor tokens, the
    estimators' own row checks, and sessions whose verl key collides."""
    rows = run.rows
    warn.add_rows("score_on_masked_position",
                  "{n} row(s) carry a non-zero score on a position whose response_mask is 0 (a tool observation or padding): "
                  "outcome estimators (R_i sums every position) still count it; gae, reinforce_plus_plus, remax and "
                  "the optimal-token baselines drop it", rows["score_on_masked_position"])
    warn.add_rows("row_without_actor_tokens", "{n} row(s) have no position with response_mask 1: they get no advantage",
                  rows["actor"] == 0)
    if "unscorable" in rows:
        warn.add_rows("unscorable_row", f"{{n}} row(s) have no score (null or NaN: {run.plan.cfg.conv.trainer}'s "
                      "unscorable completion): left out of their group's mean and std, advantage 0 (the report's "
                      "totals count them as 0)", rows["unscorable"])
    if "credit_reset_at_mask" in rows:
        text = ("{n} row(s): reinforce_plus_plus in reset mode cut a reward off from earlier tokens at a mask-0 "
                "position (--rpp-mask-mode carry passes it through, as verl 0.9.1 does)"
                if run.plan.cfg.rpp_mask_mode == "reset" else
                "{n} row(s) pass a return across a mask-0 position to earlier tokens, as verl 0.9.1 does (--rpp-mask-mode "
                "carry, the default); --rpp-mask-mode reset (verl before 0.9, the chapter) would cut it off there")
        warn.add_rows("credit_reset_at_mask", text, rows["credit_reset_at_mask"])
    if "negative_token_weight" in rows:
        warn.add_rows("negative_token_weight",
                      "{n} row(s) have an actor token whose optimal-baseline weight w = 1 - 2π + sum_pi_squared is "
                      "negative: sum_pi_squared is below π² = exp(old_log_prob)² there, which a policy's own Σπ² "
                      "never is (another temperature or policy?); such weights can cancel in a group's baseline",
                      rows["negative_token_weight"])
    if run.plan.fold:
        warn.add_rows("session_key_collision",
                      "{n} row(s) belong to sessions whose uid and session_id join to another session's verl key "
                      "f'{{uid}}_{{session_id}}' in the same batch: verl 0.9.1 folds such sessions into one, rladv keeps "
                      "them apart (ids from verl, an integer session_id, never collide)",
                      torch.isin(rows["session"], torch.from_numpy(run.labels.colliding_sessions())))
    # rejected: by this run's rollout rejection, or already in the input (response_mask below its loss_mask)
    rejected = rows["actor"] - rows["used"]
    warn.add_rows("row_fully_rejected", "{n} row(s) lost every valid token to rollout rejection",
                  (rows["actor"] > 0) & (rows["used"] == 0))
    if run.plan.est.groups:
        warn.add_rows("rejected_in_group_baseline",
                      "{n} row(s) with rejected tokens still contribute their full reward to their group's baseline",
                      rejected > 0)


def _conditioning_warnings(run: Finished, warn: WarningBuilder) -> None:
    """Batches whose whitening, and groups whose optimal-token baseline, one float32 rounding moves by 1e-6 or more."""
    rows = run.rows
    centred_only = run.plan.est.biased_whitening and not run.plan.cfg.norm_adv_by_std  # nothing is divided
    shifts = {} if centred_only else {b: _ulp_shift(w) for b, w in enumerate(run.whitening)}  # one entry per batch
    ill = {b: shift for b, shift in shifts.items() if shift >= ILL_CONDITIONED_SHIFT}
    if ill:
        first = [int(torch.nonzero(rows["batch_id"] == b)[0]) for b in ill]
        worst = max(ill.values())
        warn.add("whitening_ill_conditioned",
                 f"{len(first)} batch(es) whiten values whose spread is tiny next to their size: one float32 ulp "
                 f"of the batch mean moves every advantage by up to {worst:.1e}. verl sums the mean in float32 in an "
                 "order rladv cannot follow (rladv: float64), so its advantages differ from rladv's by a few such "
                 "steps; all values equal gives rladv 0 and verl float32 noise", len(first), sorted(first))
    worst, ill_groups = run.baseline_ill_conditioned
    if ill_groups.numel():
        first = torch.sort(first_rows(rows["group_id"], run.labels.group_count)[ill_groups]).values
        warn.add("baseline_ill_conditioned",
                 f"{ill_groups.numel()} group(s) have positions where the baseline's weights Σ_i W[i,t] nearly cancel "
                 f"(w = 1 - 2π + Σπ² is negative where sum_pi_squared < π², which a policy's own Σπ² never "
                 f"is): one float32 rounding of its sums moves the baseline, and "
                 f"the advantages, by up to {worst:.1e}. verl sums them in float32 (rladv: float64), so its "
                 "advantages there differ from rladv's by about that much", ill_groups.numel(), first)


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
        step = rank[rows["batch_id"].numpy()]
    elif len(paths) > 1:
        step_names = paths
        step = np.repeat(np.arange(len(paths)), run.source.file_rows)
    else:
        step_names, step = [], None
    judged = RowsToJudge(
        actor=rows["actor"].numpy(), used=rows["used"].numpy(), zero=rows["adv_zero"].numpy(),
        group=rows["group_id"].numpy() if has_groups else None, reward=rows["reward_total"].double().numpy(),
        all_equal=run.flags["all_equal_group"].numpy() if has_groups else None,
        score_equal=group_flags(rows["score_total"], rows["group_id"], run.groups.size)["all_equal_group"].numpy()
        if has_groups and not cfg.reward_components else None,
        dataset_row=np.arange(run.source.num_rows), step=step,
        kl=rows["kl_row"].double().numpy() if cfg.kl_in_reward else None,
        mass=rows["w_abs"].numpy() if run.weighing is not None else None)
    agg = cfg.aggregation
    ctx = Context(estimator=cfg.estimator, uses_groups=est.groups, singleton_rule=est.singleton,
                  row_command=lambda r: example_command(paths, cfg, row=r),
                  group_command=lambda g: example_command(paths, cfg, uid=uid_of[g]) if cfg.conv.grouping == "uid"
                  else example_command(paths, cfg, row=int(first_rows(rows["group_id"], len(uid_of))[g])),
                  step_names=step_names, epsilon=est.std_epsilon(cfg.epsilon, cfg.norm_adv_by_std),
                  thresholds=cfg.levels, weighing=f"{agg.trainer} {cfg.loss_agg_mode}" if cfg.loss_agg_mode else None)
    grad = _gradient(run, judged, ctx, uid_of) if run.weighing is not None else None
    file_index, file_row = run.source.row_origins()
    padding = rows["padding"].numpy() if "padding" in rows else 0
    facts = RowFacts(score_total=rows["score_total"].double().numpy(),
                     observation=rows["length"].numpy() - rows["actor"].numpy() - padding,
                     file_index=file_index, file_row=file_row, paths=paths,
                     uids=[uid_of[g] for g in range(len(uid_of))] if has_groups else None,
                     adv_sum=rows["adv_sum"].numpy(), adv_count=rows["adv_count"].numpy(),
                     adv_min=rows["adv_min"].numpy(), adv_max=rows["adv_max"].numpy(),
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
             "weight_mass": pa.array(rows["w_abs"].numpy()),
             "weight_net": pa.array((rows["w_pos"] + rows["w_neg"]).numpy())}
    for name, values in added.items():
        table = table.append_column(name, values)
    return table


def _gradient(run: Finished, judged: RowsToJudge, ctx: Context, uid_of: dict) -> Gradient:
    """The gradient section (docs/weights.md) from the write pass's per-row weight sums, the verdict's causes
    and the weighing; the truncated rows from the truncated column, else (overlong shaping on) the rows at least
    --max-resp-len long."""
    rows, cfg, w = run.rows, run.plan.cfg, run.weighing
    width = (rows["length"] - rows["padding"]).numpy()
    truncated, source = None, ""
    if "truncated" in rows:
        truncated, source = rows["truncated"].numpy(), "the truncated column"
    elif cfg.overlong_buffer_len is not None and cfg.max_resp_len is not None:
        truncated, source = width >= cfg.max_resp_len, f"rows of at least --max-resp-len {cfg.max_resp_len} positions"
    has_groups = run.plan.grouped
    weighed = WeighedRows(
        mass=rows["w_abs"].numpy(), positive=rows["w_pos"].numpy(), negative=rows["w_neg"].numpy(),
        tokens=rows["used"].numpy(), scale=w.scale, cause=label(judged, ctx).row_cause,
        turn_mass=rows["w_turn"].numpy(), turn_tokens=rows["t_turn"].numpy(),
        group=rows["group_id"].numpy() if has_groups else None,
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
            "mean_penalty_of_penalised": float(penalty[hit].double().mean()) if bool(hit.any()) else 0.0,
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
           "sum_per_row": row_stats(sums[called].numpy()).model_dump()}
    groups = run.groups
    if groups is not None and run.plan.est.groups:
        gid, size = rows["group_id"], groups.size
        differ = run.flags["all_equal_group"] & ~group_flags(sums, gid, size)["all_equal_group"]
        out["all_equal_groups_with_differing_tool_rewards"] = int(differ.sum())
        if coef is None:
            hit = torch.nonzero(differ).flatten()
            warn.add("tool_rewards_not_in_score",
                     f"{hit.numel()} all-equal group(s) have rows whose tool_rewards differ: a signal the score "
                     "leaves out (verl never adds tool rewards; --tool-reward-coef C adds C * their sum to each "
                     "row's score)", hit.numel(), torch.sort(first_rows(gid, size.numel())[hit]).values)
    return out


def _sessions_report(run: Finished) -> Optional[dict]:
    rows = run.source.num_rows
    if run.plan.steps:
        conv = run.plan.cfg.conv
        return {"folded": True, "trajectories": torch.unique(run.fold_source).numel(), "rows": rows,
                "note": f"{conv.trainer}'s step-wise trajectories ({run.plan.steps}): only each trajectory's last "
                        "step enters the group statistics; every step gets that step's advantage"}
    if not run.has_sessions:
        return None
    folders = names_where(lambda e: e.folds_sessions)
    if not run.plan.fold:
        return {"folded": False, "rows": rows,
                "note": f"{run.plan.cfg.estimator} counts every output row as a group member (verl folds sessions "
                        f"for {', '.join(folders)} only)"}
    final = torch.unique(run.fold_source).numel()
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
    first_row = first_rows(gid, size.numel())
    group_batch = torch.zeros(size.numel(), dtype=torch.long).scatter_(0, gid, rows["batch_id"])
    if est.groups:  # an estimator without groups computes the same advantages whatever the groups are
        equal = "equal reward components" if cfg.reward_components else "equal total rewards"
        for code, text in (
            ("singleton_group", f"{{n}} uid group(s) have one row; {cfg.estimator}: {est.singleton}"),
            ("all_equal_group", f"{{n}} group(s) of 2+ rows have {equal}: no learning signal from them (float32 "
                                "rounding can leave tiny non-zero advantages, as in verl)"),
        ):
            hit = torch.nonzero(flags[code]).flatten()
            warn.add(code, text.format(n=hit.numel()), hit.numel(), torch.sort(first_row[hit]).values)
        _size_mismatch(size, group_batch, first_row, n_batches, warn)
    merges, merged_rows = run.uid_merges
    if merges:
        shown = "; ".join("/".join(repr(u) for u in m) for m in merges[:3])
        merging = ", ".join(names_where(lambda e: e.int_uids))
        warn.add("uid_merge_grpo_vectorized",
                 f"{len(merges)} set(s) of distinct uids that verl's {merging} converts to one integer and "
                 f"merges into one group ({shown}); rladv merges them too, as verl does", len(merges), merged_rows)
    mixed = run.mixed_blocks
    if mixed is not None and mixed.numel():
        conv = run.plan.cfg.conv
        warn.add("block_mixes_uids",
                 f"{mixed.numel()} block(s) of {conv.trainer}'s consecutive --group-size rows hold rows of more than "
                 f"one uid: the file is not in the order {conv.trainer} grouped it, or --group-size is not its group "
                 "size; these blocks' baselines mix prompts", mixed.numel(), mixed)
    hist = torch.bincount(size)
    return Groups(
        count=size.numel(), sizes={str(k): int(v) for k, v in enumerate(hist.tolist()) if v},
        singletons=int((size == 1).sum()), all_equal=int(flags["all_equal_group"].sum()), batches=n_batches,
        formed_by=f"blocks of {run.group_size} rows" if run.group_size else run.plan.group_key,
    )


def _size_mismatch(size: Tensor, group_batch: Tensor, first_row: Tensor, n_batches: int, warn: WarningBuilder) -> None:
    """``group_size_mismatch``: batches whose groups differ in size; its rows are the first rows of the groups off
    their batch's most common size (ties: the larger), as ``rladv inspect`` points at them."""
    off_groups, batches = [], 0
    for b in range(n_batches):
        in_batch = torch.nonzero(group_batch == b).flatten()
        sizes, counts = torch.unique(size[in_batch], return_counts=True)
        if sizes.numel() < 2:
            continue
        batches += 1
        modal = sizes[counts == counts.max()].max()
        off_groups.append(in_batch[size[in_batch] != modal])
    if batches:
        off = torch.cat(off_groups)
        shown = ", ".join(str(s) for s in torch.unique(size).tolist())
        warn.add("group_size_mismatch",
                 f"group sizes differ within {batches} batch(es) ({shown} rows): {off.numel()} group(s) off their "
                 "batch's most common size, their first rows shown; check that every prompt got rollout.n samples",
                 batches, torch.sort(first_row[off]).values)


def _kl_report(run: Finished, warn: WarningBuilder) -> KL:
    cfg, rows, labels = run.plan.cfg, run.rows, run.labels
    if not cfg.kl_in_reward:
        return KL(enabled=False, penalty=cfg.kl_penalty, ctrl=cfg.kl_ctrl, coef=cfg.kl_coef)
    warn.add_rows("kl_raises_reward",
                  "{n} row(s) whose KL term (the coefficient times the sum of the row's KL estimates) is negative, so "
                  "shaping raised their total reward: the policy is less likely than the reference on those rows' "
                  "tokens overall, unusual outside k1/k2's noise",
                  rows["kl_raises_reward"])
    warn.add_rows("kl_flips_sign", "{n} row(s) changed the sign of their total reward through KL shaping",
                  rows["kl_flips_sign"])
    kl_row, batch_of_row, beta = rows["kl_row"], rows["batch_id"], run.known.shaping.beta
    batches = []
    for b in labels.batch_order():
        sel = batch_of_row == b
        coef = cfg.kl_coef if beta is None else float(beta[b])
        batches.append(KLBatch(batch=labels.batch_name(b), rows=int(sel.sum()), kl=float(kl_row[sel].mean()), coef=coef))
    return KL(enabled=True, penalty=cfg.kl_penalty, ctrl=cfg.kl_ctrl, mean=float(kl_row.mean()), coef=cfg.kl_coef,
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
