"""The estimator registry: what each estimator needs and how it behaves, by verl's name. No torch here.

Every estimator has ONE signature, ``fn(batch: Batch, inputs: Inputs, params: Params) -> (advantages, returns)``
on flat ``(N,)`` tensors: ``batch`` is the chunk's tokens after the stages, ``inputs`` holds exactly what the
estimator declares in ``needs`` (what earlier passes established for these rows), ``params`` its settings.
The pipeline reads the declarations and never asks a name; estimator names appear nowhere else in the code.
"""
from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional

from ..config.flags import named, option_name
from ..errors import ConfigError

if TYPE_CHECKING:  # the settings an estimator reads, generated from Config's fields
    from ..config.settings import Params

# verl 0.9.1's registry names (``AdvantageEstimator``); rladv may implement only some of them.
REFERENCE_NAMES = (
    "gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo", "grpo_passk",
    "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo",
)
REFERENCE_DEFAULT = "gae"  # verl 0.9.1's AlgoConfig.adv_estimator: what a trainer config without one runs
# the settings of one estimator or another (gamma: discount, lam: GAE, the rest: std scaling and REINFORCE++)
ESTIMATOR_SETTINGS = ("gamma", "lam", "norm_adv_by_std", "epsilon", "rpp_mask_mode", "scale_rewards", "leave_one_out")
# grpo_norm's levels, the k of pkpo and passk_analytic, vapo's alpha and critic lambda
ESTIMATOR_SETTINGS += ("mean_level", "std_level", "k", "vapo_alpha", "value_lam")
# what an estimator may ask for in ``needs`` (the fields of ``inputs.Inputs``)
INPUTS = ("reward_total", "group_index", "groups", "session_total", "session_active", "batch_rows",
          "batch_nonzero_rows", "components", "component_groups", "position_sums", "row_advantage")
INPUTS += ("batch_mean", "batch_std")
# the group statistics an estimator may ask for (``tensors.groups.GroupStats``; ``size`` is always there)
GROUP_STATISTICS = ("mean", "std", "seq_sum", "seq_std", "length_weighted_mean", "top_gap", "top_row",
                    "longest_row", "second_longest", "nonempty_size", "sorted_totals")


# what an estimator reads a column for, in its error message when the column is missing
COLUMN_ROLES = {
    "values": "the critic's values", "reward_baselines": "the greedy rollout's reward per row",
    "old_log_probs": "the old policy's log-probs", "sum_pi_squared": "Σ_v π(v)² at each position",
    "uid": "a group id per row (the prompt's id)",
}


@dataclass(frozen=True)
class Estimator:
    """Declared needs and behaviour of one estimator.

    impl:      ``module:function`` in this package, the estimator itself
    columns:   input columns it reads beyond ``response_mask`` and the score (e.g. ``values``)
    family:    what kind of baseline it is, in a few words (``rladv estimators``' table)
    needs:     the ``Inputs`` it reads (``INPUTS``); ``groups`` among them means a ``uid`` column and batch-wide
               group statistics of the row totals ``R_i``, of which it reads ``group_statistics``
    whiten:    its raw advantages are whitened over every valid token of the batch (``masked_whiten``; with
               ``biased_whitening``, OpenRLHF's: the biased variance, ``clamped_whiten``)
    returns_are_advantages: returns are the final (whitened) advantages rather than the raw returns
    min_group_size: smaller groups are an error (verl raises)
    accumulate: ``fn(batch, inputs, params) -> {name: (flat index, values)}`` summed per (group, position) over
               the batch before the estimator runs (its result reaches the estimator as ``inputs.position_sums``)
    rounding: ``fn(float64 sums) -> (G·width,)``: how far float32 rounding of the accumulated sums can move
               the result, per (group, position) slot (the report warns ``baseline_ill_conditioned`` at 1e-6)
    batch_wide: a row's result depends on the whole batch beyond its group (besides whitening)
    folds_sessions: with ``session_id``/``output_index`` columns, only each session's final output enters the
               group statistics and its advantage is broadcast to the session's rows (verl 0.9.1)
    singleton: what the reference does with a one-row group (None when groups are not used)
    int_uids: groups are formed as verl's ``as_torch_index`` forms them: when every uid of a batch converts
               with ``int()``, uids that convert to the same integer (``"01"``, ``"1"``) are one group
    settings:  the estimator's own settings (``ESTIMATOR_SETTINGS``) that it reads; a flag typed for another
               one is refused (it could not change a number)
    components: it reads per-row reward components (``--reward-components``) instead of the score
    row_checks: warning code -> ``module:function`` flagging the rows where one of its quirks bit
    explain:   ``module:function`` giving ``rladv explain``'s derivation of one row (``derivation.Derivation``)
    arithmetic: ``module:function``, ``fn(r, totals, params) -> str``: a group estimator's advantage of the row whose
               total is ``r`` written out with its group's totals (``(n,)`` float64, the row's among them)
    summary_without_std: ``summary`` when ``--no-norm-adv-by-std`` turns its division by the std off
    row_advantage: ``fn(total, group, batch, params) -> (B,)``: each row's scalar advantage computed over the whole
               dataset at once (``(B,)`` row totals, dense group and batch ids, in dataset order, on the CPU), as a
               trainer computes it on its batch's matrix of rewards; it reaches the estimator as
               ``inputs.row_advantage``
    min_group_setting: the setting whose value is a minimum group size too (``--k``: ``min_group``)
    binary_rewards: it reads row totals of 0 or 1 only; any other total is an error naming its row
    """

    name: str
    impl: str
    columns: tuple[str, ...]
    needs: tuple[str, ...]
    family: str
    whiten: bool
    baseline: str
    observation_credit: str
    singleton: str | None
    summary: str
    explain: str
    group_statistics: tuple[str, ...] = ()
    returns_are_advantages: bool = False
    min_group_size: int = 1
    accumulate: str | None = None
    rounding: str | None = None
    folds_sessions: bool = False
    batch_wide: bool = False
    int_uids: bool = False
    settings: tuple[str, ...] = ()
    components: bool = False
    row_checks: tuple[tuple[str, str], ...] = ()
    row_advantage: str | None = None
    biased_whitening: bool = False
    min_group_setting: str | None = None
    binary_rewards: bool = False
    arithmetic: str | None = None
    summary_without_std: str | None = None

    def __post_init__(self) -> None:
        unknown = (set(self.needs) - set(INPUTS)) | (set(self.group_statistics) - set(GROUP_STATISTICS))
        if unknown:
            raise ValueError(f"{self.name}: unknown needs or group statistics {sorted(unknown)}")

    @property
    def groups(self) -> bool:
        """Needs batch-wide group statistics of the row totals (so a ``uid`` column)."""
        return "groups" in self.needs

    def std_epsilon(self, epsilon: float, norm_adv_by_std: bool = True) -> Optional[float]:
        """The epsilon this estimator adds to the std of its groups' row totals before dividing by it, or None
        when it does not divide so (``norm_adv_by_std`` False for grpo; gdpo divides per component)."""
        if "epsilon" not in self.settings or self.components:
            return None
        return epsilon if norm_adv_by_std or "norm_adv_by_std" not in self.settings else None

    @property
    def counts_masked_rewards(self) -> bool:
        """Its row total ``R_i`` sums every position, so a score on a mask-0 position still counts (the group
        estimators' credit, ``_GROUP_CREDIT``); the others drop such a score."""
        return self.observation_credit == _GROUP_CREDIT

    @property
    def input_columns(self) -> tuple[str, ...]:
        """The input columns it reads beyond the mask and the score (``uid`` for a group estimator)."""
        return (*self.columns, *(("uid",) if self.groups else ()))

    @property
    def reads(self) -> dict[str, str]:
        """Each of ``input_columns`` with why it needs it (``gae needs the critic's values``)."""
        return {name: f"{self.name} needs {COLUMN_ROLES.get(name, name)}" for name in self.input_columns}

    @property
    def fn(self) -> Callable:
        return _load(self.impl)

    def accumulator(self) -> Callable | None:
        return _load(self.accumulate) if self.accumulate else None

    def rounding_effect(self) -> Callable | None:
        return _load(self.rounding) if self.rounding else None

    def checks(self) -> dict[str, Callable]:
        """Warning code -> ``fn(batch, inputs, params) -> (B,) bool`` flagging rows where this estimator's quirk bit."""
        return {code: _load(impl) for code, impl in self.row_checks}

    def derivation(self) -> Callable:
        return _load(self.explain)

    def row_arithmetic(self) -> Callable | None:
        return _load(self.arithmetic) if self.arithmetic else None

    def summary_for(self, params: Params) -> str:
        """``summary``, or ``summary_without_std`` when the settings turn the std division off."""
        off = self.summary_without_std and "norm_adv_by_std" in self.settings and not params.norm_adv_by_std
        return self.summary_without_std if off else self.summary

    def min_group(self, params: Params) -> int:
        """The smallest group it computes with these settings: ``min_group_size``, or the value of its
        ``min_group_setting`` when that is larger."""
        setting = getattr(params, self.min_group_setting) if self.min_group_setting else 0
        return max(self.min_group_size, setting)

    def row_advantages(self) -> Callable | None:
        return _load(self.row_advantage) if self.row_advantage else None

    def describe(self) -> dict:
        """What ``rladv estimators`` prints for it."""
        return {
            "name": self.name,
            "family": self.family,
            "needs": ["response_mask", "rm_scores|score", *self.input_columns],
            "critic": "values" in self.columns,
            "groups": self.groups,
            "whitened": self.whiten,
            "baseline": self.baseline,
            "observation_credit": self.observation_credit,
            "singleton": self.singleton,
            "summary": self.summary,
            "settings": [option_name(name) for name in self.settings],
        }


def _load(impl: str) -> Callable:
    module, attr = impl.split(":")
    return getattr(importlib.import_module(f"rladv_cli.estimators.{module}"), attr)


_GROUP_CREDIT = "row total R_i sums every position (observations included); advantage broadcast to actor tokens"
_OUTCOME = ("reward_total", "group_index", "groups")  # a group estimator of the row totals R_i
_BY_GROUP = "derivation:by_group"  # one advantage per row, explained by its group


def _group(name: str, impl: str, *, needs: tuple[str, ...] = _OUTCOME, **declared) -> Estimator:
    """A group estimator of the row totals: its credit crosses observations as every such estimator's does, it is
    not whitened unless said, and ``rladv explain`` shows its group."""
    defaults = dict(columns=(), whiten=False, observation_credit=_GROUP_CREDIT, explain=_BY_GROUP)
    return Estimator(name, impl, needs=needs, **{**defaults, **declared})


ESTIMATORS: dict[str, Estimator] = {
    e.name: e
    for e in (
        Estimator(
            "gae", "gae:gae", ("values",), family="critic", needs=(), whiten=True, settings=("gamma", "lam"),
            baseline="critic values V_t",
            observation_credit="skipped: state carried across mask-0 spans (bootstraps from the next actor token)",
            singleton=None,
            summary="Generalised Advantage Estimation with gamma, lam; whitened over the batch",
            explain="gae:explain",
        ),
        _group(
            "grpo", "grpo:grpo", family="group", needs=(*_OUTCOME, "session_total", "session_active"), group_statistics=("mean", "std"),
            settings=("norm_adv_by_std", "epsilon"),
            baseline="group mean (divided by group std unless --no-norm-adv-by-std)",
            singleton="advantage R/(1+eps): the raw score, not 0",
            summary="(R - mean_g) / (std_g + eps) per uid group",
            summary_without_std="R - mean_g per uid group (--no-norm-adv-by-std: not divided by the std; Dr. GRPO)",
            folds_sessions=True, arithmetic="grpo:arithmetic",
        ),
        _group(
            "grpo_vectorized", "grpo:grpo_vectorized", family="group", group_statistics=("seq_sum", "seq_std"), int_uids=True,
            settings=("epsilon",),
            baseline="group mean / group std (always; verl ignores the std flag here)",
            singleton="advantage R/(1+eps): the raw score, not 0",
            summary="grpo through verl's group_mean_std; always divides by std", arithmetic="grpo:arithmetic_vectorized",
        ),
        _group(
            "rloo", "rloo:rloo", family="leave-one-out", group_statistics=("mean",),
            baseline="mean of the other rows of the group (leave-one-out)",
            singleton="advantage R: the raw score is kept",
            summary="R_i - mean of the other n-1 rows", arithmetic="rloo:arithmetic",
        ),
        _group(
            "rloo_vectorized", "rloo:rloo_vectorized", family="leave-one-out", group_statistics=("seq_sum",),
            baseline="mean of the other rows of the group (leave-one-out)",
            singleton="advantage 0",
            summary="(c R_i - S_g) / (c - 1); singletons get 0", arithmetic="rloo:arithmetic_vectorized",
        ),
        Estimator(
            "reinforce_plus_plus", "reinforce:reinforce_plus_plus", (), family="reward-to-go", needs=(), whiten=True,
            settings=("gamma", "rpp_mask_mode"),
            baseline="none (batch whitening)",
            observation_credit="--rpp-mask-mode carry (default, verl 0.9.1): the return passes through mask-0 positions; reset: restarts at 0 there",
            singleton=None,
            summary="discounted reward-to-go over actor tokens, whitened over the batch",
            explain="reinforce:explain",
            row_checks=(("credit_reset_at_mask", "reinforce:credit_cut_rows"),),
        ),
        _group(
            "reinforce_plus_plus_baseline", "reinforce:reinforce_plus_plus_baseline", family="group+whiten", group_statistics=("mean",),
            whiten=True, baseline="group mean, then batch whitening",
            singleton="baseline 0: the raw score enters whitening",
            summary="(R_i - mean_g) broadcast to actor tokens, whitened over the batch",
            returns_are_advantages=True,
        ),
        Estimator(
            "remax", "remax:remax", ("reward_baselines",), family="greedy", needs=(), whiten=False,
            baseline="reward_baselines: the greedy rollout's reward for the same prompt",
            observation_credit="masked rewards dropped; undiscounted reward-to-go over actor tokens",
            singleton=None,
            summary="reward-to-go minus the greedy baseline",
            explain="remax:explain",
        ),
        _group(
            "opo", "opo:opo", family="group", group_statistics=("length_weighted_mean",),
            baseline="length-weighted group mean of R (weights: valid tokens per row)",
            singleton="baseline 0: advantage R",
            summary="R_i - sum(n_j R_j) / sum(n_j) per group",
        ),
        _group(
            "gpg", "gpg:gpg", family="scaled group", needs=(*_OUTCOME, "batch_rows", "batch_nonzero_rows"), group_statistics=("mean",),
            baseline="group mean, scaled by alpha = rows / rows with non-zero reward (batch-wide)",
            singleton="baseline 0: advantage alpha*R",
            summary="alpha (R_i - mean_g); alpha depends on the whole batch",
            batch_wide=True,
        ),
        _group(
            "grpo_passk", "passk:grpo_passk", family="best of group", needs=("group_index", "groups"),
            group_statistics=("top_gap", "top_row", "std"), settings=("norm_adv_by_std", "epsilon"),
            baseline="second-best total of the group; only the best row gets a non-zero advantage",
            singleton="error: verl requires 2+ rows per group",
            summary="best row: (r1 - r2) / (std_g + eps); others 0",
            summary_without_std="best row: r1 - r2 (--no-norm-adv-by-std: not divided by the std); others 0",
            min_group_size=2,
        ),
        Estimator(
            "optimal_token_baseline", "otb:optimal_token_baseline", ("old_log_probs", "sum_pi_squared"), family="token baseline",
            needs=("group_index", "groups", "position_sums"), group_statistics=("longest_row", "second_longest"),
            whiten=False,
            baseline="per-position group baseline sum(G W) / sum(W), W = cumulative path-variance proxy",
            observation_credit="masked rewards dropped; baseline per absolute position, observations skipped in W",
            singleton="baseline 0: advantage = reward-to-go",
            summary="reward-to-go minus an optimal per-token baseline (uses rollout_is_weights when present)",
            explain="otb:explain_absolute",
            accumulate="otb:accumulate_absolute", rounding="otb:baseline_rounding",
            row_checks=(("negative_token_weight", "otb:negative_weight_rows"),),
        ),
        Estimator(
            "tir_optimal_token_baseline", "otb:tir_optimal_token_baseline", ("old_log_probs", "sum_pi_squared"), family="token baseline",
            needs=("group_index", "groups", "position_sums"),
            group_statistics=("longest_row", "second_longest", "nonempty_size"), whiten=False,
            baseline="per-position group baseline over each row's actor tokens only (positions compacted)",
            observation_credit="observations removed before aligning rows: actor token k meets actor token k",
            singleton="baseline 0 (rows without actor tokens do not count)",
            summary="optimal token baseline for tool-interleaved rollouts",
            explain="otb:explain_compact",
            accumulate="otb:accumulate_compact", rounding="otb:baseline_rounding",
            row_checks=(("negative_token_weight", "otb:negative_weight_rows"),),
        ),
        _group(
            "gdpo", "gdpo:gdpo", family="components", needs=(*_OUTCOME, "components", "component_groups"), group_statistics=("mean", "std"),
            whiten=True, settings=("epsilon",), components=True,
            baseline="per-component group mean / std, weighted sum, then batch whitening",
            observation_credit="components are per-row scalars; advantage broadcast to actor tokens",
            singleton="each component keeps c/(1+eps) before whitening",
            summary="grpo per reward component (--reward-components), weighted, whitened",
            returns_are_advantages=True,
        ),
        _group(
            "grpo_loo", "scalar:from_rows", family="leave-one-out",
            needs=("group_index", "groups", "row_advantage"), settings=("norm_adv_by_std", "leave_one_out"),
            baseline="mean of the other rows of the group; divided by their std where it is > 0 (NeMo-RL's GRPO)",
            singleton="advantage 0",
            summary="(R_i - mean_-i) / (std_-i + 1e-6) where std_-i > 0",
            row_advantage="nemo_rl:grpo_rows",
        ),
        _group(
            "maxrl", "skyrl:maxrl", family="mean-scaled", group_statistics=("mean",), settings=("epsilon",),
            baseline="group mean, dividing by the group mean + eps (SkyRL, prime-rl)",
            singleton="advantage R: the raw score is kept",
            summary="(R_i - mean_g) / (mean_g + eps)",
        ),
        _group(
            "grpo_norm", "norm:grpo_norm", family="group", needs=(*_OUTCOME, "batch_mean", "batch_std"),
            group_statistics=("mean", "std"), settings=("mean_level", "std_level", "epsilon"),
            baseline="mean of the group or of the batch (--mean-level), divided by the std of either (--std-level)",
            singleton="a level of one row has mean 0 and std 1 (as grpo): a singleton group keeps R/(1+eps)",
            summary="(R_i - mean) / (std + eps) at the levels of AReaL's NormConfig and ROLL's reward_norm",
            batch_wide=True,
        ),
        _group(
            "pkpo", "pkpo:pkpo", family="best of k", group_statistics=("sorted_totals",), settings=("k",),
            baseline="the best of the other k-1 rows of each k-subset holding the row (leave-one-out of PKPO)",
            singleton="error unless --k 1: groups need at least --k rows",
            summary="mean over k-subsets of the gain in their best total the row brings",
            min_group_setting="k",
        ),
        _group(
            "passk_analytic", "passk_analytic:passk_analytic", family="pass@k", group_statistics=("seq_sum",),
            settings=("k", "epsilon"),
            baseline="the group's pass@k 1 - C(n-c,k)/C(n,k) over its std sqrt(p(1-p)); rewards must be 0 or 1",
            singleton="error unless --k 1: groups need at least --k rows",
            summary="Pass@k Training's analytic advantage of correct and incorrect rows",
            min_group_setting="k", binary_rewards=True,
        ),
        Estimator(
            "vapo", "vapo:vapo", ("values",), family="critic", needs=(), whiten=True,
            settings=("gamma", "vapo_alpha", "value_lam"),
            baseline="critic values V_t; policy lambda 1 - 1/(alpha * valid tokens) per row",
            observation_credit="skipped: state carried across mask-0 spans (bootstraps from the next actor token)",
            singleton=None,
            summary="GAE with a length-adaptive policy lambda; returns from --value-lam; whitened",
            explain="vapo:explain",
        ),
    )
}

# what inspect says of singleton groups when no estimator is named
SINGLETON_EXAMPLES = "grpo gives R/(1+eps) (the raw score, not 0), rloo keeps R, rloo_vectorized gives 0"
# the estimator ``inspect --uid`` computes a group with when none is named
DEFAULT_GROUP_ESTIMATOR = "grpo"


def get_estimator(name: str) -> Estimator:
    """The registered estimator ``name``; ``ConfigError`` when unknown: ``--estimator: unknown estimator 'GRPO';
    did you mean grpo?``."""
    if name not in ESTIMATORS:
        raise ConfigError(f"{named('estimator')}: {unknown_estimator(name)}")
    return ESTIMATORS[name]


def unknown_estimator(name: str) -> str:
    """Why ``name`` is not an estimator, with the one it most likely means, or the list of names."""
    close = closest(name, list(ESTIMATORS))
    return f"unknown estimator '{name}'; " + (f"did you mean {close}?" if close else f"choose one of {', '.join(ESTIMATORS)}")


def closest(name: str, names: list[str]) -> Optional[str]:
    """The one of ``names`` that ``name`` most likely means: the same letters in another case, else the closest
    spelling (None when none is close)."""
    same_letters = {n.lower(): n for n in names}.get(str(name).lower())
    return same_letters or next(iter(difflib.get_close_matches(str(name), names, n=1)), None)


def names_where(test: Callable[[Estimator], bool]) -> list[str]:
    """The names of the estimators for which ``test`` holds, in registry order (for messages such as "only
    grpo folds sessions")."""
    return [e.name for e in ESTIMATORS.values() if test(e)]


def with_check(code: str) -> list[str]:
    """The estimators with the row check ``code`` (e.g. ``credit_reset_at_mask``)."""
    return names_where(lambda e: code in dict(e.row_checks))
