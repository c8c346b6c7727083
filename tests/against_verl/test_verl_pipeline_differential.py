"""Optional: rladv's whole reward -> advantage pipeline against verl 0.9.1's own functions, over the pipeline's
configuration space (estimator x KL alone is ``test_verl_differential.py``'s; a dumped trainer step,
``test_verl_trainer_replay.py``'s).

Each hypothesis example draws a random ragged dataset (tool-observation spans, rows ending in an observation,
rows without actor tokens, padded rows with an ``attention_mask`` and empty responses, singleton and all-equal
groups, uids verl's ``grpo_vectorized`` merges, several ``--batch-key`` batches, agent sessions, bool/int masks,
float32/float64 lists) and every rladv setting that maps onto a verl config key, runs rladv on it (``compute``,
``compute_file``, or with the settings read back from verl's own ``AlgoConfig`` written as a trainer YAML), and
rebuilds the same training steps from verl's own functions on padded ``[B, T]`` tensors, in the order of verl
0.9.1's V1 trainer (``trainer_base._compute_advantage``):

1. scores: verl's reward loop, ``DAPORewardManager.run_single`` (DAPO overlong shaping; the reward function
   returns the row's ``score``) and ``assemble_rm_scores``; or token-level ``rm_scores`` as given;
2. ``token_level_scores = rm_scores``; KL in the reward: ``ray_trainer.apply_kl_penalty`` with one controller of
   ``core_algos.get_kl_controller`` (fixed or adaptive) stepped through the batches in ascending key order;
3. rollout correction: ``rollout_corr_helper.compute_rollout_correction_and_add_to_batch`` (RS and IS);
4. advantages: ``ray_trainer.compute_advantage`` (the dispatcher, with verl's ``AlgoConfig``), or with agent
   sessions ``v1.utils.compute_advantage_for_multi_trajectories`` (importing it needs the PyPI package
   ``transferqueue``; without it, sessions are not drawn), or for ``--epsilon`` the estimator function itself.

Compared: ``token_level_rewards`` (every position, atol 1e-6, and nothing beyond the row in verl's tensor),
the estimator's ``response_mask`` (exact), ``loss_mask``, ``rollout_is_weights`` (every position),
``advantages`` and ``returns`` where verl's final mask is 1 (atol 1e-5, rtol 1e-4) and exactly 0 elsewhere
(docs/contract.md §3), the report's KL per batch (verl's ``actor/reward_kl_penalty``; the coefficients through verl's
controller) and verl's ``rollout_corr/`` metrics per batch. Where verl raises, rladv must stop with its own error.

rladv's documented choices encoded here: ``--rpp-mask-mode reset`` (compared only where it must equal verl's
carry), advantages 0 at mask-0 positions, float64 whitening moments (a batch-wide offset of a few float32 ulps
of the mean where rladv warns ``whitening_ill_conditioned``), exact ``*_std`` rollout-correction metrics
(compared as variances) and row sums behind the ``*_seq_*`` ones (verl's float32 rounding allowed), an empty response's score on the row's own last position, ``--tool-reward-coef``'s
float32 addition, ``gdpo`` without components (verl's direct form), sessions keyed by the (uid, session_id)
pair where verl's string key joins two (``session_key_collision``).

Runs only where verl is importable (``python -m pytest -m verl``); the default test run skips it.
``RLADV_PIPEDIFF_EXAMPLES`` (default 40 per test) sets the hypothesis examples for a longer hunt.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import event as _event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import rladv_cli
from rladv_cli.config.correction import RS_OPTIONS
from rladv_cli.config.verl import settings_from_verl_yaml
from rladv_cli.errors import RladvError
from rladv_cli.estimators.registry import REFERENCE_NAMES

pytestmark = [pytest.mark.verl, pytest.mark.slow]  # slow: hypothesis runs of verl's trainer step
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
rollout_corr_helper = pytest.importorskip("verl.trainer.ppo.rollout_corr_helper")
dapo_loop = pytest.importorskip("verl.experimental.reward_loop.reward_manager.dapo")
from omegaconf import OmegaConf  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.config.algorithm import AlgoConfig, KLControlConfig, RolloutCorrectionConfig  # noqa: E402

try:  # verl's V1 trainer package imports transfer_queue (PyPI: transferqueue) at import time
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
except ImportError:
    compute_advantage_for_multi_trajectories = None

PROMPT = 3  # prompt width of the padded DataProto (left-padded, as verl holds prompts)
KL_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
KL_MODES_ALL = KL_MODES + tuple(m + "+" for m in KL_MODES)
EXP_KL_MODES = ("low_var_kl", "k3")
DYADIC = np.arange(-16, 17) / 8  # multiples of 1/8: sums of a few are exact in float32 (docs/semantics.md §7.2)
# verl's own estimators: the others follow another trainer, whose differential tests are tests/against_peers
VERL_ESTIMATORS = sorted(name for name in rladv_cli.ESTIMATORS if name in REFERENCE_NAMES)
# divide by torch.std of each uid group's row totals (the registry's group statistic "std")
GROUP_STD_ESTIMATORS = tuple(name for name in VERL_ESTIMATORS if "std" in rladv_cli.ESTIMATORS[name].group_statistics)
# verl raises these where the reference refuses the data or the settings (masked_var, rollout correction, passk)
VERL_REFUSALS = (ValueError, AssertionError, ZeroDivisionError)


def event(what: str) -> None:
    """hypothesis.event, also callable from a plain (non-hypothesis) test."""
    try:
        _event(what)
    except InvalidArgument:
        pass


# ------------------------------------------------------------------------------------------------ the data

@dataclass
class Case:
    """One drawn dataset with its settings: the Arrow table rladv reads and what verl's side needs."""

    table: pa.Table
    estimator: str
    options: dict[str, Any]          # rladv_cli.compute settings (besides estimator, device, chunk_rows)
    chunk_rows: int
    score_kind: str                  # "rm_scores" | "score"
    batch_of_row: list[int]          # --batch-key value of each row (all 0 without one)
    components: tuple[str, ...] = ()  # gdpo reward components
    sessions: bool = False
    rollout_log_probs: bool = False
    direct: bool = False             # step 4 calls verl's estimator function itself (epsilon; gdpo's direct form)
    via_config: bool = False         # rladv reads the verl settings from a trainer YAML (--config) instead
    via_file: bool = False           # rladv_cli.compute_file on a Parquet file instead of compute on the table

    def column(self, name: str) -> list:
        return self.table[name].to_pylist()


@dataclass(frozen=True)
class Shape:
    """What the drawn rows look like (hypothesis draws these; the numbers come from a seeded generator)."""

    rows_per_batch: int = 6
    max_len: int = 12
    n_batches: int = 1
    min_group: int = 1          # 2 for grpo_passk (verl refuses singletons)
    padded: bool = False        # an attention_mask column with padding suffixes (and some all-padding rows)
    dyadic: bool = True         # scores on a 1/8 grid (exact sums: all-equal groups are exactly equal)
    observations: bool = True   # tool-observation spans inside rows; else mask 0 only as a suffix
    uid_style: str = "text"     # text "p3" | numeric strings ("3", "03", "00") | int
    components: int = 0
    rs_spread: float = 0.3      # std of old - rollout log-probs
    extreme: bool = False       # a few log-probs far apart (KL clamps, SAFETY_BOUND)


def make_rows(rng: np.random.Generator, shape: Shape) -> dict[str, list]:
    """Rows of ``shape.n_batches`` batches, each a set of uid groups (some singletons, some all-equal)."""
    cols: dict[str, list] = {k: [] for k in (
        "uid", "response_mask", "attention_mask", "rm_scores", "score", "values", "old_log_probs", "ref_log_prob",
        "rollout_log_probs", "sum_pi_squared", "reward_baselines", "step", "session_id", "output_index",
        "tool_rewards", *(f"comp{k}" for k in range(shape.components)))}
    for step in rng.permutation(np.arange(1, 10))[:shape.n_batches]:
        made, g = 0, 0
        while made < max(shape.rows_per_batch, shape.min_group):
            size = int(rng.integers(shape.min_group, 5))
            if shape.uid_style == "int":
                uid: Any = g
            elif shape.uid_style == "numeric":
                # strings of one integer ("22", "022", " 22", "+22", "2_2", "22 "): distinct groups, except in
                # grpo_vectorized, whose as_torch_index converts them with int() and so merges them
                digits = str(11 * (g // 2))
                uid = str(rng.choice([digits, "0" + digits, " " + digits, "+" + digits, digits + " ",
                                      digits[0] + "_" + digits[1:] if len(digits) > 1 else digits]))
            else:
                uid = f"p{g}"
            equal = shape.dyadic and size > 1 and rng.random() < 0.3  # an all-equal group
            shared = float(rng.choice(DYADIC))
            n_sessions = int(rng.integers(1, size + 1))
            for _ in range(size):
                L = int(rng.integers(1, shape.max_len + 1))
                n = L  # non-padding prefix
                if shape.padded and rng.random() < 0.4:
                    n = int(rng.integers(0 if rng.random() < 0.1 else 1, L + 1))  # 0: an empty response
                m = np.zeros(L, dtype=np.int8)
                m[:n] = 1
                if shape.observations:
                    for _ in range(int(rng.integers(0, 3))):  # tool-observation spans (mask 0 inside the response)
                        a = int(rng.integers(0, max(n, 1)))
                        m[a:min(a + int(rng.integers(1, 5)), n)] = 0
                if rng.random() < 0.15:  # ends in a tool observation: the score sits on a mask-0 position
                    m[max(n - int(rng.integers(1, 3)), 0):n] = 0
                if rng.random() < 0.05:
                    m[:] = 0  # no actor token at all
                value = shared if equal else (float(rng.choice(DYADIC)) if shape.dyadic else float(rng.normal(0.3, 1)))
                s = np.zeros(L, dtype=np.float32)
                s[n - 1] = value  # (n = 0: the row's last position)
                if not equal and rng.random() < 0.3:  # a process reward on another position (rm_scores only)
                    s[int(rng.integers(0, L))] += np.float32(rng.choice(DYADIC) if shape.dyadic else rng.normal(0, .5))
                old = np.minimum(rng.normal(-1.0, 0.6, L), -1e-3)
                ref = old + rng.normal(0, 0.3, L)
                rollout = old + rng.normal(0, shape.rs_spread, L)
                if shape.extreme and rng.random() < 0.3:
                    k = int(rng.integers(0, L))
                    old[k], ref[k], rollout[k] = -rng.uniform(20, 40), -rng.uniform(0, 2), -rng.uniform(20, 60)
                cols["uid"].append(uid)
                cols["response_mask"].append(m.tolist())
                cols["attention_mask"].append([1] * n + [0] * (L - n))
                cols["rm_scores"].append(s.tolist())
                cols["score"].append(value)
                cols["values"].append((rng.normal(size=L) * (m if rng.random() < 0.7 else 1)).tolist())
                cols["old_log_probs"].append(old.tolist())
                cols["ref_log_prob"].append(ref.tolist())
                cols["rollout_log_probs"].append(rollout.tolist())
                cols["sum_pi_squared"].append(rng.uniform(0.05, 0.9, L).tolist())
                cols["reward_baselines"].append(float(rng.choice(DYADIC)))
                cols["step"].append(int(step))
                cols["session_id"].append(f"s{int(rng.integers(0, n_sessions))}")
                cols["output_index"].append(int(rng.integers(0, 4)))  # ties happen: verl keeps the first seen
                cols["tool_rewards"].append(None if rng.random() < 0.2 else  # null: a row without tool calls
                                            rng.choice(DYADIC, int(rng.integers(0, 3))).tolist())
                for k in range(shape.components):
                    c = shared if equal else (float(rng.choice(DYADIC)) if shape.dyadic else float(rng.normal(0, 1)))
                    cols[f"comp{k}"].append(c)
                made += 1
            g += 1
    order = rng.permutation(len(cols["uid"]))  # interleave batches and groups: neither is contiguous
    return {k: [v[i] for i in order] for k, v in cols.items() if v}


def rs_threshold(rng: np.random.Generator, option: str) -> str:
    if option.endswith("k1"):
        if rng.random() < 0.5:
            return f"{rng.uniform(0.4, 0.97):.3f}_{rng.uniform(1.03, 2.5):.3f}"
        return f"{rng.uniform(1.05, 3.0):.3f}"
    if option.startswith("seq_sum"):
        return f"{rng.uniform(0.02, 2.0):.3f}"
    return f"{rng.uniform(0.005, 0.4):.4f}"


def to_table(rows: dict[str, list], shape: Shape, *, score_kind: str, rollout_log_probs: bool, sessions: bool,
             tool_rewards: bool, mask_type: pa.DataType, float_type: pa.DataType) -> pa.Table:
    """The docs/contract.md §1 layout; ``float_type`` float64 holds values float32 cannot (rladv rounds them, as the
    trainer's float32 tensors would have)."""
    cols: dict[str, pa.Array] = {
        "uid": pa.array(rows["uid"], pa.int64() if shape.uid_style == "int" else pa.string()),
        "response_mask": pa.array([[bool(x) for x in m] if mask_type == pa.bool_() else m
                                   for m in rows["response_mask"]], pa.list_(mask_type)),
        "old_log_probs": pa.array(rows["old_log_probs"], pa.list_(float_type)),
        "ref_log_prob": pa.array(rows["ref_log_prob"], pa.list_(float_type)),
        "values": pa.array(rows["values"], pa.list_(float_type)),
        "sum_pi_squared": pa.array(rows["sum_pi_squared"], pa.list_(float_type)),
        "reward_baselines": pa.array(rows["reward_baselines"], pa.float32()),
        "step": pa.array(rows["step"], pa.int64()),
    }
    if shape.padded:
        cols["attention_mask"] = pa.array(rows["attention_mask"], pa.list_(pa.int8()))
    if score_kind == "rm_scores":
        cols["rm_scores"] = pa.array(rows["rm_scores"], pa.list_(float_type))
    else:
        cols["score"] = pa.array(rows["score"], pa.float64())
    if rollout_log_probs:
        cols["rollout_log_probs"] = pa.array(rows["rollout_log_probs"], pa.list_(float_type))
    if sessions:
        cols["session_id"] = pa.array(rows["session_id"], pa.string())
        cols["output_index"] = pa.array(rows["output_index"], pa.int64())
    if tool_rewards:
        cols["tool_rewards"] = pa.array(rows["tool_rewards"], pa.list_(pa.float64()))
    for k in range(shape.components):
        cols[f"comp{k}"] = pa.array(rows[f"comp{k}"], pa.float64())
    return pa.table(cols)


@st.composite
def shapes(draw, estimator: str, **fixed) -> Shape:
    drawn = dict(
        rows_per_batch=draw(st.integers(1, 9)), max_len=draw(st.sampled_from([3, 12, 24])),
        n_batches=draw(st.sampled_from([1, 1, 2, 3])), min_group=rladv_cli.ESTIMATORS[estimator].min_group_size,
        padded=draw(st.booleans()), dyadic=draw(st.booleans()), observations=draw(st.sampled_from([True, True, False])),
        uid_style=draw(st.sampled_from(["text", "text", "numeric", "int"])),
        components=draw(st.integers(1, 3)) if rladv_cli.ESTIMATORS[estimator].components else 0,
        rs_spread=draw(st.sampled_from([0.05, 0.3])), extreme=draw(st.sampled_from([False, False, False, True])))
    drawn.update(fixed)
    return Shape(**drawn)


@st.composite
def cases(draw, estimator: str, *, kl=True, overlong=True, correction=True, sessions=None, **shape_fixed) -> Case:
    """A dataset and every setting of rladv that maps onto a verl 0.9.1 config key, drawn together."""
    shape = draw(shapes(estimator, **shape_fixed))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    score_kind = draw(st.sampled_from(["rm_scores", "score"]))
    if sessions is None:
        sessions = compute_advantage_for_multi_trajectories is not None and draw(st.sampled_from([False] * 3 + [True]))
    options: dict[str, Any] = {}

    # estimator settings: gamma/lam (gae; reinforce_plus_plus reads config.gamma), norm_adv_by_std_in_grpo
    options["gamma"] = draw(st.one_of(st.sampled_from([1.0, 0.99, 0.9, 0.5, 0.0]), st.floats(0, 1)))
    options["lam"] = draw(st.one_of(st.sampled_from([1.0, 0.95, 0.5, 0.0]), st.floats(0, 1)))
    options["norm_adv_by_std"] = draw(st.booleans())
    options["rpp_mask_mode"] = "carry"  # verl 0.9.1's REINFORCE++, rladv's default (reset: test_rpp_reset_mode_...)

    # KL in the reward: use_kl_in_reward, kl_penalty, kl_ctrl.{type, kl_coef, target_kl, horizon}
    if kl and draw(st.booleans()):
        options["kl_penalty"] = draw(st.sampled_from(KL_MODES_ALL))
        # tiny coefficients on all-equal groups give row totals a few ulps apart: a 1-ulp difference in a row sum
        # is then amplified ~1e5x by the group std (README "Exactness": rladv sums rows in verl's padded order),
        # and the std of such near-tied groups must round as verl's does
        options["kl_coef"] = draw(st.one_of(st.sampled_from([0.001, 0.05, 0.2, -0.1, 1e-6, 1e-5]),
                                            st.floats(0.0005, 1.0)))
        if draw(st.booleans()):
            options["kl_ctrl"] = "adaptive"
            options["kl_target"] = draw(st.sampled_from([0.01, 0.1, 0.5, -0.2]))
            options["kl_horizon"] = draw(st.sampled_from([1, 7, 100, 10000]))

    # DAPO overlong shaping: reward.reward_kwargs.{max_resp_len, overlong_buffer_cfg.{len, penalty_factor}}
    if overlong and draw(st.booleans()):
        max_resp = draw(st.integers(1, shape.max_len + 4))
        options["max_resp_len"] = max_resp
        options["overlong_buffer_len"] = draw(st.integers(1, max_resp))
        options["overlong_penalty_factor"] = draw(st.one_of(st.sampled_from([1.0, 0.5, 2.0, -0.25]),
                                                            st.floats(0.01, 3.0)))

    # tool rewards folded into a scalar score by the reward function (verl never adds them by itself)
    tool_rewards = score_kind == "score" and not shape.components and draw(st.sampled_from([False] * 3 + [True]))
    if tool_rewards:
        options["tool_reward_coef"] = draw(st.sampled_from([0.5, 1.0, 0.1, -1.0]))

    # rollout correction: algorithm.rollout_correction.{rollout_rs(_threshold), rollout_is(_threshold),
    # rollout_is_batch_normalize}
    if correction is True:
        rc = draw(st.sampled_from(["none", "none", "rs", "is", "both"]))
    elif correction == "rs":  # rejection always, importance weights sometimes
        rc = draw(st.sampled_from(["rs", "both"]))
    else:
        rc = "none"
    if rc in ("rs", "both"):
        opts = draw(st.lists(st.sampled_from(RS_OPTIONS), min_size=1, max_size=3, unique=True))
        options["rollout_rs"] = ",".join(opts)
        if len(opts) == 1 or draw(st.booleans()):
            options["rollout_rs_threshold"] = ",".join(rs_threshold(rng, o) for o in opts)
        else:  # one threshold shared by every option (a k1 "hi" and a k2/k3 bound alike)
            options["rollout_rs_threshold"] = f"{rng.uniform(1.05, 3.0):.3f}"
    if rc in ("is", "both"):
        options["rollout_is"] = draw(st.sampled_from(["token", "sequence"]))
        lo, hi = rng.uniform(0.2, 0.95), rng.uniform(1.05, 4.0)
        options["rollout_is_threshold"] = draw(st.sampled_from([f"{hi:.3f}", f"{lo:.3f}_{hi:.3f}", "2.0"]))
        options["rollout_is_batch_normalize"] = draw(st.booleans())

    # several batches by their step column; one batch said so (the step column would be the batch key by default,
    # naming the one batch step=K where verl's single step has no name)
    options["batch_key"] = "step" if shape.n_batches > 1 else "none"
    rows = make_rows(rng, shape)
    if draw(st.integers(0, 5)) == 0:  # the trainer padded its batches wider (or not: at most the longest row)
        options["pad_width"] = draw(st.integers(1, max(len(m) for m in rows["response_mask"]) + 40))
    if shape.components:
        options["reward_components"] = tuple(f"comp{k}" for k in range(shape.components))
        if draw(st.booleans()):
            options["reward_weights"] = tuple(float(rng.choice([0.5, 1.0, 2.0, -1.0])) for _ in range(shape.components))
    table = to_table(rows, shape, score_kind=score_kind, rollout_log_probs=rc != "none", sessions=sessions,
                     tool_rewards=tool_rewards,
                     mask_type=draw(st.sampled_from([pa.int8(), pa.int8(), pa.uint8(), pa.int32(), pa.bool_()])),
                     float_type=draw(st.sampled_from([pa.float32(), pa.float32(), pa.float64()])))
    return Case(table=table, estimator=estimator, options=options, chunk_rows=draw(st.sampled_from([1, 3, 7, 512])),
                score_kind=score_kind, batch_of_row=rows["step"] if shape.n_batches > 1 else [0] * len(rows["uid"]),
                components=options.get("reward_components", ()), sessions=sessions, rollout_log_probs=rc != "none",
                via_config=draw(st.sampled_from([False, False, True])),
                via_file=draw(st.sampled_from([False, False, False, True])))


# ----------------------------------------------------------------------------------- verl's side of the step

def padded(rows: list[list], dtype: torch.dtype, width: int = 0) -> torch.Tensor:
    """``[B, T]`` right-padded with zeros, ``T`` the longest row or ``width`` if wider (a trainer that pads its
    batch wider, which rladv's ``pad_width`` replays)."""
    T = max(max(len(r) for r in rows), width)
    out = torch.zeros(len(rows), T, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


class _Tokenizer:
    """What the reward manager needs of a tokenizer: the reward function here ignores the text."""

    eos_token = "</s>"

    def decode(self, ids, skip_special_tokens=True):
        return ""


def _reward_function(data_source, solution_str, ground_truth, extra_info, **kwargs):
    return extra_info["score"]  # the row's score (a Python float), as a rule-based reward function returns one


def dapo_reward_kwargs(case: Case) -> dict[str, Any]:
    """verl 0.9.1's ``reward.reward_kwargs`` for DAPO's overlong buffer."""
    o = case.options
    return {"max_resp_len": o["max_resp_len"],
            "overlong_buffer_cfg": {"enable": True, "len": o["overlong_buffer_len"],
                                    "penalty_factor": o.get("overlong_penalty_factor", 1.0), "log": True}}


def dapo_rm_scores(data: DataProto, scores: list[float], case: Case) -> torch.Tensor:
    """verl 0.9.1's reward loop: ``DAPORewardManager.run_single`` per row (overlong shaping when configured),
    then ``assemble_rm_scores`` puts each reward at the row's last non-padding response position."""
    reward_kwargs = dapo_reward_kwargs(case) if "overlong_buffer_len" in case.options else {}
    manager = dapo_loop.DAPORewardManager(OmegaConf.create({"reward": {"reward_kwargs": reward_kwargs}}),
                                          _Tokenizer(), _reward_function)
    data.non_tensor_batch["extra_info"] = np.array([{"score": s} for s in scores], dtype=object)

    async def score_all():
        return [await manager.run_single(data[i:i + 1]) for i in range(len(data))]

    outputs = manager.loop.run_until_complete(score_all())
    del data.non_tensor_batch["extra_info"]
    return dapo_loop.DAPORewardManager.assemble_rm_scores(data, [out["reward_score"] for out in outputs])


@dataclass
class VerlStep:
    rows: list[int]                  # dataset rows of this batch, in batch order
    token_level_rewards: torch.Tensor
    response_mask: torch.Tensor      # after rollout rejection: the mask the estimator used
    advantages: torch.Tensor
    returns: torch.Tensor
    rollout_is_weights: Optional[torch.Tensor]
    metrics: dict[str, float]
    kld: Optional[torch.Tensor] = None  # verl's per-token KL estimate times the original mask (KL shaping only)


def algo_config(case: Case) -> AlgoConfig:
    o = case.options
    kl_ctrl = KLControlConfig(type=o.get("kl_ctrl", "fixed"), kl_coef=o.get("kl_coef", 0.001),
                              horizon=o.get("kl_horizon", 10000), target_kl=o.get("kl_target", 0.1))
    correction = RolloutCorrectionConfig(
        rollout_is=o.get("rollout_is"), rollout_is_threshold=o.get("rollout_is_threshold", 2.0),
        rollout_is_batch_normalize=o.get("rollout_is_batch_normalize", False),
        rollout_rs=o.get("rollout_rs"), rollout_rs_threshold=o.get("rollout_rs_threshold"))
    return AlgoConfig(gamma=o["gamma"], lam=o["lam"], adv_estimator=case.estimator,
                      norm_adv_by_std_in_grpo=o["norm_adv_by_std"], use_kl_in_reward="kl_coef" in o,
                      kl_penalty=o.get("kl_penalty", "kl"), kl_ctrl=kl_ctrl, rollout_correction=correction,
                      gdpo_reward_keys=list(case.components) or None,
                      gdpo_reward_weights=list(o["reward_weights"]) if "reward_weights" in o else None)


def verl_steps(case: Case) -> list[VerlStep]:
    """verl's training steps for the case's batches, in ascending batch-key order (one KL controller)."""
    config = algo_config(case)
    kl_ctrl = core_algos.get_kl_controller(config.kl_ctrl) if config.use_kl_in_reward else None
    steps = []
    for key in sorted(set(case.batch_of_row)):
        rows = [i for i, b in enumerate(case.batch_of_row) if b == key]
        steps.append(verl_step(case, rows, config, kl_ctrl))
    return steps


def verl_step(case: Case, rows: list[int], config: AlgoConfig, kl_ctrl) -> VerlStep:
    def col(name):
        values = case.column(name)
        return [values[i] for i in rows]

    width = case.options.get("pad_width", 0)
    mask = padded(col("response_mask"), torch.int64, width)
    B, T = mask.shape
    lengths = [len(r) for r in col("response_mask")]
    if "attention_mask" in case.table.column_names:
        response_attention = padded(col("attention_mask"), torch.int64, width)
    else:
        response_attention = padded([[1] * n for n in lengths], torch.int64, width)
    attention = torch.cat([torch.ones(B, PROMPT, dtype=torch.int64), response_attention], dim=1)
    tensors = {
        "prompts": torch.ones(B, PROMPT, dtype=torch.int64),
        "responses": torch.ones(B, T, dtype=torch.int64) * response_attention,
        "attention_mask": attention,
        "response_mask": mask,
    }
    for name in ("old_log_probs", "ref_log_prob", "values", "sum_pi_squared"):  # what the table holds
        if name in case.table.column_names:
            tensors[name] = padded(col(name), torch.float32, width)
    if case.estimator == "remax":  # the legacy trainer's REMAX stage adds them; every other estimator refuses them
        tensors["reward_baselines"] = torch.tensor(col("reward_baselines"), dtype=torch.float32)
    if case.rollout_log_probs:
        tensors["rollout_log_probs"] = padded(col("rollout_log_probs"), torch.float32, width)
    uids = col("uid")
    non_tensors: dict[str, np.ndarray] = {
        "uid": np.array(uids, dtype=object),
        "data_source": np.array(["rladv"] * B, dtype=object),
        "reward_model": np.array([{"ground_truth": ""}] * B, dtype=object),
    }
    for name in case.components:  # reward extras the reward function returned, one per row
        non_tensors[name] = np.array(col(name), dtype=object)
    data = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)

    # 1. scores: verl's reward loop (the reward function returns the row's score), or a reward model's rm_scores
    o = case.options
    if case.score_kind == "score":
        scores = col("score")
        if "tool_reward_coef" in o:
            # a reward function returning score + C * sum(tool_rewards), in rladv's documented arithmetic (README
            # --tool-reward-coef: the sum in float64, the product rounded to float32 once, added to the float32
            # score in float32). Python's float64 `score + C * sum` rounds once instead: up to 1 ulp apart, which
            # a large overlong penalty added after it can lift above 1e-6 (1.9e-6 at |reward| ~ 16)
            scores = [float(np.float32(s) + np.float32(o["tool_reward_coef"] * math.fsum(t or [])))
                      for s, t in zip(scores, col("tool_rewards"))]
        rm_scores = dapo_rm_scores(data, scores, case)
    else:
        rm_scores = padded(col("rm_scores"), torch.float32, width)
        if "overlong_buffer_len" in o:
            # rladv's documented extension (docs/contract.md §2): the DAPO penalty lands on the last non-padding position
            # of token-level scores too. verl's manager, with a reward function returning 0, gives that penalty.
            rm_scores = rm_scores + dapo_rm_scores(data, [0.0] * B, case)
    data.batch["rm_scores"] = rm_scores
    data.batch["token_level_scores"] = data.batch["rm_scores"]

    # 2. KL in the reward, on the original mask
    metrics: dict[str, float] = {}
    if kl_ctrl is not None:
        kld = core_algos.kl_penalty(data.batch["old_log_probs"], data.batch["ref_log_prob"],
                                    kl_penalty=config.kl_penalty) * data.batch["response_mask"]
        data, kl_metrics = ray_trainer.apply_kl_penalty(data, kl_ctrl=kl_ctrl, kl_penalty=config.kl_penalty)
        metrics.update(kl_metrics)
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]

    # 3. rollout correction (runs when rollout_log_probs are there; the YAML always holds the section)
    if "rollout_log_probs" in data.batch:
        data, corr_metrics = rollout_corr_helper.compute_rollout_correction_and_add_to_batch(
            data, config.rollout_correction)
        metrics.update(corr_metrics)

    # 4. advantages: the V1 trainer's call (session folding for grpo), or the dispatcher itself, or (``direct``)
    # the estimator function with the arguments the dispatcher gives it plus rladv's --epsilon
    if case.direct:
        fn = core_algos.get_adv_estimator_fn(case.estimator)
        kwargs = dict(token_level_rewards=data.batch["token_level_rewards"], response_mask=data.batch["response_mask"],
                      index=data.non_tensor_batch["uid"], epsilon=o.get("epsilon", 1e-6))
        if case.estimator == "grpo":
            kwargs["norm_adv_by_std_in_grpo"] = config.norm_adv_by_std_in_grpo
        elif case.estimator == "grpo_passk":
            kwargs["config"] = config
        elif case.estimator == "gdpo" and case.components:
            kwargs.update(config=config, non_tensor_batch=data.non_tensor_batch, batch=data.batch)
        data.batch["advantages"], data.batch["returns"] = fn(**kwargs)
    elif case.sessions:
        keys = [f"{u}_{s}_{k}" for u, s, k in zip(uids, col("session_id"), col("output_index"))]
        data = compute_advantage_for_multi_trajectories(
            data, batch_keys=keys, adv_estimator=case.estimator, gamma=config.gamma, lam=config.lam, num_repeat=1,
            norm_adv_by_std_in_grpo=config.get("norm_adv_by_std_in_grpo", True), config=config)
    else:
        data = ray_trainer.compute_advantage(data, case.estimator, gamma=config.gamma, lam=config.lam, num_repeat=1,
                                             norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo, config=config)
    return VerlStep(rows=rows, token_level_rewards=data.batch["token_level_rewards"],
                    response_mask=data.batch["response_mask"], advantages=data.batch["advantages"],
                    returns=data.batch["returns"], rollout_is_weights=data.batch.get("rollout_is_weights", None),
                    metrics=metrics, kld=kld if kl_ctrl is not None else None)


# ------------------------------------------------------------------------------------------ the comparison

# settings no verl config key holds: rladv flags on top of a --config file (as typed on the command line)
NOT_IN_VERL_CONFIG = ("rpp_mask_mode", "epsilon", "tool_reward_coef", "batch_key", "pad_width")


def run_rladv(case: Case):
    settings = dict(case.options)
    if case.via_config:
        # verl's own AlgoConfig (the dataclass behind the trainer's `algorithm:` section) written as YAML, with
        # the DAPO reward_kwargs of verl 0.9.1's `reward:` section; rladv reads it with --config's reader
        doc: dict[str, Any] = {"algorithm": OmegaConf.to_container(OmegaConf.structured(algo_config(case)))}
        if "overlong_buffer_len" in settings:
            doc["reward"] = {"reward_kwargs": dapo_reward_kwargs(case)}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "ppo_trainer.yaml")
            with open(path, "w") as f:
                yaml.safe_dump(doc, f)
            from_file = settings_from_verl_yaml(path).settings
        settings = {**from_file, **{k: v for k, v in settings.items() if k in NOT_IN_VERL_CONFIG}}
        event("settings read from a verl trainer YAML (--config)")
    settings.setdefault("estimator", case.estimator)
    if "pad_width" in settings:
        event("batches padded to --pad-width")
    if not case.via_file:
        return rladv_cli.compute(case.table, device="cpu", chunk_rows=case.chunk_rows, **settings)
    event("rladv_cli.compute_file on Parquet")
    with tempfile.TemporaryDirectory() as tmp:
        source, target = os.path.join(tmp, "rollouts.parquet"), os.path.join(tmp, "out.parquet")
        pq.write_table(case.table, source)
        report = rladv_cli.compute_file(source, output=target, device="cpu", chunk_rows=case.chunk_rows, **settings)
        return pq.read_table(target), report


WHITENED = {name for name, e in rladv_cli.ESTIMATORS.items() if e.whiten}
RETURNS_ARE_ADVANTAGES = {name for name, e in rladv_cli.ESTIMATORS.items() if e.returns_are_advantages}


def ulp_shift(whitening: dict) -> float:
    """How far one float32 ulp of a batch's whitening mean (at the magnitude of the values whitened) moves every
    whitened advantage: ``ulp / sqrt(var + 1e-8)``. verl sums that mean in float32 in an order nobody else can
    follow (docs/semantics.md §0.4, §14; rladv's ``whitening_ill_conditioned`` warning): when all values of a batch are
    (nearly) equal, its advantages are float32 noise times 1e4, shifted uniformly against any other order."""
    n, mean, var = whitening["tokens"], whitening["mean"], whitening["var"]
    magnitude = math.sqrt(mean * mean + var * (n - 1) / n)
    return float(np.spacing(np.float32(magnitude))) / math.sqrt(var + 1e-8)


def baseline_rounding(report) -> float:
    """The optimal-token baselines: how far one float32 rounding of the baseline's sums can move it, where rladv
    warns ``baseline_ill_conditioned`` (its weights Σ_i W[i,t] nearly cancel; verl sums them in float32 in its
    own order, rladv in float64); 0 where it does not warn."""
    for w in report.warnings:
        if w.code == "baseline_ill_conditioned":
            return float(re.search(r"by up to ([0-9.]+e[+-][0-9]+)", w.message).group(1))
    return 0.0


def close(have: torch.Tensor, want: torch.Tensor, what: str, shift: float = 0.0, atol: float = 1e-5) -> None:
    """advantages/returns within atol 1e-5, rtol 1e-4; in an ill-conditioned whitened batch (``shift``: one ulp
    of its mean, amplified) up to ONE batch-wide offset of at most 16 such ulps, the rest within the tolerance;
    ``atol`` more for an ill-conditioned optimal-token baseline."""
    if have.numel() and shift >= 1e-6:  # where rladv warns whitening_ill_conditioned
        offset = (have - want).median()
        assert abs(float(offset)) <= 16 * shift, \
            f"{what}: offset {float(offset):.3g} exceeds 16 ulp shifts ({shift:.3g})"
        event("ill-conditioned whitening: batch-wide offset allowed")
        have = have - offset
    torch.testing.assert_close(have, want, rtol=1e-4, atol=atol, msg=lambda m: f"{what}: {m}")


def replay_case(case: Case, steps: list["VerlStep"], keep_rejection: bool) -> Case:
    """The batch as verl's trainer holds it after its rollout-correction step, dumped as README "Dumping a batch"
    says: ``response_mask`` rewritten by the rejection, ``loss_mask`` the mask before it. rladv then reads
    ``loss_mask`` as the original mask (KL, IS weights, rejection statistics) and, with the same
    ``--rollout-rs``, decides the rejection again from it; without it, the estimator takes ``response_mask``."""
    final = list(case.column("response_mask"))
    for step in steps:
        for j, i in enumerate(step.rows):
            final[i] = step.response_mask[j, :len(final[i])].tolist()
    mask_type = case.table.schema.field("response_mask").type
    if pa.types.is_boolean(mask_type.value_type):
        final = [[bool(x) for x in m] for m in final]
    table = case.table.set_column(case.table.column_names.index("response_mask"), "response_mask",
                                  pa.array(final, mask_type)).append_column("loss_mask", case.table["response_mask"])
    options = dict(case.options)
    if not keep_rejection:
        options.pop("rollout_rs", None)
        options.pop("rollout_rs_threshold", None)
    return dataclasses.replace(case, table=table, options=options)


def check_against_verl(case: Case, replay: Optional[str] = None) -> None:
    """rladv's output and report against verl's steps. ``replay`` ("same options" | "without rejection options"):
    rladv reads the batch as verl's trainer dumps it after its rollout correction (``replay_case``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            steps = verl_steps(case)
    except VERL_REFUSALS as err:
        event(f"verl refuses: {type(err).__name__}")
        with pytest.raises(RladvError):
            run_rladv(case)
        return
    original = case
    if replay is not None:
        case = replay_case(case, steps, keep_rejection=replay == "same options")
        event(f"replay of verl's rewritten mask, {replay}")
    out, report = run_rladv(case)
    event(f"compared: {case.estimator}")
    describe(case, steps, report)
    got = {name: out[name].to_pylist() for name in
           ("token_level_rewards", "response_mask", "loss_mask", "advantages", "returns")}
    if "rollout_is" in case.options:
        got["rollout_is_weights"] = out["rollout_is_weights"].to_pylist()
    masks_in = original.column("response_mask")  # the mask before rejection (a replay's loss_mask)
    attention = case.column("attention_mask") if "attention_mask" in case.table.column_names else None
    check_metrics(case, steps, report)
    whitening = {w["batch"]: w for w in (report.whitening or [])}
    for step, name in zip(steps, batch_names(case, steps)):
        shift = ulp_shift(whitening[name]) if case.estimator in WHITENED else 0.0
        per_name: dict[str, tuple[list, list]] = {"advantages": ([], []), "returns": ([], [])}
        for j, i in enumerate(step.rows):
            L = len(masks_in[i])
            where = f"row {i} (batch row {j})"
            # rewards: every position of the row, and nothing beyond it in verl's padded tensor
            want_r = step.token_level_rewards[j].clone()
            T = want_r.numel()
            if attention is not None and not any(attention[i]) and L < T:
                # an empty response (attention all 0): verl's index -1 wraps to its padded tensor's last column,
                # beyond this row's list; rladv wraps to the row's own last position (rladv_cli.contract.columns.
                # score_positions: what verl does to a row padded to the batch width, as verl's dumps are)
                want_r[L - 1] += want_r[T - 1]
                want_r[T - 1] = 0
                event("empty response shorter than the batch")
            have_r = torch.tensor(got["token_level_rewards"][i], dtype=torch.float32)
            off = (have_r - want_r[:L]).abs() > 1e-6
            assert not off.any(), (f"token_level_rewards, {where}: rladv {have_r[off].tolist()}, verl "
                                   f"{want_r[:L][off].tolist()} at {torch.nonzero(off).flatten().tolist()}")
            assert not want_r[L:].any(), f"verl holds rewards beyond the end of {where}: {want_r[L:]}"
            mask = step.response_mask[j, :L]
            assert got["response_mask"][i] == mask.tolist(), f"response_mask, {where}"
            assert got["loss_mask"][i] == masks_in[i], f"loss_mask, {where}"
            valid = mask > 0
            for what, want in (("advantages", step.advantages[j, :L]), ("returns", step.returns[j, :L])):
                have = torch.tensor(got[what][i], dtype=torch.float32)
                assert not have[~valid].any(), f"{what} not 0 where response_mask is 0, {where}"
                per_name[what][0].append(have[valid])
                per_name[what][1].append(want[valid])
            if "rollout_is_weights" in got:
                torch.testing.assert_close(torch.tensor(got["rollout_is_weights"][i], dtype=torch.float32),
                                           step.rollout_is_weights[j, :L], rtol=1e-5, atol=1e-6,
                                           msg=lambda m: f"rollout_is_weights, {where}: {m}")
        for what, (have, want) in per_name.items():
            whitened = what == "advantages" or case.estimator in RETURNS_ARE_ADVANTAGES
            atol = max(1e-5, 16 * baseline_rounding(report)) if what == "advantages" else 1e-5
            if atol > 1e-5:
                event("ill-conditioned optimal-token baseline: 16 rounding steps allowed")
            close(torch.cat(have), torch.cat(want), f"{what}, batch {name}", shift if whitened else 0.0, atol)


def describe(case: Case, steps: list[VerlStep], report) -> None:
    """hypothesis events (--hypothesis-show-statistics): which parts of the pipeline the compared examples reached."""
    o = case.options
    event(f"scores: {case.score_kind}" + (" + attention_mask padding" if "attention_mask" in case.table.column_names
                                          else ""))
    event(f"batches: {len(steps)}")
    if "kl_coef" in o:
        event(f"KL {o.get('kl_ctrl', 'fixed')} controller" + (" over several batches" if len(steps) > 1 else ""))
    if "overlong_buffer_len" in o and report.overlong and report.overlong["rows_penalised"]:
        event("overlong shaping")
    if "rollout_rs" in o:
        rejected = sum(int((s.response_mask == 0).sum()) for s in steps) - sum(
            sum(len(m) - sum(m) for m in (case.column("response_mask")[i] for i in s.rows)) for s in steps)
        event("rollout rejection rejected tokens" if rejected else "rollout rejection kept everything")
    if "rollout_is" in o:
        event(f"IS weights {o['rollout_is']}" + (" IcePop" if "_" in str(o["rollout_is_threshold"]) else " TIS"))
    if case.sessions:
        event(f"agent sessions ({'folded' if case.estimator == 'grpo' else 'not folded'})")
    if "tool_reward_coef" in o:
        event("tool rewards in the score")
    for w in report.warnings:
        event(f"warning {w.code}")


def batch_names(case: Case, steps: list[VerlStep]) -> list[Optional[str]]:
    """rladv's names of the batches, in verl's (ascending key) order."""
    return [None] if len(steps) == 1 else [f"step={k}" for k in sorted(set(case.batch_of_row))]


def check_metrics(case: Case, steps: list[VerlStep], report) -> None:
    """The report's KL (actor/reward_kl_penalty, its coefficient) and rollout_corr/ metrics, batch by batch."""
    names = batch_names(case, steps)
    if "kl_coef" in case.options:
        assert [b.batch for b in report.kl.batches] == names
        # verl's own controller, stepped with rladv's per-batch KL, must give rladv's coefficients exactly (with
        # one batch, or a fixed controller, rladv reports a float64 KL mean, within float32 noise of verl's)
        ctrl = core_algos.get_kl_controller(algo_config(case).kl_ctrl)
        for step, batch in zip(steps, report.kl.batches):
            assert math.isclose(batch.kl, step.metrics["actor/reward_kl_penalty"], rel_tol=1e-4, abs_tol=1e-6), \
                (batch, step.metrics["actor/reward_kl_penalty"])
            assert math.isclose(batch.coef, ctrl.value, rel_tol=1e-12, abs_tol=0), (batch, ctrl.value)
            ctrl.update(current_kl=batch.kl, n_steps=batch.rows)
        assert report.kl.batches[0].coef == steps[0].metrics["actor/reward_kl_penalty_coeff"]
        if case.options.get("kl_ctrl") == "adaptive" and case.options.get("batch_key") not in (None, "none"):
            # stepped between batches, rladv takes verl's own float32 current_kl: KL and coefficients to the bit,
            # unless the penalty exponentiates: rladv's CPU exp is correctly rounded, torch's (MKL's) one ulp off
            # on ~1% of inputs, and (exp(x) - x) - 1 turns that ulp into ~1e-6 of the KL (docs/arrays.md)
            got = [(b.kl, b.coef) for b in report.kl.batches]
            want = [(s.metrics["actor/reward_kl_penalty"], s.metrics["actor/reward_kl_penalty_coeff"]) for s in steps]
            if case.options["kl_penalty"].rstrip("+") in EXP_KL_MODES:
                assert all(math.isclose(a, b, rel_tol=1e-5) for pair, other in zip(got, want)
                           for a, b in zip(pair, other)), (got, want)
                event("adaptive KL over batches, an exp-based penalty: verl's coefficients within 1e-5")
            else:
                assert got == want
                event("adaptive KL over batches: verl's coefficients to the bit")
    if case.rollout_log_probs and "rollout_rs" not in case.options:
        # the replay without rejection options: rladv reports no rollout_rs_* metrics then
        for step in steps:
            step.metrics = {k: v for k, v in step.metrics.items() if not k.startswith("rollout_corr/rollout_rs_")}
    if case.rollout_log_probs:
        corr = report.rollout_rejection
        per = [corr] if len(steps) == 1 else [corr["batches"][n] for n in names]
        for step, got in zip(steps, per):
            want = {k.removeprefix("rollout_corr/"): v for k, v in step.metrics.items()
                    if k.startswith("rollout_corr/")}
            missing = sorted(set(want) - set(got))
            assert not missing, f"verl metrics the report lacks: {missing}"
            for k, v in want.items():
                if k.endswith("_std") and not k.endswith("_seq_std"):
                    # verl: sqrt(max(E[c^2] - E[c]^2, 0)) in float32, so a spread of 0 reads as sqrt(cancellation
                    # noise) ~ 1e-4; compared as variances, within float32 noise of E[c^2]
                    scale = got[k.removesuffix("std") + "mean"] ** 2 + v * v + 1.0
                    assert math.isclose(got[k] ** 2, v * v, rel_tol=1e-4, abs_tol=1e-6 * scale), \
                        f"rollout_corr/{k}: rladv {got[k]!r}, verl {v!r}"
                    continue
                if k.endswith("_seq_std"):
                    # the std of per-row sums: verl accumulates each row in float32 over the padded width, rladv
                    # rounds a float64 sum once, so large and close row sums (k2 sums near 370) leave verl's std
                    # their rounding: up to width x ulp of the largest |sum| (found: 0.004823 against 0.004812)
                    width = max(len(m) for m in case.column("response_mask")) + case.options.get("pad_width", 0)
                    largest = max(abs(want[k.removesuffix("std") + "max"]), abs(want[k.removesuffix("std") + "min"]))
                    assert math.isclose(got[k], v, rel_tol=1e-4, abs_tol=1e-5 + width * 2**-23 * largest), \
                        f"rollout_corr/{k}: rladv {got[k]!r}, verl {v!r}"
                    continue
                assert math.isclose(got[k], v, rel_tol=1e-4, abs_tol=1e-5) or (math.isnan(v) and math.isnan(got[k])), \
                    f"rollout_corr/{k}: rladv {got[k]!r}, verl {v!r}"


EXAMPLES = int(os.environ.get("RLADV_PIPEDIFF_EXAMPLES", "40"))  # per estimator; more for a longer hunt
SETTINGS = settings(deadline=None, max_examples=EXAMPLES,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("estimator", VERL_ESTIMATORS)
@SETTINGS
@given(data=st.data())
def test_pipeline_equals_verl(estimator, data):
    """Scores (+ DAPO overlong, tool rewards) -> KL (fixed/adaptive, every mode) -> rollout correction (RS/IS)
    -> estimator (gamma, lam, std flag; agent sessions; --batch-key batches), against verl's functions."""
    check_against_verl(data.draw(cases(estimator)))


@pytest.mark.parametrize("replay", ["same options", "without rejection options"])
@pytest.mark.parametrize("estimator", ["grpo", "gae", "reinforce_plus_plus_baseline", "optimal_token_baseline"])
@SETTINGS
@given(data=st.data())
def test_replay_of_verls_batch_after_rollout_correction(estimator, replay, data):
    """A trainer dump after verl's rollout correction (rewritten response_mask + loss_mask, README) replays."""
    case = data.draw(cases(estimator, correction="rs"))
    check_against_verl(case, replay=replay)


@SETTINGS
@given(data=st.data())
def test_rpp_reset_mode_equals_verl_where_no_mask_zero_precedes_an_actor_token(data):
    """--rpp-mask-mode reset is the chapter's REINFORCE++ (verl before 0.9; docs/semantics.md §7.7), not verl
    0.9.1's carry, rladv's default: the two may only differ where a mask-0 position lies before an actor token. Without tool observations inside rows and without rejection (mask 0 only as a suffix), reset must
    equal verl's own."""
    case = data.draw(cases("reinforce_plus_plus", observations=False, correction=False, sessions=False))
    case.options["rpp_mask_mode"] = "reset"
    check_against_verl(case)


@pytest.mark.parametrize("estimator", [name for name in VERL_ESTIMATORS if "epsilon" in rladv_cli.ESTIMATORS[name].settings])
@SETTINGS
@given(data=st.data(), epsilon=st.one_of(st.sampled_from([1e-6, 1e-8, 0.1, 1.0]), st.floats(1e-9, 2.0)))
def test_epsilon_equals_verls_estimator_argument(estimator, data, epsilon):
    """--epsilon is the ``epsilon`` argument of verl's estimator functions (the dispatcher never passes it: a
    trainer always runs 1e-6), so the last step calls verl's function itself with it."""
    case = data.draw(cases(estimator, sessions=False))
    case.options["epsilon"] = epsilon
    case.direct = True
    check_against_verl(case)


@SETTINGS
@given(data=st.data())
def test_gdpo_without_components_is_verls_direct_form(data):
    """README "Exactness": gdpo without --reward-components runs the single-component form verl's function takes
    when called directly (the row total); verl's trainer refuses it (algorithm.gdpo_reward_keys is required)."""
    case = data.draw(cases("gdpo", components=0, sessions=False))
    config = algo_config(case)
    with pytest.raises(AssertionError, match="gdpo_reward_keys"):
        core_algos.get_adv_estimator_fn("gdpo")(
            token_level_rewards=torch.zeros(1, 2), response_mask=torch.ones(1, 2, dtype=torch.int64),
            index=np.array(["a"], dtype=object), config=config, non_tensor_batch={}, batch={})
    case.direct = True
    check_against_verl(case)


@pytest.mark.skipif(compute_advantage_for_multi_trajectories is None,
                    reason="verl's V1 trainer package needs transferqueue")
def test_sessions_whose_uid_and_session_id_join_to_the_same_key():
    """rladv's documented choice (README "Agent sessions"): verl 0.9.1's V1 trainer keys a session by the string
    f"{uid}_{session_id}", so ("a_b", "c") and ("a", "b_c") are ONE session there; rladv keeps the pairs apart
    and warns ``session_key_collision``. verl's own ids (an integer session_id) never collide."""
    table = pa.table({
        "uid": ["a_b", "a_b", "a", "a"],
        "session_id": ["c", "d", "b_c", "e"],
        "output_index": pa.array([0, 0, 1, 0], pa.int64()),
        "response_mask": pa.array([[1, 1], [1, 1], [1, 1], [1, 1]], pa.list_(pa.int8())),
        "score": [1.0, 0.0, 0.5, 0.25],
    })
    # verl: key "a_b_c" holds rows 0 and 2 (final: row 2, index 1); grpo runs on rows 2, 1, 3 grouped by uid:
    # {2, 3} -> +-0.7071, {1} singleton -> 0; row 0 takes row 2's advantage.
    # rladv: four sessions, groups {0, 1} and {2, 3}.
    case = Case(table=table, estimator="grpo", options={"gamma": 1.0, "lam": 1.0, "norm_adv_by_std": True,
                                                        "rpp_mask_mode": "carry"},
                chunk_rows=512, score_kind="score", batch_of_row=[0] * 4, sessions=True)
    with pytest.raises(AssertionError, match="advantages"):
        check_against_verl(case)
    _, report = rladv_cli.compute(table, estimator="grpo", device="cpu")
    assert [(w.code, w.rows) for w in report.warnings if w.code == "session_key_collision"] == \
        [("session_key_collision", [0, 2])]


@pytest.mark.parametrize("estimator", GROUP_STD_ESTIMATORS)
def test_group_std_of_near_tied_groups_in_a_batch_with_other_groups_of_the_same_size(estimator):
    # R = [0.625, 0.62499958] (7 ulps apart) in uid "a", [1, 2] in uid "b". verl's grpo: a = [0.1836782,
    # -0.1377587, -0.7071058, 0.7071058]. Found here: rladv's bucketed [G, s].std(dim=1) gave [0.1841030,
    # -0.1380773, ...] (group "a" alone agreed); groups.two_pass_std now rounds as verl's 1-D torch.std.
    table = pa.table({"uid": ["a", "a", "b", "b"],
                      "response_mask": pa.array([[1], [1], [1], [1]], pa.list_(pa.int8())),
                      "score": [0.625, 0.6249995827674866, 1.0, 2.0],
                      "comp0": [0.625, 0.6249995827674866, 1.0, 2.0]})
    options = {"gamma": 1.0, "lam": 1.0, "norm_adv_by_std": True, "rpp_mask_mode": "carry"}
    if rladv_cli.ESTIMATORS[estimator].components:
        options["reward_components"] = ("comp0",)
    case = Case(table=table, estimator=estimator, options=options, chunk_rows=512, score_kind="score",
                batch_of_row=[0] * 4, components=options.get("reward_components", ()))
    check_against_verl(case)
