"""Optional: rladv's conventions against the trainers' own code, on random ragged batches.

Runs where the trainers' released source is on disk (``bash tests/data/fetch_peers.sh DIR``, then
``RLADV_PEER_SRC=DIR python -m pytest -m peers tests/against_peers``); the default run skips it. Each trainer's
module is loaded from its file with stubs for its heavy imports (``peers.py``); TRL's advantage, inline in
``GRPOTrainer._generate_and_score_completions``, runs as its own lines cut from that method.
"""
from __future__ import annotations

import types

import numpy as np
import pyarrow as pa
import pytest
import torch

import rladv_cli
from peers import code_between, function_source, nemo_rl_advantage_estimator, openrlhf_experience_maker, skyrl_ppo_utils

pytestmark = pytest.mark.peers
SEEDS = range(40)
ATOL, RTOL = 1e-5, 1e-4


def ragged(rng, rows: int, *, kl: bool = False) -> dict:
    """Columns of ``rows`` random rows: masks with observation spans, a scalar score (ties and spread values),
    log-probs."""
    lengths = rng.integers(1, 30, rows)
    masks = []
    for L in lengths:
        m = np.ones(L, dtype=np.int8)
        for _ in range(rng.integers(0, 3)):
            a = int(rng.integers(0, L))
            m[a:a + int(rng.integers(1, 5))] = 0
        masks.append(m)
    score = np.where(rng.random(rows) < 0.5, rng.choice([0.0, 1.0], rows), rng.normal(0.5, 0.7, rows)).astype(np.float32)
    cols = {"response_mask": pa.array([m.tolist() for m in masks], pa.list_(pa.int8())), "score": pa.array(score)}
    if kl:
        cols["old_log_probs"] = pa.array([rng.normal(-1, 0.6, L).astype(np.float32).tolist() for L in lengths],
                                         pa.list_(pa.float32()))
        cols["ref_log_prob"] = pa.array([rng.normal(-1, 0.6, L).astype(np.float32).tolist() for L in lengths],
                                        pa.list_(pa.float32()))
    return cols


def padded(column: pa.Array, dtype=torch.float32) -> torch.Tensor:
    rows = column.to_pylist()
    out = torch.zeros(len(rows), max(len(r) for r in rows), dtype=dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=dtype)
    return out


def rladv_advantages(table: pa.Table, **settings) -> torch.Tensor:
    out, _ = rladv_cli.compute(table, device="cpu", **settings)
    return padded(out["advantages"])


def assert_close_on_mask(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    m = mask > 0
    torch.testing.assert_close(ours[m], theirs.float()[m], atol=ATOL, rtol=RTOL, msg=what)


# ------------------------------------------------------------------ SkyRL 0.3.0
@pytest.fixture(scope="module")
def skyrl():
    return skyrl_ppo_utils()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name, function", [("grpo", "compute_grpo_outcome_advantage"),
                                            ("rloo", "compute_rloo_outcome_advantage"),
                                            ("maxrl", "compute_maxrl_advantage")])
def test_skyrl(skyrl, seed, name, function):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(4, 40))
    uids = [f"p{int(u)}" for u in rng.integers(0, max(rows // 3, 1), rows)]  # sizes vary, singletons included
    table = pa.table({"uid": uids, **ragged(rng, rows)})
    mask = padded(table["response_mask"])
    rewards = torch.zeros_like(mask)
    lengths = mask.new_tensor([len(m) for m in table["response_mask"].to_pylist()]).long()
    rewards[torch.arange(rows), lengths - 1] = torch.tensor(table["score"].to_pylist(), dtype=torch.float32)
    theirs, _ = getattr(skyrl, function)(token_level_rewards=rewards, response_mask=mask,
                                         index=np.array(uids, dtype=object))
    assert_close_on_mask(rladv_advantages(table, convention="skyrl", estimator=name), theirs, mask, f"{name} {seed}")


# ------------------------------------------------------------------ NeMo-RL 0.6.0 (7ea279a)
@pytest.fixture(scope="module")
def nemo_rl():
    return nemo_rl_advantage_estimator()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("leave_one_out", [True, False])
@pytest.mark.parametrize("normalize", [True, False])
def test_nemo_rl(nemo_rl, seed, leave_one_out, normalize):
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(4, 40))
    n_prompts = max(rows // 3, 1)
    prompt_tokens = [rng.integers(1, 50, int(rng.integers(1, 6))).tolist() for _ in range(n_prompts)]
    which = rng.integers(0, n_prompts, rows)
    prompts = [prompt_tokens[k] for k in which]
    table = pa.table({"prompts": pa.array(prompts, pa.list_(pa.int64())), **ragged(rng, rows)})
    # NeMo-RL pads the prompt ids (a pad id no prompt contains, so padding cannot make two prompts equal)
    prompt_ids = torch.full((rows, max(len(p) for p in prompts)), -1, dtype=torch.long)
    for i, p in enumerate(prompts):
        prompt_ids[i, :len(p)] = torch.tensor(p)
    config = nemo_rl.AdvEstimatorConfig(use_leave_one_out_baseline=leave_one_out, normalize_rewards=normalize)
    mask = padded(table["response_mask"])
    theirs = nemo_rl.GRPOAdvantageEstimator(config, None).compute_advantage(
        prompt_ids, torch.tensor(table["score"].to_pylist(), dtype=torch.float32), mask)
    ours = rladv_advantages(table, convention="nemo_rl", estimator="grpo", leave_one_out=leave_one_out,
                            norm_adv_by_std=normalize)
    assert_close_on_mask(ours, theirs, mask, f"seed {seed}")


# ------------------------------------------------------------------ OpenRLHF 0.11.2
@pytest.fixture(scope="module")
def openrlhf():
    return openrlhf_experience_maker()


def _openrlhf_maker(module, estimator: str, n: int, kl_coef: float, gamma: float = 1.0):
    """A ``RemoteExperienceMaker`` without its Ray actor groups: the settings its advantage step reads."""
    ns = types.SimpleNamespace
    args = ns(rollout=ns(n_samples_per_prompt=n), reward=ns(clip_range=None, overlong_buffer_len=None,
                                                              stop_properly_penalty_coef=None),
              algo=ns(advantage=ns(estimator=estimator, gamma=gamma, lambd=1.0, no_std_norm=False)))
    maker = object.__new__(module.RemoteExperienceMaker)
    maker.strategy, maker.args, maker.advantage_estimator, maker.kl_ctl = ns(args=args), args, estimator, ns(value=kl_coef)
    return maker


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator", ["group_norm", "rloo", "dr_grpo", "flash_reinforce", "reinforce_baseline",
                                       "reinforce"])
@pytest.mark.parametrize("kl", [None, "k1", "k2", "k3"])
def test_openrlhf(openrlhf, seed, estimator, kl):
    """Samples split over two experiences in shuffled order, their ``index`` giving the rollout order that
    OpenRLHF sorts by before it reshapes; KL in the reward per token; ``reinforce`` with a random gamma, it and
    ``reinforce_baseline`` whitened over the step (biased variance)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    rows = n * int(rng.integers(1, 8))
    cols = ragged(rng, rows, kl=True)
    index = rng.permutation(rows)
    table = pa.table({**cols, "index": pa.array(index)})
    mask, old, ref = padded(table["response_mask"]), padded(table["old_log_probs"]), padded(table["ref_log_prob"])
    coef = 0.0 if kl is None else float(rng.uniform(0.01, 0.3))
    kld = torch.zeros_like(mask) if kl is None else openrlhf.compute_approx_kl(old, ref, kl_estimator=kl)
    half = rows // 2 or rows
    experiences = [types.SimpleNamespace(rewards=torch.tensor(table["score"].to_pylist()[s], dtype=torch.float32),
                                         index=index[s].tolist(), info={}, kl=kld[s], action_mask=mask[s].bool(),
                                         values=None)
                   for s in (slice(0, half), slice(half, rows)) if s.start < rows]
    gamma = float(rng.uniform(0.8, 1.0)) if estimator == "reinforce" else 1.0
    done = _openrlhf_maker(openrlhf, estimator, n, coef, gamma).compute_advantages_and_returns(experiences)
    theirs = torch.cat([e.advantages for e in done])
    settings = {"kl_coef": coef, "kl_penalty": kl} if kl else {}
    if estimator == "reinforce":
        settings["gamma"] = gamma
    ours = rladv_advantages(table, convention="openrlhf", estimator=estimator, group_size=n, **settings)
    assert_close_on_mask(ours, theirs, mask, f"{estimator} {kl} seed {seed}")


# ------------------------------------------------------------------ TRL 1.16.0
def trl_advantages(rewards_per_func: torch.Tensor, n: int, scale_rewards: str) -> torch.Tensor:
    """TRL's own lines from ``_generate_and_score_completions`` (the ``sum_then_normalize`` branch through
    ``nan_to_num``), run with its ``nanstd``, on rewards ``[B, F]`` of F reward functions (weights 1; NaN: the
    function returned None)."""
    block = code_between("trl/trainer/grpo_trainer.py", "_generate_and_score_completions",
                         'if self.multi_objective_aggregation == "sum_then_normalize":',
                         "advantages = torch.nan_to_num(advantages, nan=0.0)")
    namespace = {"torch": torch}
    exec(function_source("trl/trainer/utils.py", "nanstd"), namespace)
    functions = rewards_per_func.shape[1]
    namespace.update(
        self=types.SimpleNamespace(multi_objective_aggregation="sum_then_normalize", scale_rewards=scale_rewards,
                                   reward_weights=torch.ones(functions), reward_funcs=[None] * functions),
        rewards_per_func=rewards_per_func, unscorable_mask=torch.isnan(rewards_per_func).all(dim=1),
        num_generations=n, device="cpu")
    exec(block, namespace)
    return namespace["advantages"]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_trl(seed, scale_rewards):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 6))
    rows = n * int(rng.integers(1, 8))
    table = pa.table(ragged(rng, rows))
    theirs = trl_advantages(torch.tensor(table["score"].to_pylist(), dtype=torch.float32)[:, None], n, scale_rewards)
    mask = padded(table["response_mask"])
    ours = rladv_advantages(table, convention="trl", estimator="grpo", group_size=n, scale_rewards=scale_rewards)
    assert_close_on_mask(ours, theirs[:, None].expand_as(mask), mask, f"seed {seed}")
