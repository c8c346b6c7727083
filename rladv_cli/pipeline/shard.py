"""The per-shard half of every pass: the stages and the estimator run chunk by chunk over one shard (one input
file), with what the earlier passes established (``Established``, one frozen value per pass) and the shard's
per-row inputs. Picklable once ``detached``, so a Ray worker runs exactly what the local engine runs.

Passes, in order (docs/semantics.md §10 for the stages inside them):
  layout            row lengths and batch ids                                reads: nothing established
  kl                each row's KL for an adaptive controller stepped per batch  reads: pad widths
  scan              per-row totals, token counts, labels, diagnostics, rollout-correction statistics, and
                    whitening moments of estimators without group statistics      reads: the shaping
  group_statistics  whitening moments of group estimators; per-(group, position) sums   reads: + groups
  write             advantages and returns, written as they are computed     reads: everything
"""
from __future__ import annotations

import copy
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..config.settings import Config
from ..contract import validation
from ..contract.columns import (array_of, flat_values, list_offsets, list_sums, mask_before_rejection, scalar_values,
                                unscored)
from ..contract.labels import Labels
from ..estimators.inputs import Inputs
from ..estimators.registry import Estimator
from ..io.read import Chunk, RowSource, Shard
from ..report import replay
from ..report.diagnostics import RowTable, TokenSketches
from ..report.gradient import weight_rows
from ..stages.chain import Chain, Prepared, Shaping, Timer, prepare
from ..stages.shaping import kl_penalty
from ..tensors import kernels
from ..tensors import xp as X
from ..tensors.batch import Batch, as_array
from ..tensors.groups import GroupStats, PositionSums
from ..tensors.xp import Array
from .output import check_finite, output_table

Progress = Callable[[str, int, int], None]
PASSES = ("layout", "kl", "scan", "group_statistics", "write")
# Threads that compute the scan pass's chunks ahead of the one taken in (docs/performance.md, "One run, phase
# by phase"): beside the reading of the layout pass and the encoders of the write pass, it is the one pass
# that would leave a core idle.
SCAN_HELPERS = 2


@dataclass(frozen=True)
class Plan:
    """What the driver fixed from the settings and the dataset's schema before the first pass."""

    cfg: Config
    est: Estimator
    chain: Chain
    correct: bool  # rollout-correction statistics (whenever old and rollout log-probs are present, as verl)
    group_key: Optional[str]  # the column labelling rows' groups as they are read (``Convention.group_key``)
    grouped: bool  # rows have group ids (from ``group_key``, or blocks the driver cuts)
    fold: bool  # multi-output sessions folded to their final output (docs/semantics.md §8)
    steps: Optional[str]  # the flag column ending trajectories of step rows (``Convention.step_column``), if read
    scan_columns: tuple[str, ...]
    schema: pa.Schema  # the output's
    replay_columns: tuple[str, ...]  # the input's own columns compared with this run's (``replay``)

    @property
    def adaptive_kl(self) -> bool:
        return self.cfg.use_kl and self.cfg.kl_ctrl == "adaptive" and self.cfg.batch_column is not None

    def layout_columns(self) -> list[str]:
        """What the layout pass reads (and validates): the mask, the batch key and, for the ``kl`` pass that
        steps an adaptive KL controller per batch, the log-probs and the mask before rejection (``loss_mask``
        when present)."""
        # the output schema holds loss_mask either way: the scan columns say whether the input does
        kl = {"old_log_probs", "ref_log_prob", mask_before_rejection(self.scan_columns)} if self.adaptive_kl else set()
        wanted = {"response_mask", self.cfg.batch_column} | kl
        return [c for c in self.schema.names if c in wanted]


@dataclass(frozen=True)
class Established:
    """What the earlier passes established, for the next one: ``shaping`` (each batch's pad width from the layout
    pass, KL coefficient from the kl pass, IS normalisation from the scan pass), ``positions`` (the longest
    response: the stride of per-(group, position) sums), and after the scan pass each batch's row counts
    (``batch_rows``, ``batch_nonzero_rows``: rows with ``R ≠ 0``; ``batch_mean``, ``batch_std`` of ``R`` for an
    estimator that reads them) and the group statistics (``groups``, and
    ``component_groups`` of reward components); after the group statistics pass ``position_sums`` and the
    batches' whitening moments ``whiten_mean``, ``whiten_var`` ``(n_batches,)``. The per-batch arrays indexed by
    a chunk's batch ids are numpy; the group statistics, ``position_sums`` and the whitening moments are on the
    run's device (docs/arrays.md)."""

    shaping: Shaping
    positions: int
    batch_rows: Optional[Array] = None
    batch_nonzero_rows: Optional[Array] = None
    batch_mean: Optional[Array] = None
    batch_std: Optional[Array] = None
    groups: Optional[GroupStats] = None
    component_groups: Optional[tuple[GroupStats, ...]] = None
    position_sums: Optional[PositionSums] = None
    whiten_mean: Optional[Array] = None
    whiten_var: Optional[Array] = None


@dataclass
class ShardResult:
    """What one pass over one shard hands back: per-row columns ``(B_shard,)`` in row order (numpy, whatever the
    device), and partial statistics that the driver merges in shard order."""

    rows: dict[str, np.ndarray]
    seconds: dict[str, float] = field(default_factory=dict)
    labels: Optional[Labels] = None
    correction: dict[int, object] = field(default_factory=dict)
    position_sums: Optional[tuple[np.ndarray, dict[str, np.ndarray]]] = None
    sketches: Optional[TokenSketches] = None


# Runs one pass over ``(shard, per-row inputs)`` items with what was established; results in item order.
MapShards = Callable[[str, "ShardWork", list[tuple[Shard, dict[str, np.ndarray]]], Optional[Established]],
                     list[ShardResult]]


class ShardWork:
    """One run's passes over one shard at a time. ``given``: the shard's per-row inputs from earlier passes
    (``batch_id``, ``group_id``, ``reward_total``, ``outcome``, and ``session_total``, ``session_active``
    with folded sessions), each ``(B_shard,)`` numpy."""

    def __init__(self, plan: Plan, source: Optional[RowSource] = None, progress: Optional[Progress] = None):
        self.plan, self.source, self.progress = plan, source, progress
        self.num_rows = source.num_rows if source is not None else 0

    def detached(self) -> "ShardWork":
        """A copy without the local source and progress callback, to ship to other processes (which read
        each shard from its path)."""
        work = copy.copy(self)
        work.source, work.progress = None, None
        return work

    def reading(self, source) -> "ShardWork":
        """A detached copy that reads its shards through ``source`` (a worker's ``io.read.ShardSet``)."""
        work = copy.copy(self)
        work.source = source
        return work

    def run(self, stage: str, shard: Shard, given: dict[str, np.ndarray], known: Optional[Established],
            write: Optional[Callable[[pa.Table], None]] = None) -> ShardResult:
        """One pass (``PASSES``) over one shard; ``write`` receives the write pass's output tables."""
        timer = Timer()
        if stage == "layout":
            result = self._layout(shard, timer)
        elif stage == "kl":
            result = self._kl(shard, given, known.shaping, timer)
        elif stage == "scan":
            result = self._scan(shard, given, known.shaping, timer)
        elif stage == "group_statistics":
            result = self._group_statistics(shard, given, known, timer)
        else:
            result = self._write(shard, given, known, write, timer)
        result.seconds = dict(timer.seconds)
        return result

    # ----------------------------------------------------------------- reading
    def _chunks(self, shard: Shard, columns: Optional[list[str]], stage: str, timer: Timer) -> Iterator[Chunk]:
        """Chunks of one shard holding ``columns`` (all when None): from the source (which may hold them in
        memory, ``io.read.ReadOnce``, until the write pass, the last, takes them), or from the shard's file on
        a worker."""
        chunk_rows = self.plan.cfg.chunk_rows
        if self.source is not None:
            chunks = self.source.shard_chunks(shard, columns, chunk_rows, last=stage == "write")
        else:
            chunks = shard.chunks(columns, chunk_rows)
        while True:
            with timer("read"):
                chunk = next(chunks, None)
            if chunk is None:
                return
            yield chunk
            if self.progress:
                self.progress(stage, chunk.first_row + chunk.table.num_rows, self.num_rows)

    @staticmethod
    def _given(chunk: Chunk, shard: Shard, given: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The chunk's rows of the shard's per-row inputs."""
        start = chunk.first_row - shard.first_row
        return {name: values[start:start + chunk.table.num_rows] for name, values in given.items()}

    def _validated(self, stage: str) -> frozenset[str]:
        """The columns that earlier passes over these rows read, and so validated."""
        earlier = {"kl": self.plan.layout_columns(), "scan": self.plan.layout_columns()}
        return frozenset(earlier.get(stage, self.plan.layout_columns() + list(self.plan.scan_columns)))

    def _inputs(self, p: Prepared, at: dict[str, np.ndarray], known: Established) -> Inputs:
        """Exactly what the estimator declares in ``needs``, for the chunk's rows ``at``."""
        device, batch_ids = self.plan.chain.device, at["batch_id"]

        def on(a: Optional[np.ndarray]) -> Optional[Array]:
            return None if a is None else X.on_device(a, device)

        provide = {
            "reward_total": lambda: on(at["reward_total"]),
            "group_index": lambda: on(at["group_id"]),
            "groups": lambda: known.groups,
            "session_total": lambda: on(at.get("session_total")),
            "session_active": lambda: on(at.get("session_active")),
            "batch_rows": lambda: on(known.batch_rows[batch_ids]),
            "batch_nonzero_rows": lambda: on(known.batch_nonzero_rows[batch_ids]),
            "components": lambda: p.components,
            "component_groups": lambda: known.component_groups,
            "position_sums": lambda: known.position_sums,
            "batch_mean": lambda: on(known.batch_mean[batch_ids]),
            "batch_std": lambda: on(known.batch_std[batch_ids]),
            "row_advantage": lambda: on(at["row_advantage"]),
        }
        return Inputs(**{name: provide[name]() for name in self.plan.est.needs})

    # ----------------------------------------------------------------- passes
    def _layout(self, shard: Shard, timer: Timer) -> ShardResult:
        """Row lengths and batch ids (numbered within the shard; the driver renumbers them)."""
        labels, rows = Labels(self.plan.cfg.batch_column), RowTable()
        for chunk in self._chunks(shard, self.plan.layout_columns(), "layout", timer):
            with timer("validate"):
                if not chunk.checked:
                    validation.check_chunk(chunk.table, chunk.path, chunk.start)
            offsets = list_offsets(array_of(chunk.table["response_mask"]))
            rows.add(batch_id=labels.batch_ids(chunk.table, chunk.path, chunk.start),
                     length=kernels.row_lengths(offsets))
        return ShardResult(rows.columns(), labels=labels)

    def _kl(self, shard: Shard, given: dict[str, np.ndarray], shaping: Shaping, timer: Timer) -> ShardResult:
        """Each row's KL for an adaptive controller stepped per batch (``kl_row``), before the scan pass
        needs the coefficients: the layout pass has fixed every batch's pad width, which rounds the row sums."""
        rows = RowTable()
        for chunk in self._chunks(shard, self.plan.layout_columns(), "kl", timer):
            table, offsets = chunk.table, list_offsets(array_of(chunk.table["response_mask"]))
            m0 = as_array(flat_values(table, mask_before_rejection(table.column_names)))
            kld = kl_penalty(as_array(flat_values(table, "old_log_probs")), as_array(flat_values(table, "ref_log_prob")),
                             self.plan.cfg.kl_penalty) * m0
            width = shaping.pad_width[self._given(chunk, shard, given)["batch_id"]]
            rows.add(kl_row=kl_row_mean(kld, m0, offsets, width))
        return ShardResult(rows.columns())

    def _scan(self, shard: Shard, given: dict[str, np.ndarray], shaping: Shaping, timer: Timer) -> ShardResult:
        """Per-row totals, labels, diagnostics and rollout-correction statistics; group and session ids are
        numbered within the shard (the driver renumbers them), so no stage here reads them. On the CPU, where the
        loops release the GIL, the chunks' stages and totals (``_scanned``) are computed ``SCAN_HELPERS`` chunks
        ahead of the one taken in here, in row order."""
        plan = self.plan
        labels, rows, correction = Labels(plan.cfg.batch_column), RowTable(), {}
        chunks = ((chunk, self._given(chunk, shard, given))
                  for chunk in self._chunks(shard, list(plan.scan_columns), "scan", timer))
        helpers = SCAN_HELPERS if plan.chain.device == "cpu" else 0
        for (chunk, at), scanned in _ahead(chunks, partial(self._scanned, shaping=shaping), helpers):
            if plan.group_key:
                group_ids = labels.group_ids(chunk.table, at["batch_id"], chunk.path, chunk.start,
                                             plan.group_key)
                rows.add(group_id=group_ids)
                if plan.fold:
                    validation.check_numbers(chunk.table, ["output_index"], chunk.path, chunk.start)
                    rows.add(
                        session=labels.session_ids(chunk.table, group_ids, chunk.path, chunk.start),
                        output_index=scalar_values(chunk.table, "output_index", np.float64),
                    )
            p, cols, chunk_timer = scanned()  # after the labels: their errors come first, as without helpers
            for stage, seconds in chunk_timer.seconds.items():
                timer.seconds[stage] += seconds
            rows.add(**cols)
            order = plan.cfg.conv.order_column
            if order in chunk.table.column_names:
                validation.check_numbers(chunk.table, [order], chunk.path, chunk.start)
                rows.add(order_key=scalar_values(chunk.table, order, np.float64))
            if plan.steps:
                rows.add(last_step=scalar_values(chunk.table, plan.steps, np.bool_))
            if plan.cfg.conv.unscorable:
                rows.add(unscorable=unscored(chunk.table))
            if plan.cfg.loss_mode is not None and "truncated" in chunk.table.column_names:
                rows.add(truncated=scalar_values(chunk.table, "truncated", np.bool_))
            if "tool_rewards" in chunk.table.column_names:
                sums, calls = list_sums(chunk.table, "tool_rewards")
                rows.add(tool_reward_sum=sums, tool_calls=calls)
            if plan.correct:
                with timer("rejection"):
                    _update_correction(correction, plan.chain, p.batch, at["batch_id"])
        return ShardResult(rows.columns(), labels=labels, correction=correction)

    def _scanned(self, chunk: Chunk, at: dict[str, np.ndarray], shaping: Shaping) -> tuple[Prepared, dict, Timer]:
        """A chunk's stages, per-row totals (``scan_rows``) and, for an estimator whitened over the batch, the
        moments of its raw advantages; with the seconds they took."""
        plan, timer = self.plan, Timer()
        p = prepare(plan.chain, chunk, at["batch_id"], shaping, timer, validated=self._validated("scan"))
        cols = scan_rows(p, plan.cfg, shaping.beta is None)
        if plan.est.whiten and not plan.est.groups:
            with timer("estimator"):
                raw, _ = plan.est.fn(p.batch, Inputs(), plan.cfg.params())
            cols.update(_moments(raw, p.batch))
        return p, cols, timer

    def _group_statistics(self, shard: Shard, given: dict[str, np.ndarray], known: Established,
                          timer: Timer) -> ShardResult:
        """Statistics that need the group statistics first: whitening moments of group estimators, and the
        per-(group, position) sums an estimator accumulates: float64 sums in row order, handed back for the
        (group, position) slots this shard touched."""
        plan, params = self.plan, self.plan.cfg.params()
        accumulate = plan.est.accumulator()
        width, groups = known.positions, X.numel(known.groups.size)
        rows, sums = RowTable(), {}
        for chunk in self._chunks(shard, list(plan.scan_columns), "group statistics", timer):
            at = self._given(chunk, shard, given)
            p = prepare(plan.chain, chunk, at["batch_id"], known.shaping, timer, validated=self._validated(""),
                        with_weights=True)
            inputs = self._inputs(p, at, known)
            with timer("estimator"):
                if accumulate is not None:
                    for name, ((group, position), values) in accumulate(p.batch, inputs, params).items():
                        buf = sums.setdefault(name, np.zeros(groups * width, dtype=np.float64))
                        np.add.at(buf, X.to_numpy(group * width + position), X.to_numpy(X.float64(values)))
                if plan.est.whiten:
                    raw, _ = plan.est.fn(p.batch, inputs, params)
                    rows.add(**_moments(raw, p.batch))
        touched = None
        if sums:  # an untouched or zero slot adds nothing to the driver's sums
            slots = np.flatnonzero(np.stack([buf != 0 for buf in sums.values()]).any(0))
            touched = (slots, {name: buf[slots] for name, buf in sums.items()})
        return ShardResult(rows.columns(), position_sums=touched)

    def _write(self, shard: Shard, given: dict[str, np.ndarray], known: Established,
               write: Callable[[pa.Table], None], timer: Timer) -> ShardResult:
        """Advantages and returns, written chunk by chunk; per-row summaries and value sketches for the report."""
        plan, params, est = self.plan, self.plan.cfg.params(), self.plan.est
        checks = est.checks()
        rows = RowTable()
        sketches = TokenSketches(with_values="values" in est.columns)
        for chunk in self._chunks(shard, None, "write", timer):
            at = self._given(chunk, shard, given)
            p = prepare(plan.chain, chunk, at["batch_id"], known.shaping, timer, validated=self._validated("write"),
                        with_weights=True)
            b, inputs = p.batch, self._inputs(p, at, known)
            xp = X.namespace(b.response_mask)
            with timer("estimator"):
                advantages, returns = est.fn(b, inputs, params)
                if est.whiten:
                    mean, var = known.whiten_mean, known.whiten_var
                    if X.numel(mean) > 1:  # several batches: each token takes its batch's moments
                        tok_batch = b.per_token(X.on_device(at["batch_id"], plan.chain.device))
                        mean, var = mean[tok_batch], var[tok_batch]
                    if est.biased_whitening:  # OpenRLHF's; --no-norm-adv-by-std is its no_std_norm
                        advantages = kernels.clamped_whiten(advantages, mean, var, params.norm_adv_by_std)
                    else:
                        advantages = kernels.masked_whiten(advantages, mean, var)
                    if est.returns_are_advantages:
                        returns = advantages
                low, high = plan.cfg.adv_bounds
                if low is not None or high is not None:  # the advantages only; returns keep their values
                    advantages = xp.clip(advantages, min=low, max=high)
                # selection, not multiplication: verl's NaN (opo's 0/0) must not survive at mask-0 positions
                valid = b.response_mask > 0
                # returns that are the advantages stay one tensor: summarised and sketched once
                same = returns is advantages
                advantages = xp.where(valid, advantages, xp.zeros_like(advantages))
                returns = advantages if same else xp.where(valid, returns, xp.zeros_like(returns))
                flags = {code: fn(b, inputs, params) for code, fn in checks.items()}
                weights = None
                if "token_scale" in at:  # docs/weights.md: w = A · ρ · m · c_i (A is 0 off the mask)
                    weights = advantages * b.per_token(X.on_device(at["token_scale"], plan.chain.device))
                    if b.rollout_is_weights is not None:
                        weights = weights * b.rollout_is_weights
            # handed to the encoders before the chunk's statistics are taken, so they start on the first chunk
            # early and finish the last one while its statistics are taken; a non-finite value found then
            # still stops the run before anything is committed
            with timer("write"):
                write(output_table(chunk.table, b, advantages, returns, b.rollout_is_weights, plan.schema, weights))
            with timer("diagnostics"):
                adv_rows = kernels.row_summary(advantages, valid, b.row_offsets)
                ret_rows = adv_rows if same else kernels.row_summary(returns, valid, b.row_offsets)
                check_finite(chunk, b, plan.cfg.estimator, advantages, returns, valid, adv_rows["sum"], ret_rows["sum"])
                rows.add(**sketches.add(b, advantages, returns, valid, at["outcome"], adv_rows["count"]))
                if plan.replay_columns:
                    computed = {"token_level_rewards": b.token_level_rewards, "rollout_is_weights": b.rollout_is_weights,
                                "advantages": advantages, "returns": returns}
                    rows.add(**replay.compare_chunk(chunk.table, list(plan.replay_columns), computed, valid,
                                                    b.row_offsets))
                if weights is not None:
                    rows.add(**weight_rows(weights, b))
            rows.add(**{f"adv_{k}": v for k, v in adv_rows.items()}, **{f"ret_{k}": v for k, v in ret_rows.items()},
                     **flags)
        return ShardResult(rows.columns(), sketches=sketches.done())


def _ahead(items: Iterator[tuple], work: Callable, helpers: int) -> Iterator[tuple[tuple, Callable[[], object]]]:
    """``(item, result)`` for each item in order, where ``result()`` gives ``work(*item)`` or raises what it raised.
    With ``helpers`` threads, ``work`` runs for up to that many items ahead while the caller takes in the earlier
    ones; with none, ``result()`` runs it then."""
    if not helpers:
        for item in items:
            yield item, partial(work, *item)
        return
    pool = ThreadPoolExecutor(helpers, thread_name_prefix="rladv-scan")
    try:
        pending: deque = deque()
        for item in items:
            pending.append((item, pool.submit(work, *item)))
            if len(pending) > helpers:
                done, job = pending.popleft()
                yield done, job.result
        while pending:
            done, job = pending.popleft()
            yield done, job.result
    finally:  # the caller stopped (an error): what has not begun is not needed
        pool.shutdown(cancel_futures=True)


def scan_rows(p: Prepared, cfg: Config, kl_measured_here: bool) -> dict[str, Array]:
    """Per-row totals, token counts and row-level warning flags of one prepared chunk; ``kl_row`` too unless the
    kl pass measured it (``kl_measured_here`` False)."""
    b = p.batch
    off, xp = b.row_offsets, X.namespace(b.response_mask)
    m0, m, s = b.original_mask, b.response_mask, b.token_level_scores
    score_total = b.row_total(s)
    # no KL shaping: the same tensor, so the same total
    reward_total = score_total if b.token_level_rewards is s else b.row_total(b.token_level_rewards)
    actor = kernels.segment_sum(m0, off)
    cols = dict(
        score_total=score_total, reward_total=reward_total, actor=actor, used=kernels.segment_sum(m, off),
        padding=kernels.segment_sum(b.padding, off) if b.padding is not None else xp.zeros_like(actor),
        score_on_masked_position=kernels.segment_sum(X.float32((s != 0) & (m0 == 0)), off) > 0,
    )
    if p.components is not None:
        cols.update({f"component_{k}": c for k, c in enumerate(p.components)})
    if cfg.overlong_buffer_len is not None:
        cols["overlong_penalty"] = p.overlong_penalty
    if p.exact_reward is not None:
        cols["exact_reward"] = p.exact_reward
    if p.kld is not None:
        if kl_measured_here:
            cols["kl_row"] = kernels.segment_sum(p.kld, off) / (actor + 1e-8)
        # the row's whole KL term, not single tokens: k1/k2's per-token values are signed by nature
        cols["kl_raises_reward"] = kernels.segment_sum(p.beta * p.kld, off) < 0
        sign_s = xp.sign(score_total)
        cols["kl_flips_sign"] = (sign_s != 0) & (xp.sign(reward_total) != sign_s)
    return cols


def _update_correction(correction: dict, chain: Chain, b: Batch, batch_ids: np.ndarray) -> None:
    """Feed each batch's rollout-correction statistics (``correction``: batch id -> accumulator) with its rows."""
    from ..stages.rejection import RolloutCorrectionStats

    for bid in np.unique(batch_ids).tolist():
        stats = correction.setdefault(bid, RolloutCorrectionStats(chain.rules, chain.is_cfg))
        in_batch = batch_ids == bid
        if bool(in_batch.all()):
            stats.update(b.old_log_probs, b.rollout_log_probs, b.original_mask, b.row_offsets)
        else:
            tokens, offsets = kernels.select_rows(X.like(in_batch, b.row_offsets), b.row_offsets)
            stats.update(b.old_log_probs[tokens], b.rollout_log_probs[tokens], b.original_mask[tokens], offsets)


def _moments(raw: Array, b: Batch) -> dict[str, Array]:
    """Per-row whitening moments of raw advantages over the estimator's mask: ``w_count, w_sum, w_m2 (B,)``."""
    count, total, m2 = kernels.row_moments(raw, b.response_mask, b.row_offsets)
    return {"w_count": count, "w_sum": total, "w_m2": m2}


def kl_row_mean(kld: Array, mask: Array, row_offsets: Array, width: Array) -> Array:
    """verl's per-row KL ``masked_mean(kld, mask, axis=-1)``: the float32 row sum padded to ``width`` (as
    verl sums a ``[B, T]`` row) over ``Σ mask + 1e-8``; ``(B,)`` float32. The adaptive controller steps on
    their float32 mean, so a float64 mean would give another coefficient."""
    return kernels.padded_row_sum(kld, row_offsets, width) / (X.float32(kernels.segment_sum(mask, row_offsets)) + 1e-8)


def map_here(stage: str, work: ShardWork, items: list[tuple[Shard, dict[str, np.ndarray]]],
             known: Optional[Established], write: Optional[Callable[[pa.Table], None]]) -> list[ShardResult]:
    """The local engine's ``MapShards``: every shard in this process, in order; the write pass into ``write``."""
    return [work.run(stage, shard, given, known, write) for shard, given in items]
