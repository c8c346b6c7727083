"""Row-score shaping of other trainers, after DAPO's overlong shaping and before KL shaping (docs/semantics.md
§3.1): OpenRLHF's ProRL stop-properly penalty (``apply_stop_properly_penalty`` in
``openrlhf/trainer/ppo_utils/length_penalty.py``, 0.11.2), then AReaL's ``reward_bias``, ``reward_scaling`` and
``reward_clip`` (``PPOActor._compute_advantages`` in ``areal/trainer/ppo/actor.py``, 1.0.4), in their trainers'
order. Each changes ``token_level_scores`` (and so the rewards, which KL shaping has not touched yet).
"""
from __future__ import annotations

from dataclasses import replace

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.xp import Array


def stop_properly_penalty(batch: Batch, truncated: Array, coef: float) -> Batch:
    """Rows with ``truncated (B,) bool`` (an array of the batch's kind) set: every score times ``coef`` for
    ``0 ≤ coef ≤ 1`` (the row's total scales with them), or, for ``coef < 0``, the row's scores replaced by
    ``coef`` at its score position and 0 elsewhere. Float32, as OpenRLHF's ``rewards[j] * coef`` and
    ``rewards[j] = coef``."""
    scores = batch.token_level_scores
    xp = X.namespace(scores)
    at_truncated = batch.per_token(truncated)
    if coef >= 0:
        shaped = xp.where(at_truncated, scores * coef, scores)
    else:
        shaped = xp.where(at_truncated, xp.zeros_like(scores), scores)
        shaped[batch.score_position[truncated]] = coef
    return replace(batch, token_level_scores=shaped, token_level_rewards=shaped)


def stop_properly_rows(reward: Array, truncated: Array, coef: float) -> Array:
    """``stop_properly_penalty`` on one reward per row ``(B,)``, in its dtype: ``R · coef`` (``coef ≥ 0``) or
    ``coef`` where ``truncated``."""
    xp = X.namespace(reward)
    return xp.where(truncated, reward * coef if coef >= 0 else xp.full_like(reward, coef), reward)


def scale_bias_clip_rows(reward: Array, scale: float, bias: float, clip: float | None) -> Array:
    """``scale_bias_clip`` on one reward per row ``(B,)``, in its dtype: ``clip((R + bias) · scale, ±clip)``."""
    shaped = (reward + bias) * scale
    return shaped if clip is None else X.namespace(shaped).clip(shaped, min=-clip, max=clip)


def scale_bias_clip(batch: Batch, scale: float, bias: float, clip: float | None) -> Batch:
    """AReaL's ``clip((score + bias) * scale, -clip, clip)`` on each row's score, float32.

    The bias is added at the row's score position and every position is then scaled, so a row whose only
    non-zero score sits there (a scalar ``score``, an outcome ``rm_scores``) gets exactly AReaL's
    ``(score + bias) * scale``, and a token-level row's total moves the same way. ``clip`` then bounds the row's
    total ``R`` (summed as verl sums it): where ``|R| > clip`` the score position takes ``clamp(R) − (R − s_p)``,
    which is ``±clip`` itself for such a row. ``clip`` None: no clamp."""
    scores, at = batch.token_level_scores, batch.score_position
    shaped = scores * scale
    shaped[at] = (scores[at] + bias) * scale
    if clip is not None:
        total = batch.row_total(shaped)
        clamped = X.namespace(total).clip(total, min=-clip, max=clip)
        moved = clamped != total
        shaped[at[moved]] = clamped[moved] - (total[moved] - shaped[at[moved]])
    return replace(batch, token_level_scores=shaped, token_level_rewards=shaped)
