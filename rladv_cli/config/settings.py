"""Resolved settings of one ``rladv compute`` run (pydantic); one flat field per command-line option.

verl's rollout-correction strings are parsed (``correction``) when the settings are built, so that a bad
threshold is refused before any data is read.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Annotated, Any, Literal, Mapping, Optional, Sequence

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..contract.schema import COLUMNS, OUTPUT_COLUMNS
from ..errors import ConfigError
from ..estimators.conventions import (
    CONVENTIONS,
    DEFAULT,
    Convention,
    unknown_convention,
)
from ..estimators.registry import ESTIMATOR_SETTINGS, Estimator, names_where
from ..loss.modes import AGGREGATIONS, KNOBS, Aggregation, LossMode
from .correction import parse_rollout_is, parse_rollout_rs
from .flags import (
    CORRECTION,
    ESTIMATOR,
    RUN,
    SHAPING,
    WEIGHTS,
    Flag,
    column_names,
    comma_list,
    flag_of,
    named,
    threshold_levels,
)

INT_MAX = 2**31 - 1
KL_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
STEP_COLUMN = "step"  # the batch key when the data has it and --batch-key is not given
NO_BATCH_KEY = "none"  # --batch-key none: the whole dataset is one batch
# the contract's columns (read or written) that ``columns`` may give another name
MAPPABLE = (*COLUMNS, *(c for c in OUTPUT_COLUMNS if c not in COLUMNS), "rollout_is_weights", "session_id",
            "output_index", "prompts")


def _loss_modes() -> list[str]:
    """Every trainer's loss aggregation modes (shell completion of --loss-agg-mode)."""
    return list(dict.fromkeys(mode for a in AGGREGATIONS.values() for mode in a.modes))


class Config(BaseModel):
    """Everything that decides the numbers; defaults are verl 0.9.1's ``algorithm`` defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="rladv compute config", allow_inf_nan=False)

    estimator: str = Field(description="Advantage estimator, by its trainer's name (rladv estimators lists them)")
    convention: Annotated[str, Flag(ESTIMATOR, "NAME", choices=lambda: list(CONVENTIONS))] = Field(
        DEFAULT, description="The trainer whose rules the numbers follow: verl (0.9.1), trl, openrlhf, nemo_rl or "
        "skyrl: its grouping, estimators, epsilons and KL placement (docs/conventions.md)")
    group_size: Annotated[Optional[int], Flag(ESTIMATOR)] = Field(
        None, gt=0, le=INT_MAX, description="trl, openrlhf: rows per group, cut as consecutive blocks in file order "
        "(TRL's num_generations, OpenRLHF's n_samples_per_prompt); default: the uid groups' common size")
    scale_rewards: Annotated[Literal["group", "batch", "none"], Flag(ESTIMATOR)] = Field(
        "group", description="trl grpo: divide by the group's std, the batch's, or not at all (TRL's scale_rewards)")
    leave_one_out: Annotated[bool, Flag(ESTIMATOR)] = Field(
        True, description="nemo_rl grpo, grpo_loo: baseline and std over the row's other samples (NeMo-RL's "
        "use_leave_one_out_baseline); off: over all of them")
    gamma: Annotated[float, Flag(ESTIMATOR)] = Field(
        1.0, ge=0.0, le=1.0, description="Discount factor (gae, reinforce_plus_plus)")
    lam: Annotated[float, Flag(ESTIMATOR)] = Field(1.0, ge=0.0, le=1.0, description="GAE lambda")
    norm_adv_by_std: Annotated[bool, Flag(ESTIMATOR)] = Field(
        True, description="grpo: divide by the group std (off: Dr.GRPO)")
    epsilon: Annotated[float, Flag(ESTIMATOR)] = Field(1e-6, gt=0.0, description="grpo: added to the group std")
    rpp_mask_mode: Annotated[Literal["carry", "reset"], Flag(ESTIMATOR)] = Field(
        "carry", description="reinforce_plus_plus at mask-0 positions: carry the return through (verl 0.9.1) or "
        "reset it to 0 (verl before 0.9, the chapter)")
    kl_coef: Annotated[float, Flag(SHAPING)] = Field(
        0.0, description="A non-zero value turns on KL reward shaping (verl's use_kl_in_reward); a negative one "
        "raises the rewards of tokens that diverge")
    kl_penalty: Annotated[str, Flag(SHAPING, "MODE", choices=lambda: [*KL_MODES, *(m + "+" for m in KL_MODES)])] = (
        Field(
        "kl", description="Per-token KL estimate: kl|k1, abs, mse|k2, low_var_kl|k3, or MODE+"))
    kl_ctrl: Annotated[Literal["fixed", "adaptive"], Flag(SHAPING)] = Field(
        "fixed", description="KL coefficient controller")
    kl_target: Annotated[float, Flag(SHAPING)] = Field(0.1, description="Adaptive controller: target KL")
    kl_horizon: Annotated[int, Flag(SHAPING)] = Field(10000, le=INT_MAX, description="Adaptive controller: horizon")
    rollout_rs: Annotated[Optional[str], Flag(CORRECTION, "OPTIONS")] = Field(
        None, description="Rollout rejection options, verl's string (e.g. token_k1,seq_max_k2)")
    rollout_rs_threshold: Annotated[Optional[str], Flag(CORRECTION, "SPEC")] = Field(
        None, description="Rollout rejection thresholds, verl's string (e.g. 0.5_2.0,2.5)")
    rollout_is: Annotated[Optional[Literal["token", "sequence"]], Flag(CORRECTION)] = Field(
        None, description="Importance weights per token or per sequence")
    rollout_is_threshold: Annotated[str, Flag(CORRECTION, "SPEC")] = Field(
        "2.0", description="IS truncation threshold (a number) or IcePop band lo_hi")
    rollout_is_batch_normalize: Annotated[bool, Flag(CORRECTION)] = Field(
        False, description="Divide the IS weights by their batch mean")
    overlong_buffer_len: Annotated[Optional[int], Flag(SHAPING)] = Field(
        None, gt=0, le=INT_MAX, description="DAPO overlong shaping: buffer length (turns the stage on; needs "
        "max_resp_len)")
    overlong_penalty_factor: Annotated[float, Flag(SHAPING)] = Field(
        1.0, description="DAPO overlong shaping: penalty at max_resp_len")
    max_resp_len: Annotated[Optional[int], Flag(SHAPING)] = Field(
        None, gt=0, le=INT_MAX, description="DAPO overlong shaping: maximum response length")
    tool_reward_coef: Annotated[Optional[float], Flag(SHAPING)] = Field(
        None, description="Adds coef * sum(tool_rewards) to each row's score at its score position (score assembly, "
        "before overlong shaping); verl never adds tool rewards, so the default leaves them out")
    reward_components: Annotated[Optional[tuple[str, ...]],
                                 Flag(ESTIMATOR, "COLUMNS", typed_as=Optional[str], parse=comma_list)] = Field(
        None, description="gdpo: float columns holding per-row reward components (comma-separated)")
    reward_weights: Annotated[Optional[tuple[float, ...]],
                              Flag(ESTIMATOR, "WEIGHTS", typed_as=Optional[str], parse=comma_list)] = Field(
        None, description="gdpo: the weight of each component (comma-separated)")
    mean_level: Annotated[Literal["group", "batch", "none"], Flag(ESTIMATOR)] = Field(
        "group", description="grpo_norm: subtract the mean of the row's group, of its batch, or nothing")
    std_level: Annotated[Literal["group", "batch", "none"], Flag(ESTIMATOR)] = Field(
        "group", description="grpo_norm: divide by the std of the row's group, of its batch (+ epsilon), or not")
    k: Annotated[int, Flag(ESTIMATOR)] = Field(
        2, ge=1, le=INT_MAX, description="pkpo, passk_analytic: the k of pass@k (every group needs k rows)")
    vapo_alpha: Annotated[float, Flag(ESTIMATOR)] = Field(
        0.05, gt=0.0, description="vapo: policy lambda 1 - 1/(alpha * valid tokens) per row (VAPO's 0.05)")
    value_lam: Annotated[float, Flag(ESTIMATOR)] = Field(
        1.0, ge=0.0, le=1.0, description="vapo: the GAE lambda of the returns (the critic's target)")
    reward_scale: Annotated[float, Flag(SHAPING)] = Field(
        1.0, description="Each row's score becomes (score + reward_bias) * reward_scale (AReaL's reward_scaling), "
        "after overlong shaping")
    reward_bias: Annotated[float, Flag(SHAPING)] = Field(
        0.0, description="Added to each row's score before reward_scale (AReaL's reward_bias)")
    reward_clip: Annotated[Optional[float], Flag(SHAPING, "C")] = Field(
        None, gt=0.0, description="The row's total score is clamped to [-C, C] after scale and bias (AReaL's "
        "reward_clip)")
    adv_clip: Annotated[Optional[float], Flag(SHAPING, "C")] = Field(
        None, gt=0.0, description="The final advantages are clamped to [-C, C] (ROLL's advantage_clip); returns are "
        "not")
    adv_clip_low: Annotated[Optional[float], Flag(SHAPING)] = Field(
        None, description="The final advantages are raised to at least this (NeMo-RL's advantage_clip_low; adv_clip "
        "C is -C and C); returns are not")
    adv_clip_high: Annotated[Optional[float], Flag(SHAPING)] = Field(
        None, description="The final advantages are lowered to at most this (NeMo-RL's advantage_clip_high); returns "
        "are not")
    stop_properly_penalty_coef: Annotated[Optional[float], Flag(SHAPING, "C")] = Field(
        None, description="Rows with truncated true: score times C for C in [0, 1], or replaced by a negative C "
        "(OpenRLHF's ProRL stop-properly penalty; reads the truncated column)")
    loss_agg_mode: Annotated[Optional[str], Flag(WEIGHTS, "MODE", choices=_loss_modes)] = Field(
        None, description="The trainer's loss aggregation, by its own name (verl: token-mean, token-sum, "
        "seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm; trl: dapo, grpo, bnpo, dr_grpo, cispo, "
        "sapo, luspo, vespo; openrlhf: token-mean, seq-mean-token-mean; nemo_rl: token_level, sequence_level; "
        "skyrl: token_mean, token_mean_legacy, sequence_mean, seq_mean_token_sum_norm, prompt_mean): writes "
        "token_weight, each token's coefficient on grad log pi in the loss")
    mini_batch_size: Annotated[Optional[int], Flag(WEIGHTS)] = Field(
        None, gt=0, le=INT_MAX, description="loss_agg_mode: rows per optimizer step (verl's ppo_mini_batch_size x "
        "rollout.n), consecutive in dataset order within a step; default: the whole step")
    micro_batch_size: Annotated[Optional[int], Flag(WEIGHTS)] = Field(
        None, gt=0, le=INT_MAX, description="loss_agg_mode: rows per micro-batch (gradient accumulation); "
        "default: one micro-batch per mini-batch")
    loss_scale_factor: Annotated[Optional[float], Flag(WEIGHTS, "F")] = Field(
        None, gt=0.0, description="loss_agg_mode: the constant length normaliser (verl's loss_scale_factor, "
        "TRL's max_completion_length, default 512, SkyRL's max_seq_len)")
    epsilon_high: Annotated[Optional[float], Flag(WEIGHTS)] = Field(
        None, gt=0.0, description="trl cispo: TRL's epsilon_high, the clamp of the IS ratio (default its epsilon, "
        "0.2)")
    batch_key: Annotated[Optional[str], Flag(ESTIMATOR, "COLUMN")] = Field(
        None, description="Column whose values split the dataset into independent batches (training steps); "
        "default: the data's step column when it has one; none: one batch (docs/compute.md)")
    pad_width: Annotated[Optional[int], Flag(ESTIMATOR)] = Field(
        None, gt=0, le=1 << 20,
        description="Sum each row's total as verl does in a batch padded to at least this many positions (verl "
        "pads a batch to its longest response, and the padded width decides how float32 totals round): what "
        "rladv inspect --export writes for a group taken out of a batch with longer responses")
    where: Annotated[Optional[str], Flag(RUN, "SQL")] = Field(
        None, description="A SQL predicate over the input's columns (polars' SQL), e.g. \"step >= 100 AND "
        "data_source = 'gsm8k'\": only the rows it keeps are read, and groups and batch statistics are formed "
        "over them")
    columns: Annotated[Optional[dict[str, str]], Flag(RUN, "NAME=COLUMN", name="--column",
                                                      typed_as=Optional[list[str]], parse=column_names)] = Field(
        None, description="The files' own names of contract columns (contract name -> column, e.g. uid=prompt_id; "
        "one --column each): read under the contract's names, written back under the files'")
    thresholds: Annotated[Optional[dict[str, tuple[Optional[float], Optional[float]]]],
                          Flag(RUN, "CODE=WARN[,FAIL]", name="--threshold", typed_as=Optional[list[str]],
                               parse=threshold_levels, numbers=False)] = Field(
        None, description="The verdict's level of a check at this measure or above, code -> (warn, fail), over "
        "docs/debugging.md's defaults, e.g. all_equal_group=0.3,0.8 (off: never; one --threshold each); they "
        "change the verdict, never the numbers")
    chunk_rows: Annotated[int, Flag(RUN, numbers=False, shared=False)] = Field(
        512, gt=0, le=INT_MAX, description="Rows held in memory at once; results do not depend on it")
    cache_mib: Annotated[int, Flag(RUN, "MIB", numbers=False, shared=False)] = Field(
        512, ge=0, le=1 << 30,
        description="A dataset whose decoded columns fit this many MiB is read once and kept in memory for every "
        "pass; a larger one is read again by each pass (0: always)")
    device: Annotated[Literal["auto", "cpu", "cuda"], Flag(RUN, numbers=False, shared=False)] = Field(
        "auto", description="Where the arrays are: cpu = numpy (torch is not imported), cuda = torch on the GPU; "
        "auto = cuda when available")
    threads: Annotated[int, Flag(RUN, numbers=False, shared=False)] = Field(
        1, ge=1, le=1024,
        description="Torch CPU threads for a run on cuda (the kernels are memory-bound; on small CPUs the thread "
        "pool's wake-up cost exceeds the gain); a run on cpu computes with numpy, on one thread")

    @field_validator("batch_key")
    @classmethod
    def _names_a_column(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not v.strip():
            raise ValueError(f"{v!r} names no column; give the column whose values split the dataset into batches")
        return v

    @field_validator("columns")
    @classmethod
    def _mappable(cls, v: Optional[dict[str, str]]) -> Optional[dict[str, str]]:
        if v is None:
            return v
        for name, column in v.items():
            if name not in MAPPABLE:
                close = difflib.get_close_matches(name, MAPPABLE, n=1)
                hint = f"did you mean {close[0]}?" if close else f"one of {', '.join(MAPPABLE)}"
                raise ValueError(f"{name}={column}: {name} is not a column rladv reads or writes; {hint}")
            if not column or not column.strip():
                raise ValueError(f"{name}={column!r} names no column; write CONTRACT_NAME=YOUR_COLUMN")
        twice = next((c for c in v.values() if list(v.values()).count(c) > 1), None)
        if twice is not None:
            raise ValueError(f"maps {twice} to two columns; each of your columns is one contract column")
        return v

    @field_validator("thresholds")
    @classmethod
    def _known_checks(cls, v: Optional[dict]) -> Optional[dict]:
        from ..report.verdict import check_thresholds  # numpy's import, only for a run that sets thresholds

        check_thresholds(v or {})
        return v

    @field_validator("reward_components")
    @classmethod
    def _components(cls, v: Optional[tuple[str, ...]]) -> Optional[tuple[str, ...]]:
        if v is None:
            return v
        if not v or not all(name.strip() for name in v):
            raise ValueError(f"names no column; give comma-separated float columns, got {','.join(v)!r}")
        twice = next((name for name in v if v.count(name) > 1), None)
        if twice is not None:
            raise ValueError(f"names column {twice!r} twice; each reward component is one column")
        return v

    @field_validator("kl_penalty")
    @classmethod
    def _known_kl_mode(cls, v: str) -> str:
        if v.removesuffix("+") not in KL_MODES:
            raise ValueError(
                f"'{v}' is not a KL estimate verl implements; choose one of {', '.join(KL_MODES)} (optionally with +)"
            )
        return v

    @field_validator("convention")
    @classmethod
    def _known_convention(cls, v: str) -> str:
        if v not in CONVENTIONS:
            raise ValueError(unknown_convention(v))
        return v

    @model_validator(mode="after")
    def _known_estimator(self) -> "Config":
        conv = self.conv
        if self.estimator not in conv.estimators:
            raise ValueError(conv.unknown(self.estimator))
        return self

    @model_validator(mode="after")
    def _within_convention(self) -> "Config":
        """Settings the convention's trainer has no counterpart for are refused (they could not change its numbers
        as that trainer would)."""
        conv = self.conv
        if conv.name == DEFAULT:
            return self
        what = f"{named('convention', conv.name)} ({conv.trainer} {conv.version})"
        for name in ("rollout_rs", "rollout_is", "overlong_buffer_len", "reward_components"):
            if name == "overlong_buffer_len" and conv.overlong:  # the trainer's own penalty (Convention.overlong)
                continue
            if getattr(self, name, None) is not None:
                raise ValueError(f"{named(name)} is a stage of verl's pipeline, which {what} does not run; use "
                                 f"{named('convention', DEFAULT)}")
        coef = self.stop_properly_penalty_coef
        if coef is not None and coef < 0 and not conv.stop_properly_replaces:
            raise ValueError(f"{named('stop_properly_penalty_coef', coef)}: {conv.trainer} only scales a truncated "
                             f"row's reward, by a coefficient in [0, 1] (it asserts so), under {what}")
        if self.use_kl and conv.kl == "loss":
            raise ValueError(f"{named('kl_coef')}: {conv.trainer} puts KL in the loss, never in the advantage, so it "
                             f"has no counterpart under {what}")
        if self.use_kl and conv.kl == "token":
            if self.kl_coef < 0:
                raise ValueError(f"{named('kl_coef', self.kl_coef)}: {conv.trainer} treats a coefficient <= 0 as 0")
            if self.kl_ctrl != "fixed":
                raise ValueError(f"{named('kl_ctrl', self.kl_ctrl)}: rladv follows {conv.trainer}'s KL only with a "
                                 "fixed coefficient")
            if self.kl_penalty not in conv.kl_modes:
                raise ValueError(f"{named('kl_penalty', self.kl_penalty)}: {conv.trainer}'s KL estimates are "
                                 f"{', '.join(conv.kl_modes)}")
        return self

    @model_validator(mode="after")
    def _known_loss_mode(self) -> "Config":
        if self.loss_agg_mode is not None:
            self.aggregation.mode(self.loss_agg_mode)  # ConfigError naming the closest mode
        if self.mini_batch_size and self.micro_batch_size and self.mini_batch_size % self.micro_batch_size:
            raise ValueError(f"{named('micro_batch_size', self.micro_batch_size)} does not divide "
                             f"{named('mini_batch_size', self.mini_batch_size)} (a mini-batch is a whole number of "
                             "micro-batches)")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        if self.kl_ctrl == "adaptive" and self.use_kl:  # a negative coefficient shapes (and steps) too
            if self.kl_horizon <= 0:
                raise ValueError(f"{named('kl_horizon')} must be > 0 for the adaptive controller")
            if self.kl_target == 0:
                raise ValueError(f"{named('kl_target')} must not be 0 for the adaptive controller (verl divides by it)")
        if (self.rollout_rs is None) != (self.rollout_rs_threshold is None):
            raise ValueError(f"{named('rollout_rs')} and {named('rollout_rs_threshold')} go together")
        # verl's strings, parsed now so that a bad one is refused before any data is read (ConfigError)
        if self.rollout_rs is not None:
            parse_rollout_rs(self.rollout_rs, self.rollout_rs_threshold)
        if self.rollout_is is not None:
            parse_rollout_is(self.rollout_is, self.rollout_is_threshold, self.rollout_is_batch_normalize)
        if self.overlong_buffer_len is not None:
            if self.max_resp_len is None:
                raise ValueError(f"{named('overlong_buffer_len')} needs {named('max_resp_len')} (verl asserts "
                                 "max_resp_len is given)")
            if self.max_resp_len < self.overlong_buffer_len:
                raise ValueError(f"{named('max_resp_len')} must be >= {named('overlong_buffer_len')} (verl asserts it)")
        if self.reward_weights is not None:
            if self.reward_components is None:
                raise ValueError(f"{named('reward_weights')} needs {named('reward_components')}")
            if len(self.reward_weights) != len(self.reward_components):
                raise ValueError(f"{named('reward_weights')} has {len(self.reward_weights)} values for "
                                 f"{len(self.reward_components)} {named('reward_components')}")
        if self.reward_components is not None and not self.spec.components:
            readers = names_where(lambda e: e.components)
            raise ValueError(f"{named('reward_components')} is read by {', '.join(readers)} only; use "
                             f"{named('estimator', readers[0])}")
        if self.adv_clip is not None and (self.adv_clip_low is not None or self.adv_clip_high is not None):
            raise ValueError(f"{named('adv_clip')} C is {named('adv_clip_low')} -C and {named('adv_clip_high')} C; "
                             "give one form or the other")
        if self.adv_clip_low is not None and self.adv_clip_high is not None and self.adv_clip_low > self.adv_clip_high:
            raise ValueError(f"{named('adv_clip_low', self.adv_clip_low)} is above "
                             f"{named('adv_clip_high', self.adv_clip_high)}")
        if self.stop_properly_penalty_coef is not None and self.stop_properly_penalty_coef > 1:
            raise ValueError(f"{named('stop_properly_penalty_coef')} must be in [0, 1] (a scale) or negative (a "
                             f"replacement score), got {self.stop_properly_penalty_coef:g} (OpenRLHF asserts it)")
        if self.reward_components is not None and self.tool_reward_coef is not None:
            raise ValueError(f"{named('tool_reward_coef')} adds to the score, and gdpo with "
                             f"{named('reward_components')} reads its rewards from those columns instead; add the tool "
                             "rewards to a component column")
        return self

    @property
    def adv_bounds(self) -> tuple[Optional[float], Optional[float]]:
        """The clamp of the final advantages, (low, high), None where unbounded: ``(−C, C)`` for ``--adv-clip C``,
        else ``--adv-clip-low`` and ``--adv-clip-high`` (docs/semantics.md §3.1)."""
        if self.adv_clip is not None:
            return -self.adv_clip, self.adv_clip
        return self.adv_clip_low, self.adv_clip_high

    @property
    def use_kl(self) -> bool:
        return self.kl_coef != 0.0

    @property
    def kl_in_reward(self) -> bool:
        """KL reward shaping runs as a stage before the estimator (verl's placement)."""
        return self.use_kl and self.conv.kl == "reward"

    @property
    def conv(self) -> Convention:
        """The trainer convention these settings follow."""
        return CONVENTIONS[self.convention]

    @property
    def levels(self) -> Mapping[str, tuple[Optional[float], Optional[float]]]:
        """The verdict's thresholds: ``--threshold`` over the defaults (``report.verdict.THRESHOLDS``)."""
        from ..report.verdict import THRESHOLDS

        return {**THRESHOLDS, **(self.thresholds or {})}

    @property
    def aggregation(self) -> Aggregation:
        """The convention's trainer's loss aggregation modes."""
        return AGGREGATIONS[self.convention]

    @property
    def loss_mode(self) -> Optional[LossMode]:
        """The loss aggregation mode that weighs the tokens (None: no token_weight)."""
        return None if self.loss_agg_mode is None else self.aggregation.modes[self.loss_agg_mode]

    @property
    def spec(self) -> Estimator:
        """The estimator's declaration under the convention."""
        return self.conv.estimators[self.estimator]

    def params(self) -> "Params":
        """The settings an estimator reads (``Params``)."""
        return Params(**{name: getattr(self, name) for name in PARAMS})

    def inert(self) -> dict[str, str]:
        """The settings whose value cannot change this run's numbers, given the others, each with why (the
        end of "--flag has no effect ..."): rladv refuses them typed on the command line, and leaves them out
        of the command lines it prints."""
        out = {}
        reads = self.spec.settings
        which = named("estimator", self.estimator) + ("" if self.convention == DEFAULT else
                                                      " " + named("convention", self.convention))
        for name in ESTIMATOR_SETTINGS:
            if name not in reads:
                read = ", ".join(named(r) for r in reads) or "no estimator setting"
                out[name] = f"with {which}, which reads {read}"
        if not self.conv.blocks:
            out["group_size"] = f"with {named('convention', self.convention)}, which groups by {self.conv.grouping}"
        if "std_level" in reads and self.std_level == "none":
            out["epsilon"] = f"with {named('std_level', 'none')} (nothing is divided)"
        if self.reward_components is not None:
            out.update(dict.fromkeys(("reward_scale", "reward_bias", "reward_clip", "stop_properly_penalty_coef"),
                                     f"with {named('reward_components')} (the estimator reads those columns, not the "
                                     "score)"))
        if not self.use_kl:
            out.update(dict.fromkeys(("kl_penalty", "kl_ctrl", "kl_target", "kl_horizon"),
                                     f"without {named('kl_coef')} (KL reward shaping is off)"))
        elif self.kl_ctrl != "adaptive":
            out.update(dict.fromkeys(("kl_target", "kl_horizon"), f"without {named('kl_ctrl', 'adaptive')}"))
        if self.rollout_is is None:
            out.update(dict.fromkeys(("rollout_is_threshold", "rollout_is_batch_normalize"),
                                     f"without {named('rollout_is')} token|sequence"))
        if self.overlong_buffer_len is None:
            out.update(dict.fromkeys(("overlong_penalty_factor", "max_resp_len"),
                                     f"without {named('overlong_buffer_len')}"))
        mode = self.loss_mode
        if mode is None:
            out.update(dict.fromkeys(("mini_batch_size", *KNOBS), f"without {named('loss_agg_mode')}"))
        else:
            out.update({knob: f"with {named('loss_agg_mode', mode.name)}, which reads "
                        f"{', '.join(named(k) for k in ('mini_batch_size', *mode.reads))}"
                        for knob in KNOBS if knob not in mode.reads})
        return out

    def changed(self) -> dict[str, Any]:
        """The settings that differ from their defaults and have an effect (not ``inert``), estimator and
        ``RUN_ONLY`` left out: what a printed command line needs to give this run's numbers."""
        defaults = {**Config(estimator=self.estimator, convention=self.convention).model_dump(), "convention": DEFAULT}
        skip = {"estimator", *RUN_ONLY, *self.inert()}
        return {k: v for k, v in self.model_dump().items() if k not in skip and v != defaults[k]}

    def for_columns(self, columns: Sequence[str]) -> "Config":
        """These settings on data with ``columns``: the batch key resolved (``resolve_batch_key``)."""
        key = resolve_batch_key(self.batch_key, columns)
        return self if key == self.batch_key else self.model_copy(update={"batch_key": key})

    @property
    def batch_column(self) -> Optional[str]:
        """The column whose values are the batches, None for one batch (``batch_column``)."""
        return batch_column(self.batch_key)

    @property
    def notes(self) -> list[str]:
        """``setting_notes`` of these settings."""
        return setting_notes(self.model_dump())

    def __init__(self, **settings: Any) -> None:
        """Validate ``settings``; any problem becomes a one-line ``ConfigError`` naming the option (pydantic's
        ``ValidationError`` never reaches a caller, so every rladv error is an ``RladvError``)."""
        try:
            super().__init__(**settings)
        except ValidationError as err:
            first = err.errors()[0]
            if not first["loc"]:
                raise ConfigError(first["msg"].removeprefix("Value error, ")) from None
            name = str(first["loc"][0])
            msg = first["msg"].removeprefix("Value error, ")
            if first["type"] == "extra_forbidden":  # only a Python caller can pass an unknown keyword
                close = difflib.get_close_matches(name, type(self).model_fields, n=1)
                raise ConfigError(f"{name}: not a setting" + (f"; did you mean {close[0]}?" if close else
                                                             " (rladv_cli.Config's fields are the settings)")) from None
            raise ConfigError(f"{named(name)}: {msg}") from None


# the settings an estimator may read: its own (``ESTIMATOR_SETTINGS``), and those of the trainers that fold a
# setting into the advantage (gdpo's weights, a token-level KL, the block size of a convention's groups)
PARAMS = (*ESTIMATOR_SETTINGS, "reward_weights", "kl_coef", "kl_penalty", "group_size")
Params = dataclasses.make_dataclass("Params", [
    (name, field.annotation, dataclasses.field(default=field.default))
    for name, field in ((name, Config.model_fields[name]) for name in PARAMS)], frozen=True)
Params.__module__ = __name__  # pickled by reference (Ray workers)
Params.__doc__ = """The settings an estimator reads: ``Config``'s fields named in ``PARAMS``, with their defaults."""
RUN_ONLY = frozenset(name for name, field in Config.model_fields.items()
                     if (flag := flag_of(field)) is not None and not flag.numbers)  # never the numbers


def resolve_batch_key(given: Optional[str], columns: Sequence[str]) -> Optional[str]:
    """The batch key a run on data with ``columns`` uses: ``given`` (``none``: one batch), else ``step`` when the
    data has a step column (groups never span training steps: verl computes each step's batch on its own), else
    None (one batch). On the same columns, resolving a resolved key gives it back (docs/compute.md)."""
    if given is not None:
        return given
    return STEP_COLUMN if STEP_COLUMN in columns else None


def on_columns(settings: Mapping[str, Any], columns: Sequence[str]) -> dict[str, Any]:
    """``Config`` fields as keywords (``settings``) on data with ``columns``: the batch key resolved."""
    return {**settings, "batch_key": resolve_batch_key(settings.get("batch_key"), columns)}


def batch_column(key: Optional[str]) -> Optional[str]:
    """The column a (resolved) batch key reads, None for one batch."""
    return None if key in (None, NO_BATCH_KEY) else key


def setting_notes(settings: Mapping[str, Any]) -> list[str]:
    """One-line notes on settings verl accepts that may not do what they seem (the command prints them on
    stderr; the report keeps them in ``config.notes``)."""
    notes = []
    coef = settings.get("kl_coef") or 0.0
    if isinstance(coef, (int, float)) and coef < 0:
        notes.append(f"kl_coef {coef:g} is negative (verl accepts it): KL shaping then adds {-coef:g} * KL to the "
                     "rewards, so diverging from the reference policy raises them")
    return notes
