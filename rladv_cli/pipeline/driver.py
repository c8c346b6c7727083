"""The ordered stages of ``rladv compute`` and the passes that stream them, nothing else.

Per chunk, in verl's order (SEMANTICS §10): validate -> score assembly -> KL shaping on the original mask
-> rollout rejection (rewrites ``response_mask``) -> estimator -> whitening -> write.

Passes over the data (each reads only the columns it needs; a one-chunk dataset is read from disk once):
  layout  row lengths and batch ids (verl pads each batch to its longest response, which fixes how row totals
          round);
  kl      only with an adaptive KL controller and ``--batch-key``: each row's KL, summed padded to its batch's
          width as verl sums it, so each batch's coefficient is verl's and known before its rewards are shaped;
  scan    per-row totals ``R_i``, token counts, group labels, diagnostics, rollout-correction statistics,
          and whitening moments of estimators that need no group statistics;
  group statistics  only for whitened estimators that need group statistics (``reinforce_plus_plus_baseline``)
          and estimators with per-position group baselines (the optimal-token baselines);
  write   advantages and returns, written as they are computed.
Batch-wide statistics (group means and stds, whitening moments) come from per-row values of the earlier
passes, reduced over whole per-row arrays, so results do not depend on ``--chunk-rows``.

Each pass is split at the input files (shards): ``ShardWork`` runs the stages over one shard and hands back
per-row arrays and mergeable partial statistics; ``Pipeline`` (the driver) maps it over the shards, here one
after the other or on Ray workers (``ray_engine``), and reduces the results in shard order, so both engines
compute the same numbers. Groups and batches may span shards.
"""
from __future__ import annotations

import copy
import math
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterator, Mapping, Optional

import numpy as np
import pyarrow as pa
import torch
from torch import Tensor

from .. import __version__
from ..config.settings import Config
from ..contract import validation
from ..contract.columns import (array_of, arrow_of, flat_values, list_offsets, list_sums, mask_before_rejection,
                                scalar_values)
from ..contract.labels import Labels
from ..errors import ComputeError, ConfigError, InputError
from ..estimators import ESTIMATORS
from ..io.read import Chunk, Shard, computed_columns, output_schema
from ..report import replay
from ..report.diagnostics import (RowTable, TokenSketches, WarningBuilder, distributions, first_rows, group_flags,
                                  row_outcomes, token_stats)
from ..report.model import KL, FileInfo, Groups, Inputs, KLBatch, Report, Scores, Timing, Tokens, row_stats
from ..stages.shaping import KLController, apply_kl, kl_penalty, overlong_penalty
from ..tensors import kernels
from ..tensors.batch import Batch, PositionSums, as_tensor, from_arrow

Progress = Callable[[str, int, int], None]
# whitening warns when one float32 ulp of the batch mean moves advantages by this much (10 ulps: the 1e-5 tolerance)
ILL_CONDITIONED_SHIFT = 1e-6


def _ulp_shift(whitening: dict) -> float:
    """What one float32 step of a batch's whitening mean, at its values' magnitude ``sqrt(μ² + M2/N)``, moves
    every advantage by once divided by ``sqrt(var + 1e-8)``: verl sums the mean in float32 in an order rladv
    cannot follow, so its advantages sit a few such steps from rladv's."""
    n, mean, var = whitening["tokens"], whitening["mean"], whitening["var"]
    magnitude = math.sqrt(mean * mean + var * (n - 1) / n)
    return float(np.spacing(np.float32(magnitude))) / math.sqrt(var + 1e-8)


def resolve_device(name: str) -> torch.device:
    """``auto`` = cuda when available, else cpu; asking for cuda without one is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: torch sees no CUDA device here; use --device cpu or auto")
    return torch.device(name)


@dataclass
class Prepared:
    """A chunk after the stages that precede the estimator."""

    batch: Batch
    kld: Optional[Tensor]
    beta: Tensor | float
    is_weights: Optional[Tensor] = None


@dataclass
class ShardResult:
    """What one pass over one shard (one input file) hands back: per-row columns ``(B_shard,)`` in row
    order, and partial statistics that the driver merges in shard order (``Pipeline._merge_*``)."""

    rows: dict[str, Tensor]
    seconds: dict[str, float] = field(default_factory=dict)
    labels: Optional[Labels] = None
    correction: dict[int, object] = field(default_factory=dict)
    position_sums: Optional[tuple[Tensor, dict[str, Tensor]]] = None
    sketches: Optional[TokenSketches] = None


# Runs one pass (``ShardWork.run``'s stage) over ``(shard, per-row inputs)`` items; results in item order.
MapShards = Callable[[str, "ShardWork", list[tuple[Shard, dict[str, Tensor]]]], list[ShardResult]]


class ShardWork:
    """The per-shard half of every pass: the stages run chunk by chunk over one shard, with the batch-wide
    statistics of the earlier passes (set by the driver, ``Pipeline``) and the shard's per-row inputs
    (``given``: ``batch_id``, ``group_id``, ``reward_total``, ``session_total``, ``session_active``, each
    ``(B_shard,)``). Picklable once ``detached``, so a Ray worker runs exactly what the local engine runs."""

    def __init__(self, source, cfg: Config, progress: Optional[Progress], rules, is_cfg, *, correct: bool,
                 has_uid: bool, fold: bool, scan_columns: list[str], schema: pa.Schema, replay_columns: list[str]):
        self.source, self.cfg, self.progress = source, cfg, progress
        self.est = ESTIMATORS[cfg.estimator]
        self.device = resolve_device(cfg.device)
        self.rules, self.is_cfg = rules, is_cfg
        self.correct, self.has_uid, self.fold = correct, has_uid, fold
        self.scan_columns, self.schema = scan_columns, schema
        self.replay_columns = replay_columns  # the input's own columns compared with this run's (``replay``)
        self.num_rows = source.num_rows
        self.seconds: dict[str, float] = defaultdict(float)
        self.validated: frozenset[str] = frozenset()  # set per pass by ``run``
        # batch-wide statistics, filled in by the driver between passes
        self.pad_width: Optional[Tensor] = None
        self.positions = 0  # the longest response: the stride of per-(group, position) sums
        self.beta_by_batch: Optional[Tensor] = None
        self.is_norm_factor: Optional[Tensor] = None
        self.batch_rows: Optional[Tensor] = None
        self.batch_nonzero_rows: Optional[Tensor] = None
        self.groups = None
        self.component_groups: Optional[list] = None
        self.position_sums: Optional[PositionSums] = None
        self.whiten_mean: Optional[Tensor] = None
        self.whiten_var: Optional[Tensor] = None

    def detached(self) -> "ShardWork":
        """A copy without the local source and progress callback, to ship to other processes (which read
        each shard from its path)."""
        work = copy.copy(self)
        work.source, work.progress = None, None
        work.seconds = defaultdict(float)
        return work

    def run(self, stage: str, shard: Shard, given: dict[str, Tensor],
            write: Optional[Callable[[pa.Table], None]] = None) -> ShardResult:
        """One pass (``layout``, ``kl``, ``scan``, ``group_statistics`` or ``write``) over one shard; ``write``
        receives the write pass's output tables."""
        self.seconds = defaultdict(float)
        passes = {"layout": self._layout, "kl": self._kl, "scan": self._scan,
                  "group_statistics": self._group_statistics, "write": partial(self._write, write=write)}
        # the columns earlier passes over these rows read, and so validated
        earlier = {"layout": (), "kl": self._layout_columns(), "scan": self._layout_columns()}
        self.validated = frozenset(earlier.get(stage, self._layout_columns() + self.scan_columns))
        result = passes[stage](shard, given)
        result.seconds = dict(self.seconds)
        return result

    # ----------------------------------------------------------------- reading
    @contextmanager
    def _timed(self, stage: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - t0

    def _chunks(self, shard: Shard, columns: Optional[list[str]], stage: str) -> Iterator[Chunk]:
        """Chunks of one shard holding ``columns`` (all when None): from the source (which may hold them in
        memory, ``io.ReadOnce``, until the write pass, the last, takes them), or from the shard's file on a
        worker."""
        if self.source is not None:
            chunks = self.source.shard_chunks(shard, columns, self.cfg.chunk_rows, last=stage == "write")
        else:
            chunks = shard.chunks(columns, self.cfg.chunk_rows)
        while True:
            with self._timed("read"):
                chunk = next(chunks, None)
            if chunk is None:
                return
            yield chunk
            if self.progress:
                self.progress(stage, chunk.first_row + chunk.table.num_rows, self.num_rows)

    @staticmethod
    def _given(chunk: Chunk, shard: Shard, given: dict[str, Tensor]) -> dict[str, Tensor]:
        """The chunk's rows of the shard's per-row inputs."""
        start = chunk.first_row - shard.first_row
        return {name: values[start:start + chunk.table.num_rows] for name, values in given.items()}

    # ----------------------------------------------------------------- stages
    def _prepare(self, chunk: Chunk, given: dict[str, Tensor], with_weights: bool = False) -> Prepared:
        """validate -> tensors -> KL shaping (original mask) -> rollout rejection (rewrites the mask)."""
        batch_ids = given["batch_id"]
        with self._timed("validate"):
            if not chunk.checked:
                validation.check_chunk(chunk.table, chunk.path, chunk.start, self.validated)
        with self._timed("convert"):
            batch = from_arrow(chunk.table, chunk.first_row, self.device)
            group_ids = given.get("group_id")
            batch.group_index = None if group_ids is None else group_ids.to(self.device)
            batch.pad_width = self.pad_width[batch_ids].to(self.device)
            if self.cfg.reward_components:
                validation.check_numbers(chunk.table, self.cfg.reward_components, chunk.path, chunk.start)
                batch.components = torch.stack([
                    as_tensor(scalar_values(chunk.table, c), self.device) for c in self.cfg.reward_components
                ])
        if self.cfg.tool_reward_coef is not None:
            with self._timed("shaping"):
                sums, _ = list_sums(chunk.table, "tool_rewards")
                batch.add_to_score(as_tensor((self.cfg.tool_reward_coef * sums).astype(np.float32), self.device))
        if self.cfg.overlong_buffer_len is not None:
            with self._timed("shaping"):
                penalty = overlong_penalty(batch.valid_length, self.cfg.overlong_buffer_len,
                                           self.cfg.overlong_penalty_factor, self.cfg.max_resp_len)
                batch.add_to_score(penalty)
                batch.overlong_penalty = penalty
        kld, beta = None, 0.0
        with self._timed("shaping"):
            if self.cfg.use_kl:
                beta = self._beta(batch, batch_ids)
                shaped = apply_kl(batch.token_level_scores, batch.old_log_probs, batch.ref_log_prob,
                                  batch.original_mask, beta, self.cfg.kl_penalty)
                batch.token_level_rewards, kld = shaped.token_level_rewards, shaped.kld
        weights = None
        with self._timed("rejection"):
            if self.rules:
                from ..stages.rejection import rejection_keep

                keep, _ = rejection_keep(self.rules, batch.old_log_probs, batch.rollout_log_probs,
                                         batch.original_mask, batch.row_offsets)
                batch.response_mask = (batch.original_mask * keep).to(batch.original_mask.dtype)
            if with_weights and self.is_cfg is not None:
                weights = self._is_weights(batch, batch_ids)
                batch.rollout_is_weights = weights
        if "reward_total" in given:  # the scan pass's totals: the same bits, not summed again
            batch.known_reward_total = given["reward_total"].to(self.device)
        if self.component_groups is not None:
            batch.component_groups = self.component_groups
        if "session_total" in given:
            batch.session_total = given["session_total"].to(self.device)
            batch.session_active = given["session_active"].to(self.device)
        if self.batch_rows is not None:
            batch.batch_rows = self.batch_rows[batch_ids].to(self.device)
            batch.batch_nonzero_rows = self.batch_nonzero_rows[batch_ids].to(self.device)
        return Prepared(batch, kld, beta, weights)

    def _beta(self, batch: Batch, batch_ids: Tensor) -> Tensor | float:
        if self.beta_by_batch is None:
            return self.cfg.kl_coef
        return batch.per_token(self.beta_by_batch[batch_ids].to(torch.float32).to(self.device))

    def _is_weights(self, batch: Batch, batch_ids: Tensor) -> Tensor:
        from ..stages.rejection import importance_weights

        factor = None
        if self.is_norm_factor is not None:  # each row divided by its own batch's normalisation factor
            factor = batch.per_token(self.is_norm_factor[batch_ids].to(self.device))
        return importance_weights(self.is_cfg, batch.old_log_probs, batch.rollout_log_probs, batch.original_mask,
                                  batch.row_offsets, norm_factor=factor)

    # ----------------------------------------------------------------- passes, per shard
    def adaptive_kl(self) -> bool:
        return self.cfg.use_kl and self.cfg.kl_ctrl == "adaptive" and self.cfg.batch_key is not None

    def _layout_columns(self) -> list[str]:
        """What the layout pass reads (and validates): the mask, the batch key and, for the ``kl`` pass that
        steps an adaptive KL controller per batch, the log-probs and the mask before rejection (``loss_mask``
        when present)."""
        # the output schema holds loss_mask either way: the scan columns say whether the input does
        kl = {"old_log_probs", "ref_log_prob", mask_before_rejection(self.scan_columns)} if self.adaptive_kl() else set()
        wanted = {"response_mask", self.cfg.batch_key} | kl
        return [c for c in self.schema.names if c in wanted]

    def _layout(self, shard: Shard, given: dict[str, Tensor]) -> ShardResult:
        """Row lengths and batch ids (numbered within the shard; the driver renumbers them)."""
        labels, rows = Labels(self.cfg.batch_key), RowTable()
        for chunk in self._chunks(shard, self._layout_columns(), "layout"):
            with self._timed("validate"):
                if not chunk.checked:
                    validation.check_chunk(chunk.table, chunk.path, chunk.start)
            offsets = as_tensor(list_offsets(array_of(chunk.table["response_mask"])))
            rows.add(batch_id=torch.from_numpy(labels.batch_ids(chunk.table, chunk.path, chunk.start)),
                     length=kernels.row_lengths(offsets))
        return ShardResult(rows.columns(), labels=labels)

    def _kl(self, shard: Shard, given: dict[str, Tensor]) -> ShardResult:
        """Each row's KL for an adaptive controller stepped per batch (``kl_row``), before the scan pass
        needs the coefficients: the layout pass has fixed every batch's pad width, which rounds the row sums."""
        rows = RowTable()
        for chunk in self._chunks(shard, self._layout_columns(), "kl"):
            table, offsets = chunk.table, as_tensor(list_offsets(array_of(chunk.table["response_mask"])))
            m0 = as_tensor(flat_values(table, mask_before_rejection(table.column_names)))
            kld = kl_penalty(as_tensor(flat_values(table, "old_log_probs")), as_tensor(flat_values(table, "ref_log_prob")),
                             self.cfg.kl_penalty) * m0
            width = self.pad_width[self._given(chunk, shard, given)["batch_id"]]
            rows.add(kl_row=kl_row_mean(kld, m0, offsets, width))
        return ShardResult(rows.columns())

    def _scan(self, shard: Shard, given: dict[str, Tensor]) -> ShardResult:
        """Per-row totals, labels, diagnostics and rollout-correction statistics; group and session ids are
        numbered within the shard (the driver renumbers them), so no stage here reads them."""
        need_moments = self.est.whiten and not self.est.groups
        labels, rows, correction = Labels(self.cfg.batch_key), RowTable(), {}
        for chunk in self._chunks(shard, self.scan_columns, "scan"):
            at = self._given(chunk, shard, given)
            if self.has_uid:
                group_ids = labels.group_ids(chunk.table, at["batch_id"].numpy(), chunk.path, chunk.start)
                rows.add(group_id=torch.from_numpy(group_ids))
                if self.fold:
                    validation.check_numbers(chunk.table, ["output_index"], chunk.path, chunk.start)
                    rows.add(
                        session=torch.from_numpy(labels.session_ids(chunk.table, group_ids, chunk.path, chunk.start)),
                        output_index=as_tensor(scalar_values(chunk.table, "output_index", np.float64)),
                    )
            p = self._prepare(chunk, at)
            rows.add(**self._scan_rows(p))
            if "tool_rewards" in chunk.table.column_names:
                sums, calls = list_sums(chunk.table, "tool_rewards")
                rows.add(tool_reward_sum=torch.from_numpy(sums), tool_calls=torch.from_numpy(calls))
            if self.correct:
                self._update_correction(correction, p.batch, at["batch_id"])
            if need_moments:
                with self._timed("estimator"):
                    raw, _ = self.est.fn(p.batch, self.cfg)
                rows.add(**_moments(raw, p.batch))
        return ShardResult(rows.columns(), labels=labels, correction=correction)

    def _scan_rows(self, p: Prepared) -> dict[str, Tensor]:
        """Per-row totals, token counts and row-level warning flags of one prepared chunk."""
        b = p.batch
        off = b.row_offsets
        m0, m, s = b.original_mask, b.response_mask, b.token_level_scores
        score_total = b.row_total(s)
        if b.token_level_rewards is s:  # no KL shaping: the same tensor, so the same total
            b.known_reward_total = score_total
        reward_total = b.reward_total()
        actor = kernels.segment_sum(m0, off)
        cols = dict(
            score_total=score_total, reward_total=reward_total, actor=actor, used=kernels.segment_sum(m, off),
            padding=kernels.segment_sum(b.padding, off) if b.padding is not None else torch.zeros_like(actor),
            score_on_masked_position=kernels.segment_sum(((s != 0) & (m0 == 0)).float(), off) > 0,
        )
        if b.components is not None:
            cols.update({f"component_{k}": c for k, c in enumerate(b.components)})
        if self.cfg.overlong_buffer_len is not None:
            cols["overlong_penalty"] = b.overlong_penalty
        if p.kld is not None:
            if self.beta_by_batch is None:  # else the kl pass measured it
                cols["kl_row"] = kernels.segment_sum(p.kld, off) / (actor + 1e-8)
            cols["kl_raises_reward"] = kernels.segment_sum(((p.beta * p.kld) < 0).float(), off) > 0
            sign_s = torch.sign(score_total)
            cols["kl_flips_sign"] = (sign_s != 0) & (torch.sign(reward_total) != sign_s)
        return cols

    def _update_correction(self, correction: dict, b: Batch, batch_ids: Tensor) -> None:
        from ..stages.rejection import RolloutCorrectionStats

        with self._timed("rejection"):
            for bid in torch.unique(batch_ids).tolist():
                stats = correction.setdefault(bid, RolloutCorrectionStats(self.rules, self.is_cfg))
                sel = (batch_ids == bid).to(b.row_offsets.device)
                if bool(sel.all()):
                    stats.update(b.old_log_probs, b.rollout_log_probs, b.original_mask, b.row_offsets)
                else:
                    tokens, offsets = kernels.select_rows(sel, b.row_offsets)
                    stats.update(b.old_log_probs[tokens], b.rollout_log_probs[tokens], b.original_mask[tokens], offsets)

    def _group_statistics(self, shard: Shard, given: dict[str, Tensor]) -> ShardResult:
        """Statistics that need the group statistics first: whitening moments of group estimators, and the
        per-(group, position) sums an estimator accumulates: float64 sums in row order, handed back for the
        (group, position) slots this shard touched."""
        accumulate = self.est.accumulator()
        width = self.positions
        rows, sums = RowTable(), {}
        for chunk in self._chunks(shard, self.scan_columns, "group statistics"):
            p = self._prepare(chunk, self._given(chunk, shard, given), with_weights=True)
            p.batch.groups = self.groups
            with self._timed("estimator"):
                if accumulate is not None:
                    for name, ((group, position), values) in accumulate(p.batch, self.cfg).items():
                        buf = sums.setdefault(name, torch.zeros(self.groups.size.numel() * width, dtype=torch.float64))
                        buf.index_add_(0, (group * width + position).cpu(), values.double().cpu())
                if self.est.whiten:
                    raw, _ = self.est.fn(p.batch, self.cfg)
                    rows.add(**_moments(raw, p.batch))
        touched = None
        if sums:  # an untouched or zero slot adds nothing to the driver's sums
            slots = torch.nonzero(torch.stack([buf != 0 for buf in sums.values()]).any(0)).flatten()
            touched = (slots, {name: buf[slots] for name, buf in sums.items()})
        return ShardResult(rows.columns(), position_sums=touched)

    def _write(self, shard: Shard, given: dict[str, Tensor], write: Callable[[pa.Table], None]) -> ShardResult:
        """Advantages and returns, written chunk by chunk; per-row summaries and value sketches for the report."""
        checks = self.est.checks()
        rows = RowTable()
        sketches = TokenSketches(with_values="values" in self.est.columns)
        for chunk in self._chunks(shard, None, "write"):
            at = self._given(chunk, shard, given)
            p = self._prepare(chunk, at, with_weights=True)
            b = p.batch
            b.groups = self.groups
            b.position_sums = self.position_sums
            with self._timed("estimator"):
                advantages, returns = self.est.fn(b, self.cfg)
                if self.est.whiten:
                    mean, var = self.whiten_mean, self.whiten_var
                    if mean.numel() > 1:  # several batches: each token takes its batch's moments
                        tok_batch = b.per_token(at["batch_id"].to(self.device))
                        mean, var = mean[tok_batch], var[tok_batch]
                    advantages = kernels.masked_whiten(advantages, mean, var)
                    if self.est.returns_are_advantages:
                        returns = advantages
                m = b.response_mask
                # selection, not multiplication: verl's NaN (opo's 0/0) must not survive at mask-0 positions
                valid = m > 0
                # returns that are the advantages stay one tensor: summarised and sketched once
                same = returns is advantages
                advantages = torch.where(valid, advantages, torch.zeros_like(advantages))
                returns = advantages if same else torch.where(valid, returns, torch.zeros_like(returns))
                flags = {code: fn(b, self.cfg) for code, fn in checks.items()}
            # handed to the encoders before the chunk's statistics are taken, so they start on the first chunk
            # early and finish the last one while its statistics are taken; a non-finite value found then
            # still stops the run before anything is committed
            with self._timed("write"):
                write(_output_table(chunk.table, b, advantages, returns, p.is_weights, self.schema))
            with self._timed("diagnostics"):
                adv_rows = kernels.row_summary(advantages, valid, b.row_offsets)
                ret_rows = adv_rows if same else kernels.row_summary(returns, valid, b.row_offsets)
                self._check_finite(chunk, b, advantages, returns, valid, adv_rows["sum"], ret_rows["sum"])
                rows.add(**sketches.add(b, advantages, returns, valid, at["outcome"], adv_rows["count"]))
                if self.replay_columns:
                    computed = {"token_level_rewards": b.token_level_rewards, "rollout_is_weights": p.is_weights,
                                "advantages": advantages, "returns": returns}
                    rows.add(**replay.compare_chunk(chunk.table, self.replay_columns, computed, valid, b.row_offsets))
            rows.add(**{f"adv_{k}": v for k, v in adv_rows.items()}, **{f"ret_{k}": v for k, v in ret_rows.items()}, **flags)
        return ShardResult(rows.columns(), sketches=sketches)

    def _check_finite(self, chunk: Chunk, b: Batch, advantages: Tensor, returns: Tensor, valid: Tensor,
                      adv_sum: Tensor, ret_sum: Tensor) -> None:
        """Nothing silently wrong: a NaN/inf advantage or return on a valid token stops the run (inputs that are
        finite can still overflow, e.g. log-probs above 0 in exp()). A row holds one exactly when its float64
        sum of valid values (``adv_sum``, ``ret_sum`` ``(B,)``) is not finite."""
        bad_rows = ~(torch.isfinite(adv_sum) & torch.isfinite(ret_sum))
        if bool(bad_rows.any()):
            row = int(torch.nonzero(bad_rows)[0])
            lo, hi = int(b.row_offsets[row]), int(b.row_offsets[row + 1])
            bad = valid[lo:hi] & ~(torch.isfinite(advantages[lo:hi]) & torch.isfinite(returns[lo:hi]))
            token = lo + int(torch.nonzero(bad)[0])
            raise ComputeError(
                f"{chunk.path}: row {chunk.start + row}: {self.cfg.estimator} produced a non-finite advantage or "
                f"return at position {token - int(b.row_offsets[row])}; check that row's inputs (values beyond "
                "float32's range, or log-probs above 0 that overflow exp())"
            )



def _moments(raw: Tensor, b: Batch) -> dict[str, Tensor]:
    """Per-row whitening moments of raw advantages over the estimator's mask: ``w_count, w_sum, w_m2 (B,)``."""
    count, total, m2 = kernels.row_moments(raw, b.response_mask, b.row_offsets)
    return {"w_count": count, "w_sum": total, "w_m2": m2}


class Pipeline:
    """One run of the stages over a row source (``io.Dataset`` or an in-memory table): the driver.

    Each pass maps a ``ShardWork`` stage over the source's shards (``map_shards``: in this process, shard
    after shard, or on Ray workers) and merges their results in shard order; batch-wide statistics are then
    reduced here over whole per-row arrays and handed to the next pass. Whatever runs the shards, the
    reductions see the same arrays, so the numbers are the same."""

    def __init__(self, source, cfg: Config, progress: Optional[Progress] = None,
                 pad_widths: Optional[Mapping[object, int]] = None):
        self.source, self.cfg, self.pad_widths = source, cfg, pad_widths
        self.est = ESTIMATORS[cfg.estimator]
        self.device = resolve_device(cfg.device)
        names = set(source.columns)
        if cfg.rollout_rs or cfg.rollout_is:
            from ..stages.rejection import parse_rollout_is, parse_rollout_rs

            self.rules = parse_rollout_rs(cfg.rollout_rs, cfg.rollout_rs_threshold) if cfg.rollout_rs else ()
            self.is_cfg = (
                parse_rollout_is(cfg.rollout_is, cfg.rollout_is_threshold, cfg.rollout_is_batch_normalize)
                if cfg.rollout_is else None
            )
        else:
            self.rules, self.is_cfg = (), None
        self.required = validation.required_columns(
            source.columns, cfg.estimator, kl=cfg.use_kl, rollout_correction=bool(self.rules or self.is_cfg),
            batch_key=cfg.batch_key, reward_components=cfg.reward_components or (),
            tool_rewards=cfg.tool_reward_coef is not None,
        )
        validation.check_schema(source.paths[0], source.schema, self.required)
        if source.num_rows == 0:
            raise InputError(source.paths[0], "holds no rows")
        # verl runs rollout correction (at least its metrics) whenever rollout log-probs are present.
        self.correct = {"old_log_probs", "rollout_log_probs"} <= names
        self.has_uid = "uid" in names
        self.has_sessions = {"session_id", "output_index", "uid"} <= names
        self.fold = self.has_sessions and self.est.folds_sessions
        self.replay_columns, self.replay_skipped = replay.comparable(
            source.schema, set(computed_columns(self.is_cfg is not None)))
        self.work = ShardWork(source, cfg, progress, self.rules, self.is_cfg, correct=self.correct,
                              has_uid=self.has_uid, fold=self.fold, scan_columns=self._scan_columns(),
                              schema=output_schema(source.schema, self.is_cfg is not None),
                              replay_columns=self.replay_columns)
        self.fold_source: Optional[Tensor] = None
        self.labels = Labels(cfg.batch_key)
        self.rows = RowTable()
        self.seconds: dict[str, float] = defaultdict(float)
        self.whitening: list[dict] = []
        self.sketches = TokenSketches(with_values="values" in self.est.columns)
        self.outcome_basis = ""
        self.groups = None
        self.group_basis: Optional[Tensor] = None  # per-row value groups are judged on (R_i; gdpo: weighted components)
        self.flags: dict[str, Tensor] = {}  # per-group singleton_group / all_equal_group (group_flags)
        self.uid_merges: tuple[list[tuple], Tensor] = ([], torch.zeros(0, dtype=torch.long))
        # the optimal-token baselines: the largest rounding effect (baseline_rounding) and the groups over 1e-6
        self.baseline_ill_conditioned: tuple[float, Tensor] = (0.0, torch.zeros(0, dtype=torch.long))
        self.correction_stats: dict[int, object] = {}

    def _scan_columns(self) -> list[str]:
        names = self.source.columns
        optional = ("attention_mask", "loss_mask", "uid", "old_log_probs", "rollout_log_probs", "tool_rewards")
        wanted = set(self.required) | {c for c in optional if c in names}
        if self.fold:
            wanted |= {"session_id", "output_index"}
        return [c for c in names if c in wanted]

    # ----------------------------------------------------------------- run
    def run(self, write: Optional[Callable[[pa.Table], None]], map_shards: Optional[MapShards] = None) -> Report:
        """All passes; the write pass's tables go to ``write`` (local engine) or wherever ``map_shards``'s
        workers put them (``write`` is then unused)."""
        if map_shards is None:
            map_shards = partial(_map_here, write=write)
        threads = torch.get_num_threads()
        torch.set_num_threads(self.cfg.threads)
        try:
            return self._run(map_shards)
        finally:
            torch.set_num_threads(threads)

    def _run(self, map_shards: MapShards) -> Report:
        t0 = time.perf_counter()
        self._merge_layout(self._map(map_shards, "layout", ()))
        if self.work.adaptive_kl():
            self._step_kl_controller(self._map(map_shards, "kl", ("batch_id",)))
        self._merge_scan(self._map(map_shards, "scan", ("batch_id",)))
        if self.est.int_uids and self.has_uid:
            self._merge_int_uids()
        self._check_correction_batches()
        self._group_pass()
        per_row = ("batch_id", "group_id", "reward_total")
        if (self.est.whiten and self.est.groups) or self.est.accumulate:
            self._merge_group_statistics(self._map(map_shards, "group_statistics", per_row))
        if self.est.whiten:
            self._whitening()
        if self.est.groups and self.groups:
            self.outcome_basis, outcome = row_outcomes(self.group_basis, self.rows["group_id"], self.flags)
        else:
            self.outcome_basis, outcome = row_outcomes(self.rows["reward_total"])
        self.rows.add(outcome=outcome)
        for result in self._map(map_shards, "write", per_row + ("outcome",)):
            self.rows.add(**result.rows)
            self.sketches.merge(result.sketches)
        self.seconds["total"] = time.perf_counter() - t0
        return self._report()

    def _map(self, map_shards: MapShards, stage: str, names: tuple[str, ...]) -> list[ShardResult]:
        """Run ``stage`` over every shard with its rows of the per-row inputs ``names``; results in shard order."""
        given = {name: self.rows[name] for name in names if name in self.rows}
        if self.fold_source is not None:
            given["session_total"] = self.rows["reward_total"][self.fold_source]
            given["session_active"] = (self.rows["used"][self.fold_source] > 0).float()
        items = [(shard, {name: values[shard.first_row:shard.first_row + shard.num_rows] for name, values in given.items()})
                 for shard in self.source.shards]
        results = map_shards(stage, self.work, items)
        for result in results:
            for name, seconds in result.seconds.items():
                self.seconds[name] += seconds
        return results

    # ----------------------------------------------------------------- reductions
    def _merge_layout(self, results: list[ShardResult]) -> None:
        """Batch ids renumbered by first appearance in the dataset; each batch's pad width (verl pads each
        batch to its longest response, which fixes how row totals round; at least ``pad_widths[batch value]``
        and ``cfg.pad_width`` when given, so rows taken out of a larger dataset round as they do in it)."""
        for result in results:
            renumber = self.labels.absorb(result.labels)
            cols = dict(result.rows)
            if "batch_id" in cols:  # absent for a file without rows
                cols["batch_id"] = torch.from_numpy(renumber["batch"])[cols["batch_id"]]
            self.rows.add(**cols)
        batch_of_row = self.rows["batch_id"]
        n_batches = len(self.labels.batches)
        self.work.pad_width = torch.zeros(n_batches, dtype=torch.long).scatter_reduce(
            0, batch_of_row, self.rows["length"], "amax")
        self.work.positions = int(self.work.pad_width.max()) if n_batches else 0
        for value, b in self.labels.batches.items() if self.pad_widths is not None else ():
            self.work.pad_width[b] = max(int(self.work.pad_width[b]), self.pad_widths.get(value, 0))
        if self.cfg.pad_width is not None:
            self.work.pad_width.clamp_(min=self.cfg.pad_width)

    def _step_kl_controller(self, results: list[ShardResult]) -> None:
        """Each batch's KL coefficient: the adaptive controller stepped in batch order on verl's
        ``current_kl``, the float32 mean of the batch's ``kl_row``."""
        for result in results:
            self.rows.add(**result.rows)
        batch_of_row = self.rows["batch_id"]
        ctrl = KLController(self.cfg.kl_ctrl, self.cfg.kl_coef, self.cfg.kl_target, self.cfg.kl_horizon)
        beta = torch.zeros(len(self.labels.batches), dtype=torch.float64)
        for b in self.labels.batch_order():
            sel = batch_of_row == b
            beta[b] = ctrl.value
            ctrl.update(float(self.rows["kl_row"][sel].mean()), int(sel.sum()))
        self.work.beta_by_batch = beta

    def _merge_scan(self, results: list[ShardResult]) -> None:
        """Per-row values in dataset order, group and session ids renumbered by first appearance, and the
        rollout-correction statistics of each batch (with the IS normalisation factor each batch needs)."""
        for result in results:
            renumber = self.labels.absorb(result.labels)
            cols = dict(result.rows)
            for name, kind in (("group_id", "group"), ("session", "session")):
                if name in cols:
                    cols[name] = torch.from_numpy(renumber[kind])[cols[name]]
            self.rows.add(**cols)
            for bid, stats in result.correction.items():
                if bid in self.correction_stats:
                    self.correction_stats[bid].merge(stats)
                else:
                    self.correction_stats[bid] = stats
        if self.is_cfg is not None and self.is_cfg.batch_normalize:
            self.work.is_norm_factor = torch.tensor(
                [self.correction_stats[b].norm_factor() for b in range(len(self.labels.batches))], dtype=torch.float32)

    def _merge_int_uids(self) -> None:
        """Groups whose uids verl's ``as_torch_index`` converts to one integer become one group, as in verl
        (``Estimator.int_uids``); the sets of uids merged and the first row of each uid are kept for the report."""
        old = self.rows["group_id"]
        old_uids = [uid for (_, uid) in self.labels.groups]
        renumber = torch.from_numpy(self.labels.merge_as_verl_index())
        members = torch.bincount(renumber)[renumber] > 1
        sets = defaultdict(list)
        for g in torch.nonzero(members).flatten().tolist():
            sets[int(renumber[g])].append(old_uids[g])
        merged_rows = torch.sort(first_rows(old, renumber.numel())[members]).values
        self.uid_merges = ([tuple(m) for m in sets.values()], merged_rows)
        self.rows.replace("group_id", renumber[old])

    def _merge_group_statistics(self, results: list[ShardResult]) -> None:
        """Whitening moments per row; the per-(group, position) sums added shard after shard in float64,
        rounded to float32 once."""
        width = self.work.positions
        sums: dict[str, Tensor] = {}
        for result in results:
            self.rows.add(**result.rows)
            if result.position_sums is not None:
                slots, values = result.position_sums
                for name, v in values.items():
                    sums.setdefault(name, torch.zeros(self.labels.group_count * width, dtype=torch.float64)).index_add_(0, slots, v)
        if self.est.accumulate:
            effect = self.est.rounding_effect()
            if effect is not None and sums:
                rounding = effect(sums)
                ill = torch.nonzero(rounding >= ILL_CONDITIONED_SHIFT).flatten()
                if ill.numel():
                    self.baseline_ill_conditioned = (float(rounding[ill].max()), torch.unique(ill // width))
            self.work.position_sums = PositionSums(width, {k: v.float().to(self.device) for k, v in sums.items()
                                                           if not k.endswith("_abs")})

    def _group_pass(self) -> None:
        """Batch sizes and group statistics of the row totals over the whole dataset (groups never cross
        batches); an estimator's minimum group size is enforced here, before anything is written."""
        n_batches = len(self.labels.batches)
        batch_of_row = self.rows["batch_id"]
        self.work.batch_rows = torch.bincount(batch_of_row, minlength=n_batches)
        self.work.batch_nonzero_rows = torch.bincount(batch_of_row, weights=(self.rows["reward_total"] != 0).double(),
                                                 minlength=n_batches).long()
        if not self.has_uid:
            return
        n_groups, gid, used = self.labels.group_count, self.rows["group_id"], self.rows["used"]
        if self.fold:
            self.fold_source = _final_outputs(self.rows["session"], self.rows["output_index"])
            final = torch.unique(self.fold_source)
            self.groups = kernels.group_stats(self.rows["reward_total"][final], gid[final], n_groups, used[final])
        else:
            self.groups = kernels.group_stats(self.rows["reward_total"], gid, n_groups, used)
        self.group_basis = self.rows["reward_total"]
        self.flags = group_flags(self.group_basis, gid, self.groups.size)
        if self.cfg.reward_components:
            components = [self.rows[f"component_{k}"] for k in range(len(self.cfg.reward_components))]
            self.work.component_groups = [kernels.group_stats(c, gid, n_groups, used).to(self.device) for c in components]
            # gdpo's groups are judged on its components: a group is all-equal when every component is
            weights = self.cfg.reward_weights or (1.0,) * len(components)
            self.group_basis = sum(w * c.double() for w, c in zip(weights, components))
            per_component = [group_flags(c, gid, self.groups.size)["all_equal_group"] for c in components]
            self.flags["all_equal_group"] = torch.stack(per_component).all(0)
        self.work.groups = self.groups.to(self.device)
        small = torch.nonzero(self.groups.size < self.est.min_group_size).flatten()
        if self.est.groups and small.numel():
            batch, uid = next(key for key, gid in self.labels.groups.items() if gid == int(small[0]))
            where = self.labels.batch_name(batch)
            raise ComputeError(
                f"{self.cfg.estimator} requires at least {self.est.min_group_size} samples per group. Got "
                f"{int(self.groups.size[small[0]])} for group {uid}{' in batch ' + where if where else ''} "
                f"({small.numel()} such group(s))"
            )

    def _whitening(self) -> None:
        """Per-batch mean and unbiased variance of the raw advantages over valid tokens (float64 -> float32)."""
        n_batches = len(self.labels.batches)
        mean = torch.zeros(n_batches, dtype=torch.float64)
        var = torch.zeros(n_batches, dtype=torch.float64)
        batch_of_row = self.rows["batch_id"]
        for b in range(n_batches):
            sel = batch_of_row == b
            n, mu, m2 = kernels.combine_moments(self.rows["w_count"][sel], self.rows["w_sum"][sel], self.rows["w_m2"][sel])
            if n <= 1:
                where = self.labels.batch_name(b)
                raise ComputeError(
                    f"{self.cfg.estimator}: {'batch ' + where if where else 'the dataset'} has {int(n)} valid token(s) "
                    "after masking; whitening needs at least 2 (verl raises ValueError here)"
                )
            with np.errstate(over="ignore"):
                overflow = not np.isfinite(np.float32(m2 / (n - 1)))
            if overflow:
                where = self.labels.batch_name(b)
                raise ComputeError(
                    f"{self.cfg.estimator}: the variance of the values to whiten in "
                    f"{'batch ' + where if where else 'the dataset'} overflows float32 ({m2 / (n - 1):.3g}); verl "
                    "would give every advantage 0 (check the scores and values for huge entries)"
                )
            mean[b], var[b] = mu, m2 / (n - 1)
            self.whitening.append({"batch": self.labels.batch_name(b), "tokens": int(n), "mean": float(np.float32(mu)),
                                   "var": float(np.float32(m2 / (n - 1)))})
        self.work.whiten_mean, self.work.whiten_var = mean.float().to(self.device), var.float().to(self.device)

    def _check_correction_batches(self) -> None:
        """verl's rollout correction refuses a batch with no valid token (SEMANTICS §5.1)."""
        if not self.correct:
            return
        actor = self.rows["actor"]
        for b in range(len(self.labels.batches)):
            if float(actor[self.rows["batch_id"] == b].sum()) == 0:
                where = self.labels.batch_name(b)
                raise ComputeError(
                    f"rollout correction: {'batch ' + where if where else 'the dataset'} has no token with "
                    "response_mask 1 (verl: response_mask must contain at least one valid token (1).)"
                )

    # ----------------------------------------------------------------- report
    def _report(self) -> Report:
        rows, cfg, est = self.rows, self.cfg, self.est
        warn = WarningBuilder(self.source.locate)
        tokens_total = int(rows["length"].sum())
        actor, used, padding = int(rows["actor"].sum()), int(rows["used"].sum()), int(rows["padding"].sum())
        groups = self._groups_report(warn)
        warn.add_rows("score_on_masked_position",
                      "{n} row(s) carry a non-zero score on a position whose response_mask is 0 (a tool observation or padding): "
                      "outcome estimators (R_i sums every position) still count it; gae, reinforce_plus_plus, remax and "
                      "the optimal-token baselines drop it", rows["score_on_masked_position"])
        warn.add_rows("row_without_actor_tokens", "{n} row(s) have no position with response_mask 1: they get no advantage",
                      rows["actor"] == 0)
        if "credit_reset_at_mask" in rows:
            warn.add_rows("credit_reset_at_mask",
                          "{n} row(s): reinforce_plus_plus in reset mode cut a reward off from earlier tokens at a mask-0 "
                          "position (--rpp-mask-mode carry passes it through, as verl 0.9.1 does)", rows["credit_reset_at_mask"])
        if "negative_token_weight" in rows:
            warn.add_rows("negative_token_weight",
                          "{n} row(s) have an actor token whose optimal-baseline weight w = 1 - 2π + sum_pi_squared is "
                          "negative: sum_pi_squared is below π² = exp(old_log_prob)² there, which a policy's own Σπ² "
                          "never is (another temperature or policy?); such weights can cancel in a group's baseline",
                          rows["negative_token_weight"])
        if self.fold:
            warn.add_rows("session_key_collision",
                          "{n} row(s) belong to sessions whose uid and session_id join to another session's verl key "
                          "f'{{uid}}_{{session_id}}' in the same batch: verl 0.9.1 folds such sessions into one, rladv keeps "
                          "them apart (ids from verl, an integer session_id, never collide)",
                          torch.isin(rows["session"], torch.from_numpy(self.labels.colliding_sessions())))
        # rejected: by this run's rollout rejection, or already in the input (response_mask below its loss_mask)
        rejected = rows["actor"] - rows["used"]
        warn.add_rows("row_fully_rejected", "{n} row(s) lost every valid token to rollout rejection",
                      (rows["actor"] > 0) & (rows["used"] == 0))
        if est.groups:
            warn.add_rows("rejected_in_group_baseline",
                          "{n} row(s) with rejected tokens still contribute their full reward to their group's baseline",
                          rejected > 0)
        shifts = {b: _ulp_shift(w) for b, w in enumerate(self.whitening)}  # self.whitening: one entry per batch
        ill = {b: shift for b, shift in shifts.items() if shift >= ILL_CONDITIONED_SHIFT}
        if ill:
            first = [int(torch.nonzero(rows["batch_id"] == b)[0]) for b in ill]
            worst = max(ill.values())
            warn.add("whitening_ill_conditioned",
                     f"{len(first)} batch(es) whiten values whose spread is tiny next to their size: one float32 ulp "
                     f"of the batch mean moves every advantage by up to {worst:.1e}. verl sums the mean in float32 in an "
                     "order rladv cannot follow (rladv: float64), so its advantages differ from rladv's by a few such "
                     "steps; all values equal gives rladv 0 and verl float32 noise", len(first), sorted(first))
        worst, ill_groups = self.baseline_ill_conditioned
        if ill_groups.numel():
            first = torch.sort(first_rows(rows["group_id"], self.labels.group_count)[ill_groups]).values
            warn.add("baseline_ill_conditioned",
                     f"{ill_groups.numel()} group(s) have positions where the baseline's weights Σ_i W[i,t] nearly cancel "
                     f"(w = 1 - 2π + Σπ² is negative where sum_pi_squared < π², which a policy's own Σπ² never "
                     f"is): one float32 rounding of its sums moves the baseline, and "
                     f"the advantages, by up to {worst:.1e}. verl sums them in float32 (rladv: float64), so its "
                     "advantages there differ from rladv's by about that much", ill_groups.numel(), first)
        kl = self._kl_report(warn)
        correction = {}
        if self.correction_stats:
            per = {self.labels.batch_name(b) or "all": s.metrics() for b, s in sorted(self.correction_stats.items())}
            correction = next(iter(per.values())) if len(per) == 1 else {"batches": per}
        total_s = self.seconds.get("total", 0.0)
        return Report(
            rladv_version=__version__,
            inputs=Inputs(
                paths=list(self.source.paths),
                files=self._file_infos(),
                rows=self.source.num_rows, tokens=tokens_total,
            ),
            output=None,
            config={**cfg.model_dump(), "score_column": "rm_scores" if "rm_scores" in self.source.columns else "score",
                    **({"score_column_ignored": "score"} if {"rm_scores", "score"} <= set(self.source.columns)
                       and not cfg.reward_components else {}),
                    "device_resolved": str(self.device)},
            tokens=Tokens(total=tokens_total, actor=actor, observation=tokens_total - actor - padding,
                          padding=padding, rejected=actor - used, used=used),
            groups=groups,
            scores=Scores(score_total=row_stats(rows["score_total"].double().numpy()),
                          reward_total=row_stats(rows["reward_total"].double().numpy())),
            kl=kl,
            rollout_rejection=correction,
            dead_signal=self._dead_signal_report(),
            whitening=self.whitening or None,
            overlong=self._overlong_report(),
            tool_rewards=self._tool_rewards_report(warn),
            sessions=self._sessions_report(),
            replay=replay.report(rows, self.replay_columns, self.replay_skipped, self.source.locate,
                                 rows["group_id"] if self.has_uid else None, "loss_mask" in self.source.columns),
            advantages=token_stats(rows, "adv"),
            returns=token_stats(rows, "ret"),
            distributions=distributions(rows, self.sketches, self.outcome_basis,
                                        rows["group_id"] if self.has_uid else None),
            warnings=warn.items,
            timing=Timing(
                seconds={k: round(v, 6) for k, v in self.seconds.items()},
                tokens_per_second=tokens_total / total_s if total_s > 0 else 0.0,
                device=str(self.device),
            ),
        )

    def _dead_signal_report(self) -> dict:
        """Actor tokens (input response_mask 1) whose advantage is exactly 0, by cause: rejected by rollout
        rejection, in an all-equal group, in a singleton group, or otherwise (e.g. grpo_passk's non-best rows)."""
        rows = self.rows
        actor = float(rows["actor"].sum())
        zero = rows["adv_zero"]
        rejected = rows["actor"] - rows["used"]
        causes = {"rejected": float(rejected.sum())}
        if self.groups is not None and self.est.groups:
            gid = rows["group_id"]
            all_equal, single = self.flags["all_equal_group"][gid], self.flags["singleton_group"][gid]
            causes["all_equal_group"] = float(zero[all_equal].sum())
            causes["singleton"] = float(zero[single & ~all_equal].sum())
            causes["other"] = float(zero[~all_equal & ~single].sum())
        else:
            causes["other"] = float(zero.sum())
        dead = sum(causes.values())
        return {"actor_tokens": int(actor), "zero_advantage_tokens": int(dead),
                "share": dead / actor if actor else 0.0, "causes": {k: int(v) for k, v in causes.items()}}

    def _overlong_report(self) -> Optional[dict]:
        if self.cfg.overlong_buffer_len is None:
            return None
        penalty = self.rows["overlong_penalty"]
        hit = penalty < 0
        return {"rows_penalised": int(hit.sum()),
                "mean_penalty_of_penalised": float(penalty[hit].double().mean()) if bool(hit.any()) else 0.0,
                "min_penalty": float(penalty.min())}

    def _tool_rewards_report(self, warn: WarningBuilder) -> Optional[dict]:
        """The ``tool_rewards`` column: rows and calls, each row's sum, whether they were added to the score,
        and (left out, group estimators) the all-equal groups whose rows' tool rewards differ."""
        if "tool_reward_sum" not in self.rows:
            return None
        sums, calls = self.rows["tool_reward_sum"], self.rows["tool_calls"]
        called = calls > 0
        coef = self.cfg.tool_reward_coef
        out = {"added": coef is not None, "coef": coef, "rows_with_calls": int(called.sum()), "calls": int(calls.sum()),
               "sum_per_row": row_stats(sums[called].numpy()).model_dump()}
        if self.groups is not None and self.est.groups:
            gid, size = self.rows["group_id"], self.groups.size
            differ = self.flags["all_equal_group"] & ~group_flags(sums, gid, size)["all_equal_group"]
            out["all_equal_groups_with_differing_tool_rewards"] = int(differ.sum())
            if coef is None:
                hit = torch.nonzero(differ).flatten()
                warn.add("tool_rewards_not_in_score",
                         f"{hit.numel()} all-equal group(s) have rows whose tool_rewards differ: a signal the score "
                         "leaves out (verl never adds tool rewards; --tool-reward-coef C adds C * their sum to each "
                         "row's score)", hit.numel(), torch.sort(first_rows(gid, size.numel())[hit]).values)
        return out

    def _sessions_report(self) -> Optional[dict]:
        if not self.has_sessions:
            return None
        if not self.fold:
            return {"folded": False, "rows": self.source.num_rows,
                    "note": f"{self.cfg.estimator} counts every output row as a group member (verl folds sessions for grpo only)"}
        final = torch.unique(self.fold_source).numel()
        return {"folded": True, "sessions": final, "rows": self.source.num_rows,
                "note": "grpo: only each session's final output enters the group statistics; every output of the "
                        "session gets that output's advantage"}

    def _file_infos(self) -> list[FileInfo]:
        lengths = self.rows["length"]
        infos, start = [], 0
        for path, n in zip(self.source.paths, self.source.file_rows):
            infos.append(FileInfo(path=path, rows=n, tokens=int(lengths[start:start + n].sum())))
            start += n
        return infos

    def _groups_report(self, warn: WarningBuilder) -> Groups:
        n_batches = len(self.labels.batches)
        if self.groups is None:
            return Groups(count=0, sizes={}, singletons=0, all_equal=0, batches=n_batches)
        gid = self.rows["group_id"]
        size = self.groups.size
        flags = self.flags
        first_row = first_rows(gid, size.numel())
        unused = "this estimator does not use groups"
        singleton_text = self.est.singleton or f"no group fallback ({unused})"
        equal = "equal reward components" if self.cfg.reward_components else "equal total rewards"
        equal_text = ("no learning signal from them (float32 rounding can leave tiny non-zero advantages, as in verl)"
                      if self.est.groups else f"{unused}, so their advantages do not depend on it")
        for code, text in (
            ("singleton_group", f"{{n}} uid group(s) have one row; {self.cfg.estimator}: {singleton_text}"),
            ("all_equal_group", f"{{n}} group(s) of 2+ rows have {equal}: {equal_text}"),
        ):
            hit = torch.nonzero(flags[code]).flatten()
            warn.add(code, text.format(n=hit.numel()), hit.numel(), torch.sort(first_row[hit]).values)
        group_batch = torch.zeros(size.numel(), dtype=torch.long).scatter_(0, gid, self.rows["batch_id"])
        mismatched = [b for b in range(n_batches) if torch.unique(size[group_batch == b]).numel() > 1]
        if mismatched:
            warn.add("group_size_mismatch",
                     f"group sizes differ within {len(mismatched)} batch(es) ({', '.join(str(s) for s in torch.unique(size).tolist())} rows): "
                     "check that every prompt got rollout.n samples", len(mismatched),
                     [int(first_row[group_batch == b].min()) for b in mismatched])
        merges, merged_rows = self.uid_merges
        if merges:
            shown = "; ".join("/".join(repr(u) for u in m) for m in merges[:3])
            warn.add("uid_merge_grpo_vectorized",
                     f"{len(merges)} set(s) of distinct uids that verl's grpo_vectorized converts to one integer and "
                     f"merges into one group ({shown}); rladv merges them too, as verl does", len(merges), merged_rows)
        hist = torch.bincount(size)
        return Groups(
            count=size.numel(), sizes={str(k): int(v) for k, v in enumerate(hist.tolist()) if v},
            singletons=int((size == 1).sum()), all_equal=int(flags["all_equal_group"].sum()), batches=n_batches,
        )

    def _kl_report(self, warn: WarningBuilder) -> KL:
        cfg = self.cfg
        if not cfg.use_kl:
            return KL(enabled=False, penalty=cfg.kl_penalty, ctrl=cfg.kl_ctrl, coef=cfg.kl_coef)
        rows = self.rows
        warn.add_rows("kl_raises_reward",
                      "{n} row(s) have a token whose KL estimate times the coefficient is negative, so shaping raised its reward",
                      rows["kl_raises_reward"])
        warn.add_rows("kl_flips_sign", "{n} row(s) changed the sign of their total reward through KL shaping",
                      rows["kl_flips_sign"])
        kl_row, batch_of_row = rows["kl_row"], rows["batch_id"]
        batches = []
        for b in self.labels.batch_order():
            sel = batch_of_row == b
            beta = self.work.beta_by_batch
            coef = cfg.kl_coef if beta is None else float(beta[b])
            batches.append(KLBatch(batch=self.labels.batch_name(b), rows=int(sel.sum()),
                                   kl=float(kl_row[sel].mean()), coef=coef))
        return KL(enabled=True, penalty=cfg.kl_penalty, ctrl=cfg.kl_ctrl, mean=float(kl_row.mean()),
                  coef=cfg.kl_coef, batches=batches)


def kl_row_mean(kld: Tensor, mask: Tensor, row_offsets: Tensor, width: Tensor) -> Tensor:
    """verl's per-row KL ``masked_mean(kld, mask, axis=-1)``: the float32 row sum padded to ``width`` (as
    verl sums a ``[B, T]`` row) over ``Σ mask + 1e-8``; ``(B,)`` float32. The adaptive controller steps on
    their float32 mean, so a float64 mean would give another coefficient."""
    return kernels.padded_row_sum(kld, row_offsets, width) / (kernels.segment_sum(mask, row_offsets).float() + 1e-8)


def _final_outputs(session: Tensor, output_index: Tensor) -> Tensor:
    """For every row, the dataset row of its session's final output: the largest ``output_index``, the first
    such row on ties (verl 0.9.1's ``compute_advantage_for_multi_trajectories``); ``(B,)`` int64."""
    rows = np.arange(session.numel())
    order = np.lexsort((rows, -output_index.numpy(), session.numpy()))
    first = np.ones(order.size, dtype=bool)
    first[1:] = session.numpy()[order][1:] != session.numpy()[order][:-1]
    final = np.empty(int(session.max()) + 1 if session.numel() else 0, dtype=np.int64)
    final[session.numpy()[order][first]] = order[first]
    return torch.from_numpy(final[session.numpy()])


def _output_table(table: pa.Table, b: Batch, advantages: Tensor, returns: Tensor,
                  is_weights: Optional[Tensor], schema: pa.Schema) -> pa.Table:
    """The chunk's input columns plus rladv's columns, all lists sharing the chunk's row offsets."""
    offsets = b.row_offsets.cpu().numpy()
    if offsets[-1] >= 2**31:
        raise ComputeError("a chunk holds 2^31 tokens or more; lower --chunk-rows")
    off = arrow_of(offsets, pa.int32())

    def as_list(x: Tensor | np.ndarray, t: pa.DataType) -> pa.Array:
        values = x.cpu().numpy() if isinstance(x, Tensor) else x
        return pa.ListArray.from_arrays(off, arrow_of(values, t))

    loss_mask = (flat_values(table, "loss_mask", np.int8) if "loss_mask" in table.column_names
                 else b.original_mask.to(torch.int8))
    added = {
        "token_level_rewards": as_list(b.token_level_rewards, pa.float32()),
        "response_mask": as_list(b.response_mask.to(torch.int8), pa.int8()),
        "loss_mask": as_list(loss_mask, pa.int8()),
        "advantages": as_list(advantages, pa.float32()),
        "returns": as_list(returns, pa.float32()),
    }
    if is_weights is not None:
        added["rollout_is_weights"] = as_list(is_weights, pa.float32())
    arrays = [added[name] if name in added else array_of(table[name]) for name in schema.names]
    return pa.Table.from_arrays(arrays, schema=schema)


def _map_here(stage: str, work: ShardWork, items: list[tuple[Shard, dict[str, Tensor]]],
              write: Optional[Callable[[pa.Table], None]]) -> list[ShardResult]:
    """The local engine's ``MapShards``: every shard in this process, in order; the write pass into ``write``."""
    return [work.run(stage, shard, given, write) for shard, given in items]
