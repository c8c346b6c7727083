"""Reward shaping before the estimator: KL penalty in the reward (docs/semantics.md §4) and its coefficient controllers."""
from __future__ import annotations

from dataclasses import dataclass

from ..tensors import xp as X
from ..tensors.xp import Array


def overlong_penalty(length: Array, buffer_len: int, penalty_factor: float, max_resp_len: int) -> Array:
    """DAPO's overlong penalty per row (docs/semantics.md §3), ``(B,)`` float32, in verl's arithmetic::

        exceed  = L − (max_resp_len − buffer_len)          (integer; L = non-padding tokens, observations included)
        penalty = min(−exceed / buffer_len · penalty_factor, 0)

    The division is float32 (verl divides an integer tensor by an int), then the factor; no lower clamp. A
    positive value means the row is short enough: verl then adds nothing.
    """
    exceed = length - (max_resp_len - buffer_len)
    penalty = X.float32(-exceed) / buffer_len * penalty_factor
    return X.namespace(penalty).where(penalty > 0, 0.0, penalty)


def kl_penalty(logprob: Array, ref_logprob: Array, mode: str) -> Array:
    """Per-token KL estimate ``(N,)`` of verl 0.9.1, with ``d = logprob − ref_logprob``:

    ``kl``/``k1``: ``d``; ``abs``: ``|d|``; ``mse``/``k2``: ``0.5·d²``;
    ``low_var_kl``/``k3``: ``k = clamp(ref − logprob, −20, 20)``, ``clamp((exp(k) − k) − 1, −10, 10)``.
    ``<mode>+`` has the value of ``<mode>`` (the ``+`` is a straight-through k2 gradient in verl), written
    as ``base + (k2 − k2)`` so that it is NaN exactly where verl's is.
    """
    xp = X.namespace(logprob, ref_logprob)
    base_mode = mode.removesuffix("+")
    d = logprob - ref_logprob
    if base_mode in ("kl", "k1"):
        value = d
    elif base_mode == "abs":
        value = xp.abs(d)
    elif base_mode in ("mse", "k2"):
        value = 0.5 * xp.square(d)
    elif base_mode in ("low_var_kl", "k3"):
        k = xp.clip(ref_logprob - logprob, min=-20.0, max=20.0)
        value = xp.clip((X.exp32(k) - k) - 1.0, min=-10.0, max=10.0)
    else:
        raise NotImplementedError(mode)
    if mode.endswith("+"):
        k2 = 0.5 * xp.square(d)
        value = value + (k2 - k2)
    return value


@dataclass(frozen=True)
class KLShaping:
    """Result of ``apply_kl``: token rewards ``(N,)`` and the masked estimate ``kld (N,)``."""

    token_level_rewards: Array
    kld: Array


def apply_kl(token_level_scores: Array, old_log_probs: Array, ref_log_prob: Array, original_mask: Array,
             beta: Array | float, mode: str) -> KLShaping:
    """``kld = kl_penalty(old, ref) × m0``; ``r = s − β·kld`` (docs/semantics.md §4.2), on the ORIGINAL mask.

    ``beta`` is a Python float, or a per-token ``(N,)`` float32 array when rows of several batches (each
    with its own controller value) share a chunk.
    """
    kld = kl_penalty(old_log_probs, ref_log_prob, mode) * original_mask
    return KLShaping(token_level_scores - beta * kld, kld)


class KLController:
    """verl's ``FixedKLController`` / ``AdaptiveKLController`` (docs/semantics.md §4.3).

    adaptive: ``e = clip(current_kl / target − 1, −0.2, 0.2)``; ``β ← β·(1 + e·n_steps/horizon)`` (float64),
    applied to the next batch.
    """

    def __init__(self, kind: str, coef: float, target: float, horizon: int):
        self.kind, self.value, self.target, self.horizon = kind, float(coef), float(target), int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        if self.kind == "adaptive":
            error = min(max(current_kl / self.target - 1.0, -0.2), 0.2)
            self.value *= 1.0 + error * n_steps / self.horizon
