"""The per-chunk chain that runs before the estimator, in verl's order (docs/semantics.md §10):

    validate -> arrays -> score assembly (tool rewards) -> DAPO overlong shaping (verl's, or OpenRLHF's under its
    convention) -> stop-properly penalty ->
    reward bias, scale and clip -> KL shaping on the original mask -> rollout rejection (rewrites
    ``response_mask``) -> importance weights

``prepare`` runs it on one chunk and returns a ``Prepared`` (a new ``Batch`` per stage that changes it, never
an edited one). What it needs of the earlier passes is one ``Shaping`` value (each batch's pad width, KL
coefficient and IS normalisation factor).
"""
from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Iterator, Optional

import numpy as np

from ..config.correction import ImportanceSampling, RejectionRule
from ..config.settings import Config
from ..contract import validation
from ..contract.columns import list_sums, scalar_values
from ..estimators.openrlhf import overlong_penalty as openrlhf_overlong_penalty
from ..io.read import Chunk
from ..tensors import xp as X
from ..tensors.batch import Batch, as_array, from_arrow
from ..tensors.xp import Array
from .score import scale_bias_clip, scale_bias_clip_rows, stop_properly_penalty, stop_properly_rows
from .shaping import apply_kl, overlong_penalty


class Timer:
    """Seconds spent per stage (``with timer("shaping"): ...``), summed over the chunks of a pass."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - t0


@dataclass(frozen=True)
class Chain:
    """The chain's settings: the run's ``Config``, its parsed rollout-correction rules, the device (``"cpu"``:
    numpy arrays, ``"cuda"``: torch tensors; ``tensors.batch.resolve_device``), and whether the row-score stages
    also run in float64 on a float64 ``score`` column (``Convention.float64_rewards``)."""

    cfg: Config
    rules: tuple[RejectionRule, ...]
    is_cfg: Optional[ImportanceSampling]
    device: str
    exact_rewards: bool = False  # also each row's reward in float64, from a float64 score (``Prepared``)


@dataclass(frozen=True)
class Shaping:
    """What the chain needs of the earlier passes, per batch id ``(n_batches,)``: ``pad_width`` (the layout
    pass: verl pads each batch to its longest response, which fixes how row totals round), ``beta`` (the kl
    pass: the adaptive controller's coefficient per batch; None = ``cfg.kl_coef``) and ``is_norm_factor`` (the
    scan pass: the batch's mean IS weight, with ``--rollout-is-batch-normalize``). numpy, on the host: a chunk
    takes its rows' values to its device."""

    pad_width: np.ndarray
    beta: Optional[np.ndarray] = None
    is_norm_factor: Optional[np.ndarray] = None


@dataclass(frozen=True)
class Prepared:
    """A chunk after the stages: the batch, the masked KL estimate ``kld (N,)`` and the coefficient that shaped
    it (None and 0 without KL shaping), each row's overlong penalty ``(B,)`` and reward components ``(K, B)``
    where those stages ran, and with ``Chain.exact_rewards`` each row's shaped score ``(B,)`` in float64."""

    batch: Batch
    kld: Optional[Array]
    beta: Array | float
    overlong_penalty: Optional[Array] = None
    components: Optional[Array] = None
    exact_reward: Optional[Array] = None


def add_to_score(batch: Batch, per_row: Array) -> Batch:
    """Score assembly: ``s[p_i] += per_row[i]`` (``(B,)`` float32) at each row's score position, before any
    KL shaping (``token_level_rewards`` is the same array)."""
    scores = X.namespace(batch.token_level_scores).asarray(batch.token_level_scores, copy=True)
    scores[batch.score_position] = scores[batch.score_position] + per_row
    return replace(batch, token_level_scores=scores, token_level_rewards=scores)


def prepare(chain: Chain, chunk: Chunk, batch_ids: np.ndarray, shaping: Shaping, timer: Timer, *,
            validated: frozenset[str] = frozenset(), with_weights: bool = False) -> Prepared:
    """The chain on one chunk whose rows are in batches ``batch_ids (B,)``; ``validated``: the columns an earlier
    pass over these rows checked already; ``with_weights``: also the importance weights (the IS stage)."""
    cfg, device = chain.cfg, chain.device
    with timer("validate"):
        if not chunk.checked:
            validation.check_chunk(chunk.table, chunk.path, chunk.start, validated, cfg.conv.unscorable)
    components = None
    with timer("convert"):
        batch = replace(from_arrow(chunk.table, chunk.first_row, device),
                        pad_width=X.on_device(shaping.pad_width[batch_ids], device))
        if cfg.reward_components:
            validation.check_numbers(chunk.table, cfg.reward_components, chunk.path, chunk.start)
            components = as_array(np.stack([scalar_values(chunk.table, c) for c in cfg.reward_components]), device)
    penalty = None
    # with exact rewards, the same row-score stages on each row's float64 score (one score per row: docs/conventions.md)
    exact = as_array(scalar_values(chunk.table, "score", np.float64), device) if chain.exact_rewards else None
    with timer("shaping"):
        if cfg.tool_reward_coef is not None:
            sums, _ = list_sums(chunk.table, "tool_rewards")
            batch = add_to_score(batch, as_array((cfg.tool_reward_coef * sums).astype(np.float32), device))
            exact = None if exact is None else exact + as_array(cfg.tool_reward_coef * sums, device)
        if cfg.overlong_buffer_len is not None:
            penalty = _overlong(cfg, batch)
            batch = add_to_score(batch, X.float32(penalty))  # a float64 penalty is rounded first, as torch adds it
            exact = None if exact is None else exact + penalty
        if cfg.stop_properly_penalty_coef is not None:
            truncated = as_array(scalar_values(chunk.table, "truncated", np.bool_), device)
            batch = stop_properly_penalty(batch, truncated, cfg.stop_properly_penalty_coef)
            exact = None if exact is None else stop_properly_rows(exact, truncated, cfg.stop_properly_penalty_coef)
        if cfg.reward_scale != 1.0 or cfg.reward_bias != 0.0 or cfg.reward_clip is not None:
            batch = scale_bias_clip(batch, cfg.reward_scale, cfg.reward_bias, cfg.reward_clip)
            exact = None if exact is None else scale_bias_clip_rows(exact, cfg.reward_scale, cfg.reward_bias,
                                                                    cfg.reward_clip)
    kld, beta = None, 0.0
    with timer("shaping"):
        if cfg.kl_in_reward:
            beta = cfg.kl_coef if shaping.beta is None else batch.per_token(
                X.on_device(shaping.beta[batch_ids].astype(np.float32), device))
            shaped = apply_kl(batch.token_level_scores, batch.old_log_probs, batch.ref_log_prob,
                              batch.original_mask, beta, cfg.kl_penalty)
            batch, kld = replace(batch, token_level_rewards=shaped.token_level_rewards), shaped.kld
    with timer("rejection"):
        if chain.rules:
            from .rejection import rejection_keep

            keep, _ = rejection_keep(chain.rules, batch.old_log_probs, batch.rollout_log_probs,
                                     batch.original_mask, batch.row_offsets)
            m0 = batch.original_mask
            batch = replace(batch, response_mask=X.namespace(m0).astype(m0 * keep, m0.dtype))
        if with_weights and chain.is_cfg is not None:
            batch = replace(batch, rollout_is_weights=_is_weights(chain.is_cfg, batch, batch_ids, shaping))
    return Prepared(batch, kld, beta, None if penalty is None else X.float32(penalty), components, exact)


def _overlong(cfg: Config, batch: Batch) -> Array:
    """Each row's DAPO overlong penalty ``(B,)`` by the convention's trainer (``Convention.overlong``): verl's on
    the row's non-padding length (float32), or OpenRLHF's on its span of action tokens (float64)."""
    if cfg.conv.overlong == "openrlhf":
        return openrlhf_overlong_penalty(batch.original_mask, batch.row_offsets, cfg.overlong_buffer_len,
                                         cfg.overlong_penalty_factor, cfg.max_resp_len)
    return overlong_penalty(batch.valid_length, cfg.overlong_buffer_len, cfg.overlong_penalty_factor, cfg.max_resp_len)


def _is_weights(is_cfg: ImportanceSampling, batch: Batch, batch_ids: np.ndarray, shaping: Shaping) -> Array:
    """The IS stage's weights ``(N,)`` (docs/semantics.md §5.2); with batch normalisation each row is divided by its
    own batch's factor."""
    from .rejection import importance_weights

    factor = None
    if shaping.is_norm_factor is not None:
        factor = batch.per_token(X.like(shaping.is_norm_factor[batch_ids], batch.row_offsets))
    return importance_weights(is_cfg, batch.old_log_probs, batch.rollout_log_probs, batch.original_mask, batch.row_offsets,
                   norm_factor=factor)
