"""Trainer conventions: how each trainer groups rows, where it puts KL, and its own estimators by its own names
(docs/conventions.md). ``verl`` is the registry (``ESTIMATORS``); every other convention maps its estimator
names to declarations whose scalar per row (``Estimator.row_advantage``) is computed as that trainer computes it.
No torch here: the settings and the command line read these tables.

grouping: ``uid`` (rows sharing a uid), ``blocks`` (consecutive blocks of ``--group-size`` rows in file order,
within each batch, as TRL and OpenRLHF reshape their batch; OpenRLHF's in the order of its sample ``index``
column when the file has one) or ``prompt`` (rows with equal prompt token ids: the
``prompts`` column, else ``uid``). kl: ``reward`` (verl's KL reward shaping stage), ``token`` (the estimator adds
``−kl_coef · kl`` per token after the baseline, OpenRLHF) or ``loss`` (the trainer puts KL in the loss, so
``--kl-coef`` has no counterpart).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..config.flags import named
from ..errors import ConfigError
from .registry import _GROUP_CREDIT, ESTIMATORS, Estimator, closest

Grouping = Literal["uid", "blocks", "prompt"]
DEFAULT = "verl"


@dataclass(frozen=True)
class Convention:
    """One trainer's rules: ``version`` and ``source`` (file and function) as read, ``grouping``, ``kl``, its
    estimators by its names (each hard-codes its own epsilon where the trainer does), the KL estimates it has
    (``kl_modes``, with ``kl="token"``), the column whose order its blocks follow (``order_column``), and what the
    trainer does with the row scores (docs/conventions.md):

    stop_properly_replaces: a negative ``--stop-properly-penalty-coef`` is a replacement score (OpenRLHF); else
               it is refused (NeMo-RL only scales)
    overlong:  whose DAPO overlong penalty ``--overlong-buffer-len`` runs; None: refused
    float64_rewards: a float64 ``score`` column stays float64 through the row-score stages and the row scalar
               (OpenRLHF's ``promote_types``)
    unscorable: a null or NaN ``score`` is a row without a score, NaN in the trainer's row function, which leaves
               it out of the statistics (TRL); else an input error
    step_column: the flag column that, when the file has it, makes rows steps of trajectories: each trajectory
               is the rows up to and including one whose flag is true, in file order within a batch; its last step
               alone enters the group statistics and every step gets that step's advantage (SkyRL's
               ``step_wise_trajectories``)
    """

    name: str
    trainer: str
    version: str
    source: str
    grouping: Grouping
    kl: Literal["reward", "token", "loss"]
    estimators: dict[str, Estimator]
    kl_modes: tuple[str, ...] = ()
    order_column: str | None = None  # blocks follow this integer column's order when the file has it
    stop_properly_replaces: bool = True  # a negative stop-properly coefficient replaces the score (OpenRLHF)
    overlong: Literal["verl", "openrlhf"] | None = None  # whose DAPO overlong penalty runs (None: refused)
    float64_rewards: bool = False  # a float64 score column stays float64 up to the row scalar (OpenRLHF)
    unscorable: bool = False  # a null or NaN score is a row without a score, left out of the statistics (TRL)
    step_column: str | None = None  # a flag column ending each trajectory of step rows (SkyRL's is_last_step)

    def estimator(self, name: str) -> Estimator:
        """Its estimator ``name``; ``ConfigError`` otherwise (``unknown``)."""
        if name in self.estimators:
            return self.estimators[name]
        raise ConfigError(self.unknown(name))

    def unknown(self, name: str) -> str:
        """The one-line error for an estimator ``name`` it lacks, naming the estimators it has (and the convention
        that has ``name``, if one does)."""
        return f"{named('estimator') if self.name == DEFAULT else named('estimator', name)}: {unknown_in(self, name)}"

    @property
    def blocks(self) -> bool:
        return self.grouping == "blocks"

    def group_key(self, columns) -> str | None:
        """The column whose values label rows' groups as the file is read: ``prompts`` for prompt grouping when the
        file has it, else ``uid`` when it has one (blocks are cut later, and checked against the uids), else None."""
        if self.grouping == "prompt" and "prompts" in columns:
            return "prompts"
        return "uid" if "uid" in columns else None

    def reads(self, est: Estimator, columns) -> dict[str, str]:
        """The columns ``est`` reads under this convention from a file of ``columns``, each with why
        (``Estimator.reads``): blocks need no group column; prompt grouping reads ``prompts`` (a ``uid`` column
        stands in for it)."""
        reads = dict(est.reads)
        if est.groups and self.grouping != "uid":
            reads.pop("uid")
            if self.grouping == "prompt" and "uid" not in columns:
                reads["prompts"] = (f"{self.trainer} groups rows by their prompt token ids (prompts; a uid column "
                                    "stands in for them)")
        return reads


def unknown_in(convention: Convention, name: str) -> str:
    """Why ``name`` is not one of ``convention``'s estimators, with the closest of its names or the convention
    that has it."""
    names = list(convention.estimators)
    close = closest(name, names)
    elsewhere = [c.name for c in CONVENTIONS.values() if name in c.estimators and c is not convention]
    where = ("" if convention.name == DEFAULT else
             f" of {named('convention', convention.name)} ({convention.trainer} {convention.version})")
    text = f"unknown estimator '{name}'{where}; " + (f"did you mean {close}?" if close else f"choose one of {', '.join(names)}")
    if elsewhere and not close:
        text += f" ({name} is an estimator of {named('convention')} {', '.join(elsewhere)})"
    return text


def _outcome(name: str, row_advantage: str, *, summary: str, baseline: str, singleton: str, family: str = "group",
             settings: tuple[str, ...] = (), impl: str = "scalar:from_rows", explain: str = "derivation:by_group",
             **declared) -> Estimator:
    """A trainer's outcome estimator: one scalar per row from ``row_advantage``, at the row's actor tokens (or
    as ``impl`` spreads it over them)."""
    return Estimator(name, impl, (), needs=("group_index", "groups", "row_advantage"), family=family,
                     whiten=declared.pop("whiten", False), baseline=baseline, observation_credit=_GROUP_CREDIT,
                     singleton=singleton, summary=summary, explain=explain, settings=settings,
                     row_advantage=row_advantage, **declared)


def _openrlhf(name: str, row_advantage: str, **declared) -> Estimator:
    """An OpenRLHF estimator: its row scalar at the last action token, KL per token, cumulative returns."""
    declared.setdefault("impl", "openrlhf:cumulative_returns")
    return _outcome(name, row_advantage, explain="openrlhf:explain", **declared)


def _stepwise(est: Estimator) -> Estimator:
    """``est`` reading its rows' trajectory totals (``session_total``) where rows are steps (``step_column``)."""
    return replace(est, needs=(*est.needs, "session_total"))


CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    Convention("verl", "verl", "0.9.1", "verl/trainer/ppo/core_algos.py (rladv's reference)", "uid", "reward",
               ESTIMATORS, overlong="verl"),
    Convention(
        "trl", "TRL", "1.16.0", "trl/trainer/grpo_trainer.py GRPOTrainer._generate_and_score_completions", "blocks",
        "loss", {e.name: e for e in (
            _outcome("grpo", "trl:grpo_rows", settings=("scale_rewards",),
                     summary="(R - block mean) / (nanstd + 1e-4); --scale-rewards group|batch|none",
                     baseline="mean of the block of --group-size rows (TRL's num_generations)",
                     singleton="advantage 0 (one generation: std 0, R - mean = 0)"),
        )}, unscorable=True),
    Convention(
        "openrlhf", "OpenRLHF", "0.11.2", "openrlhf/trainer/ppo_utils/experience_maker.py "
        "compute_advantages_and_returns", "blocks", "token", {e.name: e for e in (
            _openrlhf("group_norm", "openrlhf:group_norm_rows",
                      summary="(R - block mean) / (std + 1e-9), then cumulative per-token returns (KL per token)",
                      baseline="mean of the block of --group-size rows (n_samples_per_prompt)",
                      singleton="NaN (torch's std of one value): rladv stops"),
            _openrlhf("rloo", "openrlhf:rloo_rows", family="leave-one-out",
                      summary="R - (block sum - R) / (n - 1), then cumulative per-token returns",
                      baseline="mean of the other rows of the block", singleton="division by 0: rladv stops"),
            _openrlhf("dr_grpo", "openrlhf:dr_grpo_rows",
                      summary="R - block mean, then cumulative per-token returns",
                      baseline="mean of the block of --group-size rows", singleton="advantage 0"),
            _openrlhf("reinforce_baseline", "openrlhf:dr_grpo_rows", family="group+whiten", whiten=True,
                      biased_whitening=True, settings=("norm_adv_by_std",),
                      summary="R - block mean, cumulative per-token returns, whitened over the batch (biased var; "
                      "--no-norm-adv-by-std: centred only)",
                      baseline="mean of the block, then batch whitening", singleton="advantage 0 before whitening"),
            _openrlhf("reinforce", "openrlhf:reinforce_rows", impl="openrlhf:discounted_returns", family="reward-to-go",
                      whiten=True, biased_whitening=True, settings=("gamma", "norm_adv_by_std"),
                      summary="discounted returns of R (--gamma) and KL per token, whitened over the batch "
                      "(--no-norm-adv-by-std: centred only)",
                      baseline="none (batch whitening, biased variance)", singleton="not grouped"),
            _openrlhf("flash_reinforce", "openrlhf:flash_reinforce_rows", family="batch",
                      summary="R - batch mean, then cumulative per-token returns",
                      baseline="mean of the whole batch", singleton="not grouped"),
        )}, kl_modes=("k1", "k2", "k3"), order_column="index", overlong="openrlhf", float64_rewards=True),
    Convention(
        "nemo_rl", "NeMo-RL", "0.6.0 (7ea279a)", "nemo_rl/algorithms/advantage_estimator.py GRPOAdvantageEstimator",
        "prompt", "loss", {e.name: e for e in (
            _outcome("grpo", "nemo_rl:grpo_rows", family="leave-one-out", settings=("norm_adv_by_std", "leave_one_out"),
                     summary="(R - b) / (std + 1e-6) where std > 0; b, std over the other rows of the prompt",
                     baseline="leave-one-out mean of the prompt's other rows (--no-leave-one-out: all rows)",
                     singleton="advantage 0 (baseline = the row's own reward)"),
        )}, stop_properly_replaces=False),
    Convention(
        "skyrl", "SkyRL", "0.3.0", "skyrl/backends/skyrl_train/utils/ppo_utils.py (registered estimators)", "uid",
        "loss", {e.name: e for e in (
            replace(ESTIMATORS["grpo"], folds_sessions=False),
            _stepwise(replace(ESTIMATORS["rloo"], impl="skyrl:rloo", singleton="advantage 0",
                              summary="(R_i - mean_g) * n/(n-1); singletons get 0")),
            _stepwise(ESTIMATORS["maxrl"]),
        )}, step_column="is_last_step"),
)}


def get_convention(name: str) -> Convention:
    """The convention ``name``; ``ConfigError`` otherwise."""
    if name not in CONVENTIONS:
        raise ConfigError(f"{named('convention')}: {unknown_convention(name)}")
    return CONVENTIONS[name]


def unknown_convention(name: str) -> str:
    """Why ``name`` is not a convention, with the one it most likely means, or the list of them."""
    close = closest(name, list(CONVENTIONS))
    return f"unknown convention '{name}'; " + (f"did you mean {close}?" if close else
                                                f"choose one of {', '.join(CONVENTIONS)}")
