"""The options the commands share: the pipeline's settings (``Config`` fields, in --help's panels), the dataset
argument, and the choices. Every option that takes a value names it (``--gamma FLOAT``); a flag names none."""
from __future__ import annotations

from enum import Enum
from inspect import Parameter
from inspect import signature as pysignature
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from ..estimators.conventions import CONVENTIONS
from ..estimators.registry import ESTIMATORS


class ScaleRewards(str, Enum):
    group = "group"
    batch = "batch"
    none = "none"


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class MaskMode(str, Enum):
    carry = "carry"
    reset = "reset"


class KLCtrl(str, Enum):
    fixed = "fixed"
    adaptive = "adaptive"


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class ISLevel(str, Enum):
    token = "token"
    sequence = "sequence"


class LogFormat(str, Enum):  # io.importers.FORMATS
    verl_jsonl = "verl-jsonl"
    nemo_rl = "nemo-rl"
    trl = "trl"
    slime = "slime"
    prime_rl = "prime-rl"
    areal = "areal"


class FailOn(str, Enum):
    never = "never"
    warn = "warn"
    fail = "fail"


def choices(kind: type[Enum]) -> str:
    """``a|b|c``: the values an enum option takes, as its value's name in the help."""
    return "|".join(member.value for member in kind)


def path(value: str) -> Path:
    """A path option's or argument's value; an empty one is refused (``Path("")`` is the current folder)."""
    if isinstance(value, Path):
        return value
    if not value:
        raise typer.BadParameter("an empty path names no file")
    return Path(value)


Datasets = Annotated[list[Path], typer.Argument(
    parser=path, metavar="DATASET", help="Parquet file(s), folder(s) of *.parquet or quoted glob(s), read as one dataset.")]

ESTIMATOR_PANEL = "Estimator settings"
SHAPING_PANEL = "Reward shaping (before the estimator)"
CORRECTION_PANEL = "Rollout correction (rejection and importance weights)"
RUN_PANEL = "Execution"
WEIGHT_PANEL = "Token weights (the trainer's loss aggregation, docs/weights.md)"

FailOnOption = Annotated[FailOn, typer.Option(
    metavar="warn|fail", help="Exit 1 when the verdict is this or worse (the outputs are written either way); "
    "default: never.", rich_help_panel=RUN_PANEL)]

GroupsOut = Annotated[Optional[Path], typer.Option(
    parser=path, metavar="PATH", help="Also write the verdict's table of groups (uid, size, score mean/std, signal "
    "share, cause) as Parquet here (docs/debugging.md).")]
RowsOut = Annotated[Optional[Path], typer.Option(
    parser=path, metavar="PATH", help="Also write the verdict's table of rows (file, row, uid, totals, tokens, "
    "advantage mean/min/max, cause) as Parquet here.")]

def _names(of: Callable[[], list[str]]) -> Callable[[str], list[str]]:
    """Shell completion (``rladv --install-completion``) of an option's value among the names ``of()`` gives."""
    return lambda incomplete: sorted(n for n in dict.fromkeys(of()) if n.startswith(incomplete))


def _estimator_names() -> list[str]:
    return [*ESTIMATORS, *(n for c in CONVENTIONS.values() for n in c.estimators)]


def _loss_modes() -> list[str]:
    from ..loss.modes import AGGREGATIONS

    return [mode for a in AGGREGATIONS.values() for mode in a.modes]


def _kl_modes() -> list[str]:
    from ..config.settings import KL_MODES

    return [*KL_MODES, *(f"{m}+" for m in KL_MODES)]


Estimator = Annotated[Optional[str], typer.Option(
    autocompletion=_names(_estimator_names), metavar="NAME",
    help=f"Advantage estimator, by its trainer's name; verl's and rladv's: {', '.join(ESTIMATORS)} "
    "(rladv estimators [--convention NAME] describes them; or from --config, whose default is gae).")]
VerlConfig = Annotated[Optional[Path], typer.Option(
    "--config", parser=path, metavar="YAML", help="A verl trainer YAML (or its algorithm: section); flags given "
    "here win.")]
Convention = Annotated[str, typer.Option(
    autocompletion=_names(lambda: list(CONVENTIONS)), metavar="NAME",
    help=f"Follow this trainer's rules: {', '.join(CONVENTIONS)} (grouping, estimators, epsilons, "
    "KL placement; docs/conventions.md).", rich_help_panel=ESTIMATOR_PANEL)]
GroupSize = Annotated[Optional[int], typer.Option(
    metavar="N", help="trl, openrlhf: rows per group, cut as consecutive blocks in file order (default: the uid "
    "groups' common size).", rich_help_panel=ESTIMATOR_PANEL)]
ScaleRewardsOption = Annotated[ScaleRewards, typer.Option(
    metavar=choices(ScaleRewards), help="trl grpo: divide by the group's std, the batch's, or not (TRL's "
    "scale_rewards).", rich_help_panel=ESTIMATOR_PANEL)]
LeaveOneOut = Annotated[bool, typer.Option(
    "--leave-one-out/--no-leave-one-out", help="nemo_rl grpo, grpo_loo: baseline and std over the other samples "
    "of the prompt.", rich_help_panel=ESTIMATOR_PANEL)]
Gamma = Annotated[float, typer.Option(metavar="FLOAT", help="Discount factor.", rich_help_panel=ESTIMATOR_PANEL)]
Lam = Annotated[float, typer.Option(metavar="FLOAT", help="GAE lambda.", rich_help_panel=ESTIMATOR_PANEL)]
NormAdvByStd = Annotated[bool, typer.Option(
    "--norm-adv-by-std/--no-norm-adv-by-std", help="grpo: divide by the group std (off: Dr.GRPO).",
    rich_help_panel=ESTIMATOR_PANEL)]
Epsilon = Annotated[float, typer.Option(metavar="FLOAT", help="grpo: added to the group std.",
                                        rich_help_panel=ESTIMATOR_PANEL)]
RppMaskMode = Annotated[MaskMode, typer.Option(
    metavar=choices(MaskMode), help="reinforce_plus_plus at mask-0 positions: carry the return through (verl "
    "0.9.1) or reset it (verl before 0.9, the chapter).", rich_help_panel=ESTIMATOR_PANEL)]
KLCoef = Annotated[float, typer.Option(metavar="FLOAT", help="KL-in-reward coefficient; 0 turns KL shaping off.",
                                       rich_help_panel=SHAPING_PANEL)]
KLPenalty = Annotated[str, typer.Option(autocompletion=_names(_kl_modes), metavar="MODE", help="KL estimate: kl|k1, abs, mse|k2, low_var_kl|k3, or "
                                        "MODE+.", rich_help_panel=SHAPING_PANEL)]
KLCtrlOption = Annotated[KLCtrl, typer.Option(metavar=choices(KLCtrl), help="KL coefficient controller.",
                                              rich_help_panel=SHAPING_PANEL)]
KLTarget = Annotated[float, typer.Option(metavar="FLOAT", help="Adaptive controller: target KL.",
                                         rich_help_panel=SHAPING_PANEL)]
KLHorizon = Annotated[int, typer.Option(metavar="N", help="Adaptive controller: horizon.",
                                        rich_help_panel=SHAPING_PANEL)]
RolloutRS = Annotated[Optional[str], typer.Option(
    metavar="OPTIONS", help="Rollout rejection options, verl's string (e.g. token_k1,seq_max_k2).",
    rich_help_panel=CORRECTION_PANEL)]
RolloutRSThreshold = Annotated[Optional[str], typer.Option(
    metavar="SPEC", help="Rejection thresholds, verl's string (e.g. 0.5_2.0,2.5).", rich_help_panel=CORRECTION_PANEL)]
RolloutIS = Annotated[Optional[ISLevel], typer.Option(
    metavar=choices(ISLevel), help="Importance weights per token or per sequence.", rich_help_panel=CORRECTION_PANEL)]
RolloutISThreshold = Annotated[str, typer.Option(
    metavar="SPEC", help="IS truncation (a number) or IcePop band lo_hi.", rich_help_panel=CORRECTION_PANEL)]
RolloutISBatchNormalize = Annotated[bool, typer.Option(
    "--rollout-is-batch-normalize/--no-rollout-is-batch-normalize", help="Divide IS weights by their batch mean.",
    rich_help_panel=CORRECTION_PANEL)]
OverlongBufferLen = Annotated[Optional[int], typer.Option(
    metavar="N", help="DAPO overlong shaping: buffer length (turns it on).", rich_help_panel=SHAPING_PANEL)]
OverlongPenaltyFactor = Annotated[float, typer.Option(
    metavar="FLOAT", help="DAPO overlong shaping: penalty at --max-resp-len.", rich_help_panel=SHAPING_PANEL)]
MaxRespLen = Annotated[Optional[int], typer.Option(
    metavar="N", help="DAPO overlong shaping: maximum response length.", rich_help_panel=SHAPING_PANEL)]
ToolRewardCoef = Annotated[Optional[float], typer.Option(
    metavar="FLOAT", help="Add this times the sum of a row's tool_rewards to its score (verl never adds them).",
    rich_help_panel=SHAPING_PANEL)]
RewardComponents = Annotated[Optional[str], typer.Option(
    metavar="COLUMNS", help="gdpo: comma-separated float columns of reward components.", rich_help_panel=ESTIMATOR_PANEL)]
RewardWeights = Annotated[Optional[str], typer.Option(
    metavar="WEIGHTS", help="gdpo: comma-separated weights, one per component.", rich_help_panel=ESTIMATOR_PANEL)]
class NormLevel(str, Enum):
    group = "group"
    batch = "batch"
    none = "none"


MeanLevel = Annotated[NormLevel, typer.Option(
    metavar=choices(NormLevel), help="grpo_norm: subtract the mean of the row's group, of its batch, or nothing.",
    rich_help_panel=ESTIMATOR_PANEL)]
StdLevel = Annotated[NormLevel, typer.Option(
    metavar=choices(NormLevel), help="grpo_norm: divide by the std of the row's group, of its batch (+ --epsilon), "
    "or not.", rich_help_panel=ESTIMATOR_PANEL)]
PassK = Annotated[int, typer.Option(
    "--k", metavar="N", help="pkpo, passk_analytic: the k of pass@k; every group needs at least N rows.",
    rich_help_panel=ESTIMATOR_PANEL)]
VapoAlpha = Annotated[float, typer.Option(
    metavar="FLOAT", help="vapo: policy lambda 1 - 1/(FLOAT * valid tokens) per row (VAPO's 0.05).",
    rich_help_panel=ESTIMATOR_PANEL)]
ValueLam = Annotated[float, typer.Option(
    metavar="FLOAT", help="vapo: the GAE lambda of the returns (the critic's target).", rich_help_panel=ESTIMATOR_PANEL)]
RewardScale = Annotated[float, typer.Option(
    metavar="FLOAT", help="Each row's score becomes (score + --reward-bias) * FLOAT (AReaL's reward_scaling).",
    rich_help_panel=SHAPING_PANEL)]
RewardBias = Annotated[float, typer.Option(
    metavar="FLOAT", help="Added to each row's score before --reward-scale (AReaL's reward_bias).",
    rich_help_panel=SHAPING_PANEL)]
RewardClip = Annotated[Optional[float], typer.Option(
    metavar="C", help="Clamp each row's total score to [-C, C], after scale and bias (AReaL's reward_clip).",
    rich_help_panel=SHAPING_PANEL)]
AdvClip = Annotated[Optional[float], typer.Option(
    metavar="C", help="Clamp the final advantages to [-C, C] (ROLL's advantage_clip); returns are left as they are.",
    rich_help_panel=SHAPING_PANEL)]
AdvClipLow = Annotated[Optional[float], typer.Option(
    metavar="FLOAT", help="Raise the final advantages to at least FLOAT (NeMo-RL's advantage_clip_low; --adv-clip C "
    "is -C and C).", rich_help_panel=SHAPING_PANEL)]
AdvClipHigh = Annotated[Optional[float], typer.Option(
    metavar="FLOAT", help="Lower the final advantages to at most FLOAT (NeMo-RL's advantage_clip_high).",
    rich_help_panel=SHAPING_PANEL)]
StopProperlyPenaltyCoef = Annotated[Optional[float], typer.Option(
    metavar="C", help="Rows whose truncated column is true: score times C for C in [0, 1], replaced by a negative C "
    "(OpenRLHF's ProRL stop-properly penalty).", rich_help_panel=SHAPING_PANEL)]
BatchKey = Annotated[Optional[str], typer.Option(
    metavar="COLUMN", help="Column whose values split the dataset into independent batches (training steps); "
    "default: the data's step column when it has one; none: one batch.",
    rich_help_panel=ESTIMATOR_PANEL)]
PadWidth = Annotated[Optional[int], typer.Option(
    metavar="N", help="Sum row totals as verl does in a batch padded to at least N positions (inspect --export "
    "writes it for a group taken out of a larger batch).", rich_help_panel=ESTIMATOR_PANEL)]
Where = Annotated[Optional[str], typer.Option(
    metavar="SQL", help="Only the rows this SQL predicate over the input's columns keeps, e.g. \"step >= 100 AND "
    "data_source = 'gsm8k'\" (polars evaluates it in the Parquet scan; groups form after it).",
    rich_help_panel=RUN_PANEL)]
Columns = Annotated[Optional[list[str]], typer.Option(
    "--column", metavar="NAME=COLUMN", help="Read your column COLUMN as the contract's NAME and write it back as "
    "COLUMN, e.g. --column uid=prompt_id (repeatable).", rich_help_panel=RUN_PANEL)]

LossAggMode = Annotated[Optional[str], typer.Option(
    autocompletion=_names(_loss_modes), metavar="MODE", help="Write token_weight, each token's coefficient on grad "
    "log pi in the trainer's loss, under its aggregation mode by its own name: verl token-mean (default), token-sum, seq-mean-token-sum, "
    "seq-mean-token-mean, seq-mean-token-sum-norm; trl dapo (default), grpo, bnpo, dr_grpo, cispo, sapo, luspo, "
    "vespo; openrlhf token-mean, seq-mean-token-mean; nemo_rl token_level, sequence_level; skyrl token_mean, "
    "token_mean_legacy, sequence_mean, seq_mean_token_sum_norm, prompt_mean.", rich_help_panel=WEIGHT_PANEL)]
MiniBatchSize = Annotated[Optional[int], typer.Option(
    metavar="N", help="Rows per optimizer step, consecutive in dataset order within a step (verl's "
    "ppo_mini_batch_size x rollout.n); default: the whole step.", rich_help_panel=WEIGHT_PANEL)]
MicroBatchSize = Annotated[Optional[int], typer.Option(
    metavar="N", help="Rows per micro-batch (gradient accumulation); default: one micro-batch per mini-batch.",
    rich_help_panel=WEIGHT_PANEL)]
LossScaleFactor = Annotated[Optional[float], typer.Option(
    metavar="F", help="The constant length normaliser: verl's loss_scale_factor (seq-mean-token-sum-norm), TRL's "
    "max_completion_length (dr_grpo, default 512), SkyRL's max_seq_len (seq_mean_token_sum_norm).",
    rich_help_panel=WEIGHT_PANEL)]
EpsilonHigh = Annotated[Optional[float], typer.Option(
    metavar="FLOAT", help="trl cispo: TRL's epsilon_high, which caps the IS ratio (default its epsilon, 0.2).",
    rich_help_panel=WEIGHT_PANEL)]
Thresholds = Annotated[Optional[list[str]], typer.Option(
    "--threshold", metavar="CODE=WARN[,FAIL]", help="The verdict's level of a check at this measure or above, over "
    "docs/debugging.md's defaults, e.g. --threshold all_equal_group=0.3,0.8 (off: never; repeatable).",
    rich_help_panel=RUN_PANEL)]

SETTINGS_OPTIONS = (  # (Config field, option, default) after --config, in this order, on every command that computes
    ("convention", Convention, "verl"), ("group_size", GroupSize, None),
    ("scale_rewards", ScaleRewardsOption, ScaleRewards.group), ("leave_one_out", LeaveOneOut, True),
    ("gamma", Gamma, 1.0), ("lam", Lam, 1.0), ("norm_adv_by_std", NormAdvByStd, True), ("epsilon", Epsilon, 1e-6),
    ("rpp_mask_mode", RppMaskMode, MaskMode.carry), ("kl_coef", KLCoef, 0.0), ("kl_penalty", KLPenalty, "kl"),
    ("kl_ctrl", KLCtrlOption, KLCtrl.fixed), ("kl_target", KLTarget, 0.1), ("kl_horizon", KLHorizon, 10000),
    ("rollout_rs", RolloutRS, None), ("rollout_rs_threshold", RolloutRSThreshold, None),
    ("rollout_is", RolloutIS, None), ("rollout_is_threshold", RolloutISThreshold, "2.0"),
    ("rollout_is_batch_normalize", RolloutISBatchNormalize, False), ("overlong_buffer_len", OverlongBufferLen, None),
    ("overlong_penalty_factor", OverlongPenaltyFactor, 1.0), ("max_resp_len", MaxRespLen, None),
    ("tool_reward_coef", ToolRewardCoef, None), ("reward_components", RewardComponents, None),
    ("reward_weights", RewardWeights, None),
    ("mean_level", MeanLevel, NormLevel.group), ("std_level", StdLevel, NormLevel.group), ("k", PassK, 2),
    ("vapo_alpha", VapoAlpha, 0.05), ("value_lam", ValueLam, 1.0), ("reward_scale", RewardScale, 1.0),
    ("reward_bias", RewardBias, 0.0), ("reward_clip", RewardClip, None), ("adv_clip", AdvClip, None),
    ("adv_clip_low", AdvClipLow, None), ("adv_clip_high", AdvClipHigh, None),
    ("stop_properly_penalty_coef", StopProperlyPenaltyCoef, None), ("batch_key", BatchKey, None), ("pad_width", PadWidth, None),
    ("loss_agg_mode", LossAggMode, None), ("mini_batch_size", MiniBatchSize, None),
    ("micro_batch_size", MicroBatchSize, None), ("loss_scale_factor", LossScaleFactor, None),
    ("epsilon_high", EpsilonHigh, None),
    ("where", Where, None), ("columns", Columns, None), ("thresholds", Thresholds, None),
)


def takes_settings(command: Callable) -> Callable:
    """Give a typer command every option of ``SETTINGS_OPTIONS`` right after its ``config`` parameter (typer
    reads the signature); the command receives them in ``**settings`` and reads them from ``ctx.params``."""
    signature = pysignature(command, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not Parameter.VAR_KEYWORD]
    at = [p.name for p in params].index("config") + 1
    added = [Parameter(name, Parameter.POSITIONAL_OR_KEYWORD, annotation=option, default=default)
             for name, option, default in SETTINGS_OPTIONS]
    command.__signature__ = signature.replace(parameters=params[:at] + added + params[at:])
    return command
