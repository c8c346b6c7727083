"""The estimator registry: what each estimator needs and how it behaves, by verl's name. No torch here.

Every estimator has ONE signature, ``fn(batch: Batch, params: Config) -> (advantages, returns)`` on flat
``(N,)`` tensors, and declares what it needs; the pipeline reads the declarations and never asks a name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from ..errors import ConfigError


@dataclass(frozen=True)
class Estimator:
    """Declared needs and behaviour of one estimator.

    columns:   input columns it reads beyond ``response_mask`` and the score (e.g. ``values``)
    groups:    needs batch-wide group statistics of the row totals ``R_i`` (so a ``uid`` column)
    whiten:    its raw advantages are whitened over every valid token of the batch (``masked_whiten``)
    returns_are_advantages: returns are the final (whitened) advantages rather than the raw returns
    min_group_size: smaller groups are an error (verl raises)
    accumulate: ``fn(batch, params) -> {name: (flat index, values)}`` summed per (group, position) over the
               batch before the estimator runs (its result reaches the estimator as ``batch.position_sums``)
    rounding: ``fn(float64 sums) -> (G·width,)``: how far float32 rounding of the accumulated sums can move
               the result, per (group, position) slot (the report warns ``baseline_ill_conditioned`` at 1e-6)
    batch_wide: a row's result depends on the whole batch beyond its group (besides whitening)
    folds_sessions: with ``session_id``/``output_index`` columns, only each session's final output enters the
               group statistics and its advantage is broadcast to the session's rows (verl 0.9.1, grpo only)
    singleton: what the reference does with a one-row group (None when groups are not used)
    int_uids: groups are formed as verl's ``as_torch_index`` forms them: when every uid of a batch converts
               with ``int()``, uids that convert to the same integer (``"01"``, ``"1"``) are one group
    settings:  the estimator's own ``Config`` settings (``ESTIMATOR_SETTINGS``) that it reads; a flag typed for
               another one is refused (it could not change a number)
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
    min_group_size: int = 1
    accumulate: str | None = None
    rounding: str | None = None
    folds_sessions: bool = False
    batch_wide: bool = False
    int_uids: bool = False
    settings: tuple[str, ...] = ()
    row_checks: tuple[tuple[str, str], ...] = ()

    def accumulator(self) -> Callable | None:
        return _load(self.accumulate) if self.accumulate else None

    def rounding_effect(self) -> Callable | None:
        return _load(self.rounding) if self.rounding else None

    def checks(self) -> dict[str, Callable]:
        """Warning code -> ``fn(batch, params) -> (B,) bool`` flagging rows where this estimator's quirk bit."""
        return {code: _load(impl) for code, impl in self.row_checks}

    @property
    def fn(self) -> Callable:
        return _load(self.impl)


def _load(impl: str) -> Callable:
    module, attr = impl.split(":")
    return getattr(importlib.import_module(f"rladv_cli.estimators.{module}"), attr)


# the settings of one estimator or another (gamma: discount, lam: GAE, the rest: std scaling and REINFORCE++)
ESTIMATOR_SETTINGS = ("gamma", "lam", "norm_adv_by_std", "epsilon", "rpp_mask_mode")
_GROUP_CREDIT = "row total R_i sums every position (observations included); advantage broadcast to actor tokens"

ESTIMATORS: dict[str, Estimator] = {
    e.name: e
    for e in (
        Estimator(
            "gae", "gae:gae", ("values",), groups=False, whiten=True, settings=("gamma", "lam"),
            baseline="critic values V_t",
            observation_credit="skipped: state carried across mask-0 spans (bootstraps from the next actor token)",
            singleton=None,
            summary="Generalised Advantage Estimation with gamma, lam; whitened over the batch",
        ),
        Estimator(
            "grpo", "grpo:grpo", (), groups=True, whiten=False, settings=("norm_adv_by_std", "epsilon"),
            baseline="group mean (divided by group std unless --no-norm-adv-by-std)",
            observation_credit=_GROUP_CREDIT, singleton="advantage R/(1+eps): the raw score, not 0",
            summary="(R - mean_g) / (std_g + eps) per uid group",
            folds_sessions=True,
        ),
        Estimator(
            "grpo_vectorized", "grpo:grpo_vectorized", (), groups=True, whiten=False, int_uids=True,
            settings=("epsilon",),
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
            settings=("gamma", "rpp_mask_mode"),
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
        Estimator(
            "remax", "remax:remax", ("reward_baselines",), groups=False, whiten=False,
            baseline="reward_baselines: the greedy rollout's reward for the same prompt",
            observation_credit="masked rewards dropped; undiscounted reward-to-go over actor tokens",
            singleton=None,
            summary="reward-to-go minus the greedy baseline",
        ),
        Estimator(
            "opo", "opo:opo", (), groups=True, whiten=False,
            baseline="length-weighted group mean of R (weights: valid tokens per row)",
            observation_credit=_GROUP_CREDIT, singleton="baseline 0: advantage R",
            summary="R_i - sum(n_j R_j) / sum(n_j) per group",
        ),
        Estimator(
            "gpg", "gpg:gpg", (), groups=True, whiten=False,
            baseline="group mean, scaled by alpha = rows / rows with non-zero reward (batch-wide)",
            observation_credit=_GROUP_CREDIT, singleton="baseline 0: advantage alpha*R",
            summary="alpha (R_i - mean_g); alpha depends on the whole batch",
            batch_wide=True,
        ),
        Estimator(
            "grpo_passk", "passk:grpo_passk", (), groups=True, whiten=False, settings=("norm_adv_by_std", "epsilon"),
            baseline="second-best total of the group; only the best row gets a non-zero advantage",
            observation_credit=_GROUP_CREDIT, singleton="error: verl requires 2+ rows per group",
            summary="best row: (r1 - r2) / (std_g + eps); others 0",
            min_group_size=2,
        ),
        Estimator(
            "optimal_token_baseline", "otb:optimal_token_baseline", ("old_log_probs", "sum_pi_squared"),
            groups=True, whiten=False,
            baseline="per-position group baseline sum(G W) / sum(W), W = cumulative path-variance proxy",
            observation_credit="masked rewards dropped; baseline per absolute position, observations skipped in W",
            singleton="baseline 0: advantage = reward-to-go",
            summary="reward-to-go minus an optimal per-token baseline (uses rollout_is_weights when present)",
            accumulate="otb:accumulate_absolute", rounding="otb:baseline_rounding",
            row_checks=(("negative_token_weight", "otb:negative_weight_rows"),),
        ),
        Estimator(
            "tir_optimal_token_baseline", "otb:tir_optimal_token_baseline", ("old_log_probs", "sum_pi_squared"),
            groups=True, whiten=False,
            baseline="per-position group baseline over each row's actor tokens only (positions compacted)",
            observation_credit="observations removed before aligning rows: actor token k meets actor token k",
            singleton="baseline 0 (rows without actor tokens do not count)",
            summary="optimal token baseline for tool-interleaved rollouts",
            accumulate="otb:accumulate_compact", rounding="otb:baseline_rounding",
            row_checks=(("negative_token_weight", "otb:negative_weight_rows"),),
        ),
        Estimator(
            "gdpo", "gdpo:gdpo", (), groups=True, whiten=True, settings=("epsilon",),
            baseline="per-component group mean / std, weighted sum, then batch whitening",
            observation_credit="components are per-row scalars; advantage broadcast to actor tokens",
            singleton="each component keeps c/(1+eps) before whitening",
            summary="grpo per reward component (--reward-components), weighted, whitened",
            returns_are_advantages=True,
        ),
    )
}


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name``; ``ConfigError`` when unknown: ``--estimator: unknown estimator 'x';
    choose one of gae, grpo, ...``."""
    if name not in ESTIMATORS:
        raise ConfigError(f"--estimator: unknown estimator '{name}'; choose one of {', '.join(ESTIMATORS)}")
    return ESTIMATORS[name]
