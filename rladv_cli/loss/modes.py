"""The trainers' loss aggregation modes, by each trainer's own names (docs/weights.md).

A mode decides the per-row scale ``c_i`` in ``w_t = A_t · ρ_t · m_t · c_i``: the coefficient of token ``t`` on
``∇ log π(a_t)`` in the loss the optimizer step minimises, at the old policy (ratio 1). ``rule`` names the function
of ``loss.scale`` that computes ``c_i``; ``reads`` the settings besides ``--mini-batch-size`` that the mode reads
(the others have no effect on it). Symbols of the formulas: ``T`` the mini-batch's actor tokens, ``u_i`` the
row's, ``G`` the mini-batch's configured rows, ``B`` a micro-batch's rows, ``GA`` the micro-batches of a
mini-batch, ``F`` ``--loss-scale-factor``. No torch and no numpy here: the settings and the help read these tables.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..config.flags import named
from ..errors import ConfigError
from ..estimators.registry import closest

KNOBS = ("micro_batch_size", "loss_scale_factor", "epsilon_high")  # read by some modes only


@dataclass(frozen=True)
class LossMode:
    """One mode: its ``rule`` in ``loss.scale``, the ``formula`` of ``c_i``, the ``reads`` of ``KNOBS``, and what
    ``--loss-scale-factor`` stands for in the trainer (``factor``: its config key) with its default (``factor_default``:
    a number, or None: the micro-batch's padded width when ``factor_required`` is False)."""

    name: str
    rule: str
    formula: str
    reads: tuple[str, ...] = ()
    factor: Optional[str] = None
    factor_default: Optional[float] = None
    factor_required: bool = False


@dataclass(frozen=True)
class Aggregation:
    """One trainer's modes: the config key that chooses them (``option``), its ``default``, where they were read
    (``source``), and the trainer's names for a mini-batch and a micro-batch (``mini``, ``micro``)."""

    convention: str
    trainer: str
    option: str
    default: str
    source: str
    mini: str
    micro: str
    modes: dict[str, LossMode] = field(default_factory=dict)

    def mode(self, name: str) -> LossMode:
        """Its mode ``name``; ``ConfigError`` naming the closest of its modes otherwise."""
        if name in self.modes:
            return self.modes[name]
        close = closest(name, list(self.modes))
        elsewhere = [a.convention for a in AGGREGATIONS.values() if name in a.modes and a is not self]
        text = (f"{named('loss_agg_mode')}: '{name}' is not a mode of {named('convention', self.convention)} "
                f"({self.trainer} {self.option}); " + (f"did you mean {close}?" if close else f"choose one of {', '.join(self.modes)}"))
        if elsewhere and not close:
            text += f" ({name} is a mode of {named('convention')} {', '.join(elsewhere)})"
        raise ConfigError(text)


def _modes(*modes: LossMode) -> dict[str, LossMode]:
    return {m.name: m for m in modes}


AGGREGATIONS: dict[str, Aggregation] = {a.convention: a for a in (
    Aggregation(
        "verl", "verl 0.9.1", "actor.loss_agg_mode", "token-mean",
        "verl/trainer/ppo/core_algos.py agg_loss; verl/workers/utils/losses.py ppo_loss (the v1 engine path)",
        "actor.ppo_mini_batch_size × rollout.n", "actor.ppo_micro_batch_size_per_gpu", _modes(
            LossMode("token-mean", "verl_token_mean", "1 / T0, T0 = the mini-batch's loss_mask tokens (before "
                     "rollout rejection: rejected tokens weigh 0 but count)"),
            LossMode("token-sum", "verl_token_sum", "1"),
            LossMode("seq-mean-token-sum", "verl_seq_mean_token_sum", "1 / G (G: configured rows, empty rows count)"),
            LossMode("seq-mean-token-mean", "verl_seq_mean_token_mean", "1 / ((u_i + 1e-8) · G)"),
            LossMode("seq-mean-token-sum-norm", "verl_seq_mean_token_sum_norm",
                     "1 / (G · F), F = --loss-scale-factor, else the micro-batch's padded width",
                     reads=("micro_batch_size", "loss_scale_factor"), factor="actor.loss_scale_factor"),
        )),
    Aggregation(
        "trl", "TRL 1.16.0", "loss_type", "dapo", "trl/trainer/grpo_trainer.py GRPOTrainer._compute_loss",
        "per_device_train_batch_size × gradient_accumulation_steps", "per_device_train_batch_size", _modes(
            LossMode("dapo", "trl_dapo", "S / (GA · max(T_step, 1)), S = micro-batches of the step (TRL's "
                     "steps_per_generation)", reads=("micro_batch_size",)),
            LossMode("grpo", "trl_grpo", "1 / (GA · B · max(u_i, 1))", reads=("micro_batch_size",)),
            LossMode("bnpo", "trl_bnpo", "1 / (GA · max(T_micro, 1))", reads=("micro_batch_size",)),
            LossMode("dr_grpo", "trl_dr_grpo", "1 / (GA · B · F), F = --loss-scale-factor (max_completion_length)",
                     reads=("micro_batch_size", "loss_scale_factor"), factor="max_completion_length",
                     factor_default=512),
            LossMode("cispo", "trl_cispo", "min(1, ε_high) · S / (GA · max(T_step, 1))",
                     reads=("micro_batch_size", "epsilon_high")),
            LossMode("sapo", "trl_grpo", "1 / (GA · B · max(u_i, 1)) (the soft gate's slope at ratio 1 is 1)",
                     reads=("micro_batch_size",)),
            LossMode("luspo", "trl_luspo", "1 / (GA · B)", reads=("micro_batch_size",)),
            LossMode("vespo", "trl_dapo", "S / (GA · max(T_step, 1)) (the gamma weight is 1 at ratio 1)",
                     reads=("micro_batch_size",)),
        )),
    Aggregation(
        "openrlhf", "OpenRLHF 0.11.2", "actor.loss_agg_mode", "token-mean",
        "openrlhf/models/loss.py PolicyLoss, aggregate_loss; openrlhf/utils/loss_utils.py",
        "train.batch_size (one optimizer step)", "train.micro_batch_size", _modes(
            LossMode("token-mean", "openrlhf_token_mean", "1 / T"),
            LossMode("seq-mean-token-mean", "openrlhf_seq_mean_token_mean",
                     "1 / ((u_i + 1e-8) · S), S = the mini-batch's rows with actor tokens"),
        )),
    Aggregation(
        "nemo_rl", "NeMo-RL 0.6.0 (7ea279a)", "loss_fn.token_level_loss", "token_level",
        "nemo_rl/algorithms/loss/loss_functions.py ClippedPGLossFn; nemo_rl/algorithms/utils.py masked_mean",
        "policy.train_global_batch_size", "policy.train_micro_batch_size", _modes(
            LossMode("token_level", "nemo_token_level", "1 / (T + 1e-8)  (token_level_loss: true)"),
            LossMode("sequence_level", "nemo_sequence_level",
                     "1 / ((u_i + 1e-8) · (G + 1e-8))  (token_level_loss: false; every row counts in G)"),
        )),
    Aggregation(
        "skyrl", "SkyRL 0.3.0", "trainer.algorithm.loss_reduction", "token_mean",
        "skyrl/backends/skyrl_train/utils/ppo_utils.py apply_loss_reduction_to_advantages_minibatch",
        "trainer.policy_mini_batch_size × n_samples_per_prompt", "trainer.micro_train_batch_size_per_gpu", _modes(
            LossMode("token_mean", "skyrl_token_mean", "1 / max(T, 1)"),
            LossMode("token_mean_legacy", "skyrl_token_mean_legacy",
                     "1 / (max(T_micro, 1) · GA)",
                     reads=("micro_batch_size",)),
            LossMode("sequence_mean", "skyrl_sequence_mean", "1 / (G · max(u_i, 1))"),
            LossMode("seq_mean_token_sum_norm", "skyrl_seq_mean_token_sum_norm",
                     "1 / (G · F), F = --loss-scale-factor (max_seq_len, required)", reads=("loss_scale_factor",),
                     factor="trainer.algorithm.max_seq_len", factor_required=True),
            LossMode("prompt_mean", "skyrl_prompt_mean",
                     "1 / (P · max(T_p, 1)), P = prompts starting in the mini-batch, T_p = their tokens in it"),
        )),
)}


def aggregation(convention: str) -> Aggregation:
    """The loss aggregation of ``convention`` (every convention has one)."""
    return AGGREGATIONS[convention]
