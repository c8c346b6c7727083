"""The driver of ``rladv compute``: the passes over a row source and the batch-wide reductions between them.

Per chunk, the stages run in verl's order (docs/semantics.md §10; ``stages.chain``), then the estimator and
whitening, then the write. Each pass reads only the columns it needs (a dataset that fits the cache is read from
disk once) and is split at the input files (shards): ``shard.ShardWork`` runs it over one shard and hands back
per-row arrays and mergeable partial statistics; ``Pipeline`` maps it over the shards, here one after the other
or on Ray workers (``ray_engine``), merges the results in shard order and reduces batch-wide statistics
(group means and stds, whitening moments, KL coefficients) over whole per-row arrays, so results depend
neither on ``--chunk-rows`` nor on the engine. Groups and batches may span shards. What a pass establishes
reaches the next one as a new frozen ``shard.Established``; the report is built from the finished run
(``summary``).
"""
from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import replace
from functools import partial
from typing import Callable, Mapping, Optional

import numpy as np
import pyarrow as pa

from ..config.correction import parse_rollout_is, parse_rollout_rs
from ..config.flags import named
from ..config.settings import Config
from ..contract import validation
from ..contract.labels import Labels
from ..errors import ComputeError, InputError, shown
from ..io.read import RowSource
from ..io.write import computed_columns, output_schema
from ..loss.scale import RowFacts, Weighing, weigh
from ..loss.scale import Settings as LossSettings
from ..report import replay
from ..report.diagnostics import (
    RowTable,
    TokenSketches,
    first_rows,
    group_flags,
    row_outcomes,
)
from ..report.model import Report
from ..report.verdict import group_min_max
from ..stages.chain import Chain, Shaping
from ..stages.shaping import KLController
from ..tensors import kernels
from ..tensors import xp as X
from ..tensors.batch import resolve_device
from ..tensors.groups import PositionSums, group_stats
from .shard import (
    Established,
    MapShards,
    Plan,
    Progress,
    ShardResult,
    ShardWork,
    map_here,
)
from .summary import ILL_CONDITIONED_SHIFT, Finished, build_report


class Pipeline:
    """One run of the stages over a row source (``io.read.RowSource``: files, or an in-memory table).

    Each pass maps a ``ShardWork`` pass over the source's shards (``map_shards``: in this process, shard
    after shard, or on Ray workers) and merges their results in shard order; batch-wide statistics are then
    reduced here over whole per-row arrays and handed to the next pass. Whatever runs the shards, the
    reductions see the same arrays, so the numbers are the same."""

    def __init__(self, source: RowSource, cfg: Config, progress: Optional[Progress] = None,
                 pad_widths: Optional[Mapping[object, int]] = None):
        cfg = cfg.for_columns(source.columns)  # the batch key: the data's step column unless given
        self.source, self.cfg, self.pad_widths = source, cfg, pad_widths
        self.est = est = cfg.spec
        self.device = resolve_device(cfg.device)
        names = set(source.columns)
        group_key = cfg.conv.group_key(names)
        rules = parse_rollout_rs(cfg.rollout_rs, cfg.rollout_rs_threshold) if cfg.rollout_rs else ()
        is_cfg = (parse_rollout_is(cfg.rollout_is, cfg.rollout_is_threshold, cfg.rollout_is_batch_normalize)
                  if cfg.rollout_is else None)
        self.required = validation.required_columns(
            source.columns, cfg.conv.reads(est, names), kl=cfg.use_kl, rollout_correction=bool(rules or is_cfg),
            batch_key=cfg.batch_column, reward_components=cfg.reward_components or (),
            tool_rewards=cfg.tool_reward_coef is not None,
            # the gradient section reads the truncated column when the file has one
            truncated=cfg.stop_properly_penalty_coef is not None or (cfg.loss_mode is not None and "truncated" in names),
        )
        validation.check_schema(source.paths[0], source.schema, self.required)
        if source.num_rows == 0:
            raise InputError(source.paths[0], "holds no rows")
        self.has_sessions = {"session_id", "output_index", "uid"} <= names
        added = {"with_is_weights": is_cfg is not None, "with_token_weight": cfg.loss_mode is not None}
        replay_columns, self.replay_skipped = replay.comparable(source.schema, set(computed_columns(**added)))
        fold = self.has_sessions and est.folds_sessions
        step_column = cfg.conv.step_column
        steps = step_column if step_column in names and est.groups else None
        self.plan = Plan(
            cfg=cfg, est=est, chain=Chain(cfg, rules, is_cfg, self.device, exact_rewards(cfg, source.schema)),
            # verl runs rollout correction (at least its metrics) whenever rollout log-probs are present
            correct={"old_log_probs", "rollout_log_probs"} <= names, group_key=group_key,
            grouped=group_key is not None or cfg.conv.blocks, fold=fold, steps=steps,
            scan_columns=tuple(self._scan_columns(fold, group_key, steps)),
            schema=output_schema(source.schema, **added),
            replay_columns=tuple(replay_columns),
        )
        self.work = ShardWork(self.plan, source, progress)
        self.labels = Labels(cfg.batch_column)
        self.rows = RowTable()
        self.seconds: dict[str, float] = defaultdict(float)

    def _scan_columns(self, fold: bool, group_key: Optional[str], steps: Optional[str]) -> list[str]:
        names = self.source.columns
        optional = ("attention_mask", "loss_mask", "uid", "old_log_probs", "rollout_log_probs", "tool_rewards")
        order = self.cfg.conv.order_column
        wanted = set(self.required) | {c for c in optional if c in names} | {group_key, order, steps}
        if self.cfg.loss_mode is not None and "truncated" in names:
            wanted.add("truncated")
        if fold:
            wanted |= {"session_id", "output_index"}
        return [c for c in names if c in wanted]

    # ----------------------------------------------------------------- run
    def run(self, write: Optional[Callable[[pa.Table], None]], map_shards: Optional[MapShards] = None) -> Report:
        """All passes; the write pass's tables go to ``write`` (local engine) or wherever ``map_shards``'s
        workers put them (``write`` is then unused)."""
        if map_shards is None:
            map_shards = partial(map_here, write=write)
        torch = sys.modules.get("torch")  # imported for a run on cuda; numpy needs no thread setting
        if torch is None:
            return self._run(map_shards)
        threads = torch.get_num_threads()
        torch.set_num_threads(self.cfg.threads)
        try:
            return self._run(map_shards)
        finally:
            torch.set_num_threads(threads)

    def _run(self, map_shards: MapShards) -> Report:
        t0 = time.perf_counter()
        est, fold = self.est, self.plan.fold or self.plan.steps is not None
        known = self._merge_layout(self._map(map_shards, "layout", (), None))
        if self.plan.adaptive_kl:
            known = self._step_kl_controller(self._map(map_shards, "kl", ("batch_id",), known), known)
        correction, known = self._merge_scan(self._map(map_shards, "scan", ("batch_id",), known), known)
        uid_merges = self._merge_int_uids() if est.int_uids and self.plan.group_key else ([], np.zeros(0, dtype=np.int64))
        group_size, blocks = self._cut_blocks() if self.cfg.conv.blocks else (None, None)
        if self.plan.correct:
            check_correction_batches(self.rows, self.labels)
        known, grouped = self._group_pass(known, group_size)
        weighing = self._weigh() if self.cfg.loss_mode is not None else None
        given = ("batch_id", "group_id", "reward_total", *(("session_total", "session_active") if fold else ()),
                 *(("row_advantage",) if est.row_advantage else ()), *(("token_scale",) if weighing else ()))
        ill = (0.0, np.zeros(0, dtype=np.int64))
        if (est.whiten and est.groups) or est.accumulate:
            known, ill = self._merge_group_statistics(self._map(map_shards, "group_statistics", given, known), known)
        entries = []
        if est.whiten:
            mean, var, entries = whitening(self.rows, self.labels, self.cfg.estimator, est.biased_whitening)
            known = replace(known, whiten_mean=X.on_device(mean, self.device),
                            whiten_var=X.on_device(var, self.device))
        if est.groups and known.groups:
            outcome_basis, outcome = row_outcomes(grouped["basis"], self.rows["group_id"], grouped["flags"])
        else:
            outcome_basis, outcome = row_outcomes(self.rows["reward_total"])
        self.rows.add(outcome=outcome)
        sketches = TokenSketches(with_values="values" in est.columns)
        for result in self._map(map_shards, "write", (*given, "outcome"), known):
            self.rows.add(**result.rows)
            sketches.merge(result.sketches)
        self.seconds["total"] = time.perf_counter() - t0
        return build_report(Finished(
            source=self.source, plan=self.plan, has_sessions=self.has_sessions, replay_skipped=self.replay_skipped,
            rows=self.rows, labels=self.labels, known=known, flags=grouped["flags"], fold_source=grouped["fold"],
            whitening=entries, uid_merges=uid_merges, baseline_ill_conditioned=ill, correction_stats=correction,
            sketches=sketches, outcome_basis=outcome_basis, seconds=dict(self.seconds), mixed_blocks=blocks,
            group_size=group_size, weighing=weighing,
        ))

    def _map(self, map_shards: MapShards, stage: str, names: tuple[str, ...],
             known: Optional[Established]) -> list[ShardResult]:
        """Run ``stage`` over every shard with its rows of the per-row inputs ``names``; results in shard order."""
        given = {name: self.rows[name] for name in names if name in self.rows}
        items = [(shard, {name: values[shard.first_row:shard.first_row + shard.num_rows] for name, values in given.items()})
                 for shard in self.source.shards]
        results = map_shards(stage, self.work, items, known)
        for result in results:
            for name, seconds in result.seconds.items():
                self.seconds[name] += seconds
        return results

    # ----------------------------------------------------------------- reductions
    def _merge_layout(self, results: list[ShardResult]) -> Established:
        """Batch ids renumbered by first appearance in the dataset; each batch's pad width (verl pads each
        batch to its longest response, which fixes how row totals round; at least ``pad_widths[batch value]``
        and ``cfg.pad_width`` when given, so rows taken out of a larger dataset round as they do in it)."""
        for result in results:
            renumber = self.labels.absorb(result.labels)
            cols = dict(result.rows)
            if "batch_id" in cols:  # absent for a file without rows
                cols["batch_id"] = renumber["batch"][cols["batch_id"]]
            self.rows.add(**cols)
        n_batches = len(self.labels.batches)
        pad_width = X.scatter_max(n_batches, self.rows["batch_id"], X.int64(self.rows["length"]), 0)
        positions = int(pad_width.max()) if n_batches else 0
        for value, b in self.labels.batches.items() if self.pad_widths is not None else ():
            pad_width[b] = max(int(pad_width[b]), self.pad_widths.get(value, 0))
        if self.cfg.pad_width is not None:
            pad_width = np.maximum(pad_width, self.cfg.pad_width)
        return Established(shaping=Shaping(pad_width), positions=positions)

    def _step_kl_controller(self, results: list[ShardResult], known: Established) -> Established:
        """Each batch's KL coefficient: the adaptive controller stepped in batch order on verl's
        ``current_kl``, the float32 mean of the batch's ``kl_row``."""
        for result in results:
            self.rows.add(**result.rows)
        batch_of_row = self.rows["batch_id"]
        ctrl = KLController(self.cfg.kl_ctrl, self.cfg.kl_coef, self.cfg.kl_target, self.cfg.kl_horizon)
        beta = np.zeros(len(self.labels.batches), dtype=np.float64)
        for b in self.labels.batch_order():
            sel = batch_of_row == b
            beta[b] = ctrl.value
            ctrl.update(float(kernels.torch_mean(self.rows["kl_row"][sel])), int(sel.sum()))
        return replace(known, shaping=replace(known.shaping, beta=beta))

    def _merge_scan(self, results: list[ShardResult], known: Established) -> tuple[dict, Established]:
        """Per-row values in dataset order, group and session ids renumbered by first appearance, and the
        rollout-correction statistics of each batch (with the IS normalisation factor each batch needs)."""
        correction: dict[int, object] = {}
        for result in results:
            renumber = self.labels.absorb(result.labels)
            cols = dict(result.rows)
            for name, kind in (("group_id", "group"), ("session", "session")):
                if name in cols:
                    cols[name] = renumber[kind][cols[name]]
            self.rows.add(**cols)
            for bid, stats in result.correction.items():
                if bid in correction:
                    correction[bid].merge(stats)
                else:
                    correction[bid] = stats
        is_cfg = self.plan.chain.is_cfg
        if is_cfg is not None and is_cfg.batch_normalize:
            factor = np.array([correction[b].norm_factor() for b in range(len(self.labels.batches))],
                              dtype=np.float32)
            known = replace(known, shaping=replace(known.shaping, is_norm_factor=factor))
        return correction, known

    def _cut_blocks(self) -> tuple[int, np.ndarray]:
        """Groups as a trainer that reshapes its batch into ``[G, n]`` forms them (docs/conventions.md): blocks of
        ``n`` consecutive rows of each batch in row order (in the order of ``Convention.order_column`` when the
        file has it), ``n`` = ``--group-size`` or the uid groups' common size. Returns ``n`` and the first row of
        each block whose rows carry more than one uid (the file is then not in the order the trainer grouped it)."""
        conv, batch_of_row = self.cfg.conv, self.rows["batch_id"]
        uid_group = self.rows["group_id"] if self.plan.group_key else None
        n = self.cfg.group_size or self._common_group_size(uid_group)
        counts = X.bincount(batch_of_row, len(self.labels.batches))
        uneven = np.flatnonzero(counts % n)
        if uneven.size:
            where = self.labels.batch_name(int(uneven[0]))
            raise ComputeError(
                f"{named('convention', conv.name)}: {conv.trainer} cuts each batch into blocks of {n} rows "
                f"({named('group_size')}), "
                f"and {'batch ' + where if where else 'the dataset'} has {int(counts[uneven[0]])} rows")
        if "order_key" in self.rows:  # the trainer's sample index: rows within a batch in its order
            order = np.lexsort((self.rows["order_key"], batch_of_row))
        else:
            order = np.argsort(batch_of_row, kind="stable")
        ordinal = np.empty_like(order)
        ordinal[order] = np.arange(order.size) - (np.cumsum(counts) - counts)[batch_of_row[order]]
        width = int(counts.max()) // n
        key = batch_of_row * width + ordinal // n
        _, group = Labels._first_appearance(key)
        first = first_rows(group, int(group.max()) + 1)
        old = {g: uid for (_, uid), g in self.labels.groups.items()}
        seen: dict[tuple, int] = defaultdict(int)
        names = {}
        for g, row in enumerate(first.tolist()):
            b = int(batch_of_row[row])
            base = old[int(uid_group[row])] if uid_group is not None else f"block {int(ordinal[row]) // n}"
            seen[b, base] += 1
            names[b, base if seen[b, base] == 1 else f"{base} #{seen[b, base]}"] = g
        self.labels.groups = names
        self.rows.replace("group_id", group)
        if uid_group is None:
            return n, np.zeros(0, dtype=np.int64)
        lo, hi = group_min_max(uid_group, group, first.size)
        return n, np.sort(first[lo != hi])

    def _common_group_size(self, uid_group: Optional[np.ndarray]) -> int:
        """The size every uid group shares: what ``--group-size`` defaults to under a blocks convention."""
        conv = self.cfg.conv
        if uid_group is None:
            raise ComputeError(f"{named('convention', conv.name)}: {conv.trainer} groups blocks of rows in file order; "
                               f"give {named('group_size')} (the file has no uid column to take the group size from)")
        sizes = np.unique(np.bincount(uid_group)).tolist()
        if len(sizes) != 1:
            raise ComputeError(f"{named('convention', conv.name)}: the uid groups have {len(sizes)} sizes "
                               f"({', '.join(map(str, sizes[:4]))}); {conv.trainer} cuts blocks of one size: give "
                               f"{named('group_size')}")
        return int(sizes[0])

    def _merge_int_uids(self) -> tuple[list[tuple], np.ndarray]:
        """Groups whose uids verl's ``as_torch_index`` converts to one integer become one group, as in verl
        (``Estimator.int_uids``); returns the sets of uids merged and the first row of each merged uid."""
        old = self.rows["group_id"]
        old_uids = [uid for (_, uid) in self.labels.groups]
        renumber = self.labels.merge_as_verl_index()
        members = np.bincount(renumber)[renumber] > 1
        sets = defaultdict(list)
        for g in np.flatnonzero(members).tolist():
            sets[int(renumber[g])].append(old_uids[g])
        merged_rows = np.sort(first_rows(old, renumber.size)[members])
        self.rows.replace("group_id", renumber[old])
        return [tuple(m) for m in sets.values()], merged_rows

    def _group_pass(self, known: Established, group_size: Optional[int]) -> tuple[Established, dict]:
        """Batch sizes and group statistics of the row totals over the whole dataset (groups never cross
        batches); an estimator's minimum group size is enforced here, before anything is written. Returns
        what the later passes read, and for the report each group's flags (``group_flags``), the per-row value
        groups are judged on (``basis``: ``R_i``, gdpo's weighted components) and each row's session's final
        output (``fold``) when sessions are folded. ``group_size``: the blocks' size under a convention that cuts
        blocks (a trainer's ``row_advantage`` reshapes by it)."""
        est, n_batches, batch_of_row = self.est, len(self.labels.batches), self.rows["batch_id"]
        known = replace(known, batch_rows=X.bincount(batch_of_row, n_batches),
                        batch_nonzero_rows=X.int64(X.bincount(batch_of_row, n_batches,
                                                              X.float64(self.rows["reward_total"] != 0))))
        if est.binary_rewards:
            self._check_binary(self.rows["reward_total"])
        if {"batch_mean", "batch_std"} & set(est.needs):  # each batch's rows as one group
            levels = group_stats(self.rows["reward_total"], batch_of_row, n_batches, self.rows["used"], ("mean", "std"))
            known = replace(known, batch_mean=levels.mean, batch_std=levels.std)
        grouped = {"flags": {}, "basis": None, "fold": None}
        if not self.plan.grouped:
            return known, grouped
        n_groups, gid, used = self.labels.group_count, self.rows["group_id"], self.rows["used"]
        reward, wanted = self.rows["reward_total"], est.group_statistics
        if self.plan.fold or self.plan.steps:
            grouped["fold"] = fold = (_final_outputs(self.rows["session"], self.rows["output_index"]) if self.plan.fold
                                      else self._trajectory_ends())
            final = np.unique(fold)
            groups = group_stats(reward[final], gid[final], n_groups, used[final], wanted)
        else:
            groups = group_stats(reward, gid, n_groups, used, wanted)
        grouped["basis"] = reward
        grouped["flags"] = flags = group_flags(reward, gid, groups.size)
        if self.cfg.reward_components:
            components = [self.rows[f"component_{k}"] for k in range(len(self.cfg.reward_components))]
            known = replace(known, component_groups=tuple(
                group_stats(c, gid, n_groups, used, wanted).to(self.device) for c in components))
            # gdpo's groups are judged on its components: a group is all-equal when every component is
            weights = self.cfg.reward_weights or (1.0,) * len(components)
            grouped["basis"] = sum(w * X.float64(c) for w, c in zip(weights, components))
            per_component = [group_flags(c, gid, groups.size)["all_equal_group"] for c in components]
            flags["all_equal_group"] = np.stack(per_component).all(0)
        minimum = est.min_group(self.cfg.params())
        small = np.flatnonzero(groups.size < minimum)
        if est.groups and small.size:
            batch, uid = next(key for key, g in self.labels.groups.items() if g == int(small[0]))
            where = self.labels.batch_name(batch)
            setting = f" ({named(est.min_group_setting, minimum)})" if minimum > est.min_group_size else ""
            raise ComputeError(
                f"{self.cfg.estimator} requires at least {minimum} samples per group{setting}. Got "
                f"{int(groups.size[small[0]])} for group {uid}{' in batch ' + where if where else ''} "
                f"({small.size} such group(s))"
            )
        if self.plan.fold:
            self.rows.add(session_total=reward[grouped["fold"]], session_active=X.float32(used[grouped["fold"]] > 0))
        elif self.plan.steps:  # SkyRL gives the last step's scalar to every step, whatever its mask
            self.rows.add(session_total=reward[grouped["fold"]])
        if est.row_advantage:  # on the float64 rewards where they are kept (docs/conventions.md)
            params = replace(self.cfg.params(), group_size=group_size)
            totals = self.rows["exact_reward"] if "exact_reward" in self.rows else reward
            if "unscorable" in self.rows:  # NaN: the trainer leaves such rows out of its statistics
                totals = np.where(self.rows["unscorable"], np.nan, totals)
            self.rows.add(row_advantage=est.row_advantages()(totals, gid, batch_of_row, params))
        return replace(known, groups=groups.to(self.device)), grouped

    def _trajectory_ends(self) -> np.ndarray:
        """For every row, the dataset row of its trajectory's last step (SkyRL's step-wise trajectories,
        docs/conventions.md): within each batch, in row order, a trajectory is the rows up to and including one
        whose ``is_last_step`` is true. A batch that ends inside a trajectory, or a trajectory whose steps carry
        different uids, is an ``InputError`` naming the row (SkyRL asserts both). ``(B,)`` int64."""
        batch, last, column = self.rows["batch_id"], self.rows["last_step"], self.plan.steps
        order = np.argsort(batch, kind="stable")  # each batch's rows in dataset order, batch after batch
        ends_batch = np.ones_like(last)
        ends_batch[:-1] = batch[order][1:] != batch[order][:-1]
        open_end = np.flatnonzero(ends_batch & ~last[order])
        if open_end.size:
            path, row = self.source.locate(int(order[open_end[0]]))
            where = self.labels.batch_name(int(batch[order[open_end[0]]]))
            raise InputError(path, f"is false on the last row of {'batch ' + where if where else 'the dataset'}: "
                             "its steps end no trajectory (SkyRL asserts a batch ends with a last step)", row=row,
                             column=column)
        flags = X.int64(last[order])
        trajectory = np.cumsum(flags) - flags  # SkyRL's cumsum of the shifted flags
        final = np.empty_like(order)
        final[order] = order[last[order]][trajectory]
        group = self.rows["group_id"]
        other = np.flatnonzero(group != group[final])
        if other.size:
            path, row = self.source.locate(int(other[0]))
            _, end = self.source.locate(int(final[other[0]]))
            raise InputError(path, f"the row is a step of the trajectory that ends at row {end}, whose uid differs "
                             "(a trajectory's steps share their prompt's uid)", row=row, column=column)
        return final

    def _weigh(self) -> Weighing:
        """Each row's scale ``c_i`` under the loss aggregation mode (docs/weights.md), from the scan's token counts
        in dataset order; the write pass multiplies the advantages by it (``token_scale``)."""
        rows, cfg, labels = self.rows, self.cfg, self.labels

        def locate(row: int) -> str:
            path, local = self.source.locate(row)
            return f"{shown(path)}: row {local}"

        facts = RowFacts(step=rows["batch_id"], loss_tokens=rows["actor"], tokens=rows["used"],
                         width=rows["length"] - rows["padding"], prompt=rows["group_id"] if self.plan.grouped else None,
                         step_names=tuple(labels.batch_name(b) for b in range(len(labels.batches))), locate=locate)
        weighing = weigh(cfg.loss_mode, facts, LossSettings(cfg.mini_batch_size, cfg.micro_batch_size,
                                                            cfg.loss_scale_factor, cfg.epsilon_high))
        self.rows.add(token_scale=weighing.scale)
        return weighing

    def _check_binary(self, reward: np.ndarray) -> None:
        """An estimator of 0/1 rewards stops at the first row whose total is neither, naming its file and row."""
        bad = np.flatnonzero((reward != 0) & (reward != 1))
        if bad.size:
            path, row = self.source.locate(int(bad[0]))
            raise ComputeError(f"{shown(path)}: row {row}: total reward {float(reward[bad[0]]):.9g} is neither 0 nor 1; "
                               f"{self.cfg.estimator} reads binary rewards (shaping such as {named('kl_coef')} or "
                               f"{named('reward_scale')} changes the totals) ({bad.size} such row(s))")

    def _merge_group_statistics(self, results: list[ShardResult],
                                known: Established) -> tuple[Established, tuple[float, np.ndarray]]:
        """Whitening moments per row; the per-(group, position) sums added shard after shard in float64,
        rounded to float32 once. Also the largest rounding effect on the baseline (``Estimator.rounding``)
        and the groups where it reaches ``ILL_CONDITIONED_SHIFT``."""
        width = known.positions
        sums: dict[str, np.ndarray] = {}
        for result in results:
            self.rows.add(**result.rows)
            if result.position_sums is not None:
                slots, values = result.position_sums
                for name, v in values.items():
                    np.add.at(sums.setdefault(name, np.zeros(self.labels.group_count * width)), slots, v)
        ill = (0.0, np.zeros(0, dtype=np.int64))
        if self.est.accumulate:
            effect = self.est.rounding_effect()
            if effect is not None and sums:
                rounding = effect(sums)
                over = np.flatnonzero(rounding >= ILL_CONDITIONED_SHIFT)
                if over.size:
                    ill = (float(rounding[over].max()), np.unique(over // width))
            known = replace(known, position_sums=PositionSums(
                width, {k: X.on_device(X.float32(v), self.device) for k, v in sums.items() if not k.endswith("_abs")}))
        return known, ill


def whitening(rows: RowTable, labels: Labels, estimator: str,
              biased: bool = False) -> tuple[np.ndarray, np.ndarray, list[dict]]:
    """Per-batch mean and unbiased variance (``biased``: divided by the token count, as OpenRLHF) ``(n_batches,)``
    of the raw advantages over valid tokens, from the rows' moments (float64, returned as float32), and the
    report's entry for each batch. verl raises where a batch has fewer than 2 valid tokens; a variance beyond
    float32 would zero every advantage there."""
    n_batches = len(labels.batches)
    mean = np.zeros(n_batches, dtype=np.float64)
    var = np.zeros(n_batches, dtype=np.float64)
    batch_of_row, entries = rows["batch_id"], []
    for b in range(n_batches):
        sel = batch_of_row == b
        n, mu, m2 = kernels.combine_moments(rows["w_count"][sel], rows["w_sum"][sel], rows["w_m2"][sel])
        where = labels.batch_name(b)
        if n <= (0 if biased else 1):
            raise ComputeError(
                f"{estimator}: {'batch ' + where if where else 'the dataset'} has {int(n)} valid token(s) "
                + ("after masking; whitening divides by 0 there" if biased else
                   "after masking; whitening needs at least 2 (verl raises ValueError here)")
            )
        v = m2 / n if biased else m2 / (n - 1)
        with np.errstate(over="ignore"):
            overflow = not np.isfinite(np.float32(v))
        if overflow:
            raise ComputeError(
                f"{estimator}: the variance of the values to whiten in "
                f"{'batch ' + where if where else 'the dataset'} overflows float32 ({v:.3g}); verl "
                "would give every advantage 0 (check the scores and values for huge entries)"
            )
        mean[b], var[b] = mu, v
        entries.append({"batch": where, "tokens": int(n), "mean": float(np.float32(mu)), "var": float(np.float32(v))})
    return X.float32(mean), X.float32(var), entries


def exact_rewards(cfg: Config, schema: pa.Schema) -> bool:
    """Whether the row rewards are kept in float64 (``Chain.exact_rewards``): a convention whose trainer keeps
    float64 rewards, and a float64 ``score`` column that is the rows' score (no ``rm_scores``)."""
    names = schema.names
    return (cfg.conv.float64_rewards and "score" in names and "rm_scores" not in names
            and schema.field("score").type == pa.float64())


def check_correction_batches(rows: RowTable, labels: Labels) -> None:
    """verl's rollout correction refuses a batch with no valid token (docs/semantics.md §5.1)."""
    actor = rows["actor"]
    for b in range(len(labels.batches)):
        if float(actor[rows["batch_id"] == b].sum()) == 0:
            where = labels.batch_name(b)
            raise ComputeError(
                f"rollout correction: {'batch ' + where if where else 'the dataset'} has no token with "
                "response_mask 1 (verl: response_mask must contain at least one valid token (1).)"
            )


def run_in_memory(source: RowSource, cfg: Config, progress: Optional[Progress] = None,
                  pad_widths: Optional[Mapping[object, int]] = None) -> tuple[pa.Table, Report]:
    """All passes over an in-memory source, the output gathered as one table: ``(output, report)``."""
    pipeline = Pipeline(source, cfg, progress, pad_widths)
    parts: list[pa.Table] = []
    report = pipeline.run(parts.append)
    return (pa.concat_tables(parts) if parts else pipeline.plan.schema.empty_table()), report


def _final_outputs(session: np.ndarray, output_index: np.ndarray) -> np.ndarray:
    """For every row, the dataset row of its session's final output: the largest ``output_index``, the first
    such row on ties (verl 0.9.1's ``compute_advantage_for_multi_trajectories``); ``(B,)`` int64."""
    rows = np.arange(session.size)
    order = np.lexsort((rows, -output_index, session))
    first = np.ones(order.size, dtype=bool)
    first[1:] = session[order][1:] != session[order][:-1]
    final = np.empty(int(session.max()) + 1 if session.size else 0, dtype=np.int64)
    final[session[order][first]] = order[first]
    return final[session]
