"""The estimator registry: what each estimator needs and how it behaves, by verl's name. No torch here.

Every estimator has ONE signature, ``fn(batch: Batch, params: Config) -> (advantages, returns)`` on flat
``(N,)`` tensors, and declares what it needs; the pipeline reads the declarations and never asks a name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Estimator:
    """Declared needs and behaviour of one estimator.

    columns:   input columns it reads beyond ``response_mask`` and the score (e.g. ``values``)
    groups:    needs batch-wide group statistics of the row totals ``R_i`` (so a ``uid`` column)
    whiten:    its raw advantages are whitened over every valid token of the batch (``masked_whiten``)
    returns_are_advantages: returns are the final (whitened) advantages rather than the raw returns
    singleton: what the reference does with a one-row group (None when groups are not used)
    """

    name: str
    impl: str
    columns: tuple[str, ...]
    groups: bool
    whiten: bool
    baseline: str
    observation_credit: str
    singleton: str | None
    summary: str
    returns_are_advantages: bool = False
    row_checks: tuple[tuple[str, str], ...] = ()

    def checks(self) -> dict[str, Callable]:
        """Warning code -> ``fn(batch, params) -> (B,) bool`` flagging rows where this estimator's quirk bit."""
        return {code: _load(impl) for code, impl in self.row_checks}

    @property
    def fn(self) -> Callable:
        return _load(self.impl)


def _load(impl: str) -> Callable:
    module, attr = impl.split(":")
    return getattr(importlib.import_module(f"rladv_cli.estimators.{module}"), attr)


_GROUP_CREDIT = "row total R_i sums every position (observations included); advantage broadcast to actor tokens"

ESTIMATORS: dict[str, Estimator] = {
    e.name: e
    for e in (
        Estimator(
            "gae", "gae:gae", ("values",), groups=False, whiten=True,
            baseline="critic values V_t",
            observation_credit="skipped: state carried across mask-0 spans (bootstraps from the next actor token)",
            singleton=None,
            summary="Generalised Advantage Estimation with gamma, lam; whitened over the batch",
        ),
        Estimator(
            "grpo", "grpo:grpo", (), groups=True, whiten=False,
            baseline="group mean (divided by group std unless --no-norm-adv-by-std)",
            observation_credit=_GROUP_CREDIT, singleton="advantage R/(1+eps): the raw score, not 0",
            summary="(R - mean_g) / (std_g + eps) per uid group",
        ),
        Estimator(
            "grpo_vectorized", "grpo:grpo_vectorized", (), groups=True, whiten=False,
            baseline="group mean / group std (always; verl ignores the std flag here)",
            observation_credit=_GROUP_CREDIT, singleton="advantage R/(1+eps): the raw score, not 0",
            summary="grpo through verl's group_mean_std; always divides by std",
        ),
        Estimator(
            "rloo", "rloo:rloo", (), groups=True, whiten=False,
            baseline="mean of the other rows of the group (leave-one-out)",
            observation_credit=_GROUP_CREDIT, singleton="advantage R: the raw score is kept",
            summary="R_i - mean of the other n-1 rows",
        ),
        Estimator(
            "rloo_vectorized", "rloo:rloo_vectorized", (), groups=True, whiten=False,
            baseline="mean of the other rows of the group (leave-one-out)",
            observation_credit=_GROUP_CREDIT, singleton="advantage 0",
            summary="(c R_i - S_g) / (c - 1); singletons get 0",
        ),
        Estimator(
            "reinforce_plus_plus", "reinforce:reinforce_plus_plus", (), groups=False, whiten=True,
            baseline="none (batch whitening)",
            observation_credit="--rpp-mask-mode reset (default): return resets at mask-0 positions; carry: passes through",
            singleton=None,
            summary="discounted reward-to-go over actor tokens, whitened over the batch",
            row_checks=(("credit_reset_at_mask", "reinforce:credit_cut_rows"),),
        ),
        Estimator(
            "reinforce_plus_plus_baseline", "reinforce:reinforce_plus_plus_baseline", (), groups=True,
            whiten=True, baseline="group mean, then batch whitening",
            observation_credit=_GROUP_CREDIT, singleton="baseline 0: the raw score enters whitening",
            summary="(R_i - mean_g) broadcast to actor tokens, whitened over the batch",
            returns_are_advantages=True,
        ),
    )
}


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name``; ``KeyError`` when unknown (the config turns it into a message)."""
    return ESTIMATORS[name]
