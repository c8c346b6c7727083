"""Resolved settings of one ``rladv compute`` run (pydantic); one flat field per command-line option."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .estimators.registry import ESTIMATORS

INT_MAX = 2**31 - 1
KL_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


class Config(BaseModel):
    """Everything that decides the numbers; defaults are verl 0.9.1's ``algorithm`` defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True, title="rladv compute config", allow_inf_nan=False)

    estimator: str = Field(description="advantage estimator, by verl's name (rladv estimators lists them)")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount factor (gae, reinforce_plus_plus)")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda")
    norm_adv_by_std: bool = Field(True, description="grpo: divide by the group std (false = Dr.GRPO)")
    epsilon: float = Field(1e-6, gt=0.0, description="grpo: added to the group std")
    rpp_mask_mode: Literal["reset", "carry"] = Field(
        "reset", description="reinforce_plus_plus at mask-0 positions: reset (chapter) or carry (verl 0.9.1)"
    )
    kl_coef: float = Field(0.0, description="> 0 turns on KL reward shaping (verl's use_kl_in_reward)")
    kl_penalty: str = Field("kl", description="per-token KL estimate: kl/k1, abs, mse/k2, low_var_kl/k3, or <mode>+")
    kl_ctrl: Literal["fixed", "adaptive"] = Field("fixed", description="KL coefficient controller")
    kl_target: float = Field(0.1, description="adaptive controller: target KL")
    kl_horizon: int = Field(10000, le=INT_MAX, description="adaptive controller: horizon")
    rollout_rs: Optional[str] = Field(None, description="rollout rejection options, verl's string (e.g. token_k1)")
    rollout_rs_threshold: Optional[str] = Field(None, description="rollout rejection thresholds, verl's string")
    rollout_is: Optional[Literal["token", "sequence"]] = Field(None, description="importance-weight level")
    rollout_is_threshold: str = Field("2.0", description="IS truncation threshold (number) or IcePop band lo_hi")
    rollout_is_batch_normalize: bool = Field(False, description="normalise IS weights by their batch mean")
    overlong_buffer_len: Optional[int] = Field(
        None, gt=0, le=INT_MAX, description="DAPO overlong shaping: buffer length (turns the stage on; needs max_resp_len)"
    )
    overlong_penalty_factor: float = Field(1.0, description="DAPO overlong shaping: penalty at max_resp_len")
    max_resp_len: Optional[int] = Field(None, gt=0, le=INT_MAX, description="DAPO overlong shaping: maximum response length")
    reward_components: Optional[tuple[str, ...]] = Field(
        None, description="gdpo: float columns holding per-row reward components"
    )
    reward_weights: Optional[tuple[float, ...]] = Field(None, description="gdpo: weight of each component")
    batch_key: Optional[str] = Field(None, description="column whose values split the dataset into independent batches")
    chunk_rows: int = Field(512, gt=0, le=INT_MAX, description="rows held in memory at once; results do not depend on it")
    cache_mib: int = Field(
        512, ge=0, le=1 << 30,
        description="a dataset whose decoded columns fit this many MiB is read once and kept in memory for every "
        "pass; a larger one is read again by each pass (0: always)",
    )
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="torch device; auto = cuda when available")
    threads: int = Field(
        1, ge=1, le=1024,
        description="torch CPU threads for the run (the kernels are memory-bound; on small CPUs the thread pool's "
        "wake-up cost exceeds the gain)",
    )

    @field_validator("estimator")
    @classmethod
    def _known_estimator(cls, v: str) -> str:
        if v not in ESTIMATORS:
            raise ValueError(f"unknown estimator '{v}'; choose one of {', '.join(ESTIMATORS)}")
        return v

    @field_validator("kl_penalty")
    @classmethod
    def _known_kl_mode(cls, v: str) -> str:
        if v.removesuffix("+") not in KL_MODES:
            raise ValueError(
                f"'{v}' is not a KL estimate verl implements; choose one of {', '.join(KL_MODES)} (optionally with +)"
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "Config":
        if self.kl_ctrl == "adaptive" and self.kl_coef > 0:
            if self.kl_horizon <= 0:
                raise ValueError("--kl-horizon must be > 0 for the adaptive controller")
            if self.kl_target == 0:
                raise ValueError("--kl-target must not be 0 for the adaptive controller (verl divides by it)")
        if (self.rollout_rs is None) != (self.rollout_rs_threshold is None):
            raise ValueError("--rollout-rs and --rollout-rs-threshold go together")
        if self.overlong_buffer_len is not None:
            if self.max_resp_len is None:
                raise ValueError("--overlong-buffer-len needs --max-resp-len (verl asserts max_resp_len is given)")
            if self.max_resp_len < self.overlong_buffer_len:
                raise ValueError("--max-resp-len must be >= --overlong-buffer-len (verl asserts it)")
        if self.reward_weights is not None:
            if self.reward_components is None:
                raise ValueError("--reward-weights needs --reward-components")
            if len(self.reward_weights) != len(self.reward_components):
                raise ValueError(f"--reward-weights has {len(self.reward_weights)} values for "
                                 f"{len(self.reward_components)} --reward-components")
        if self.reward_components is not None and self.estimator != "gdpo":
            raise ValueError("--reward-components is read by gdpo only; use --estimator gdpo")
        return self

    @property
    def use_kl(self) -> bool:
        return self.kl_coef != 0.0

    @classmethod
    def build(cls, **settings) -> "Config":
        """Validate settings; any problem becomes a one-line ``ConfigError`` naming the option."""
        try:
            return cls(**settings)
        except ValidationError as err:
            first = err.errors()[0]
            flag = "--" + str(first["loc"][0]).replace("_", "-") if first["loc"] else "config"
            msg = first["msg"].removeprefix("Value error, ")
            raise ConfigError(f"{flag}: {msg}" if first["loc"] else msg) from None
