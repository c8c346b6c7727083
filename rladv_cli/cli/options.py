"""The options the commands share: the pipeline's settings (``Config`` fields, in --help's panels), the dataset
argument, and the choices. Every option that takes a value names it (``--gamma FLOAT``); a flag names none."""
from __future__ import annotations

from enum import Enum
from inspect import Parameter
from inspect import signature as pysignature
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from ..estimators.registry import ESTIMATORS


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

FailOnOption = Annotated[FailOn, typer.Option(
    metavar="warn|fail", help="Exit 1 when the verdict is this or worse (the outputs are written either way); "
    "default: never.", rich_help_panel=RUN_PANEL)]

GroupsOut = Annotated[Optional[Path], typer.Option(
    parser=path, metavar="PATH", help="Also write the verdict's table of groups (uid, size, score mean/std, signal "
    "share, cause) as Parquet here (docs/debugging.md).")]
RowsOut = Annotated[Optional[Path], typer.Option(
    parser=path, metavar="PATH", help="Also write the verdict's table of rows (file, row, uid, totals, tokens, "
    "advantage mean/min/max, cause) as Parquet here.")]

Estimator = Annotated[Optional[str], typer.Option(
    metavar="NAME", help=f"Advantage estimator, by verl's name: {', '.join(ESTIMATORS)} (rladv estimators "
    "describes them; or from --config, whose default is gae).")]
VerlConfig = Annotated[Optional[Path], typer.Option(
    "--config", parser=path, metavar="YAML", help="A verl trainer YAML (or its algorithm: section); flags given "
    "here win.")]
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
KLPenalty = Annotated[str, typer.Option(metavar="MODE", help="KL estimate: kl|k1, abs, mse|k2, low_var_kl|k3, or "
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
BatchKey = Annotated[Optional[str], typer.Option(
    metavar="COLUMN", help="Column whose values split the dataset into independent batches.",
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

SETTINGS_OPTIONS = (  # (Config field, option, default) after --config, in this order, on every command that computes
    ("gamma", Gamma, 1.0), ("lam", Lam, 1.0), ("norm_adv_by_std", NormAdvByStd, True), ("epsilon", Epsilon, 1e-6),
    ("rpp_mask_mode", RppMaskMode, MaskMode.carry), ("kl_coef", KLCoef, 0.0), ("kl_penalty", KLPenalty, "kl"),
    ("kl_ctrl", KLCtrlOption, KLCtrl.fixed), ("kl_target", KLTarget, 0.1), ("kl_horizon", KLHorizon, 10000),
    ("rollout_rs", RolloutRS, None), ("rollout_rs_threshold", RolloutRSThreshold, None),
    ("rollout_is", RolloutIS, None), ("rollout_is_threshold", RolloutISThreshold, "2.0"),
    ("rollout_is_batch_normalize", RolloutISBatchNormalize, False), ("overlong_buffer_len", OverlongBufferLen, None),
    ("overlong_penalty_factor", OverlongPenaltyFactor, 1.0), ("max_resp_len", MaxRespLen, None),
    ("tool_reward_coef", ToolRewardCoef, None), ("reward_components", RewardComponents, None),
    ("reward_weights", RewardWeights, None), ("batch_key", BatchKey, None), ("pad_width", PadWidth, None),
    ("where", Where, None), ("columns", Columns, None),
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
