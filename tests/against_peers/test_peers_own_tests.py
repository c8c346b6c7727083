"""Optional: the trainers' own unit tests of what rladv follows under ``--convention``, re-expressed.

Each test names the trainer's test it comes from and checks its case against rladv, running the trainer's own code
(loaded from its released source, ``peers.py``) where it loads, plus random batches through that code for the
same behaviour: OpenRLHF 0.11.2's ``tests/test_reward_shaping.py`` (its wheel), NeMo-RL's
``tests/unit/algorithms/test_reward_functions.py`` and ``test_grpo.py`` (7ea279a), TRL's ``tests/test_utils.py``
``TestNanStd`` and the unscorable rows of ``GRPOTrainer`` (1.16.0), SkyRL's ``tests/train/test_trainer.py``
(skyrl-v0.3.0). NeMo-RL's ``reward_functions.py`` and ``grpo.py`` are among the files ``fetch_peers.sh`` fetches.
"""
from __future__ import annotations

import types

import numpy as np
import pyarrow as pa
import pytest
import torch

import rladv_cli
from peers import (code_between, function_source, load, nemo_rl_advantage_estimator, openrlhf_experience_maker,
                   skyrl_ppo_utils)
from test_peers_differential import SEEDS, assert_close_on_mask, padded, ragged, rladv_advantages, trl_advantages

pytestmark = pytest.mark.peers
ns = types.SimpleNamespace
I8 = pa.list_(pa.int8())


def outcome_table(scores, masks, score_type=None, **columns) -> pa.Table:
    """One score per row (float32 unless ``score_type``), the masks as int8 lists, and ``columns``."""
    return pa.table({"response_mask": pa.array(masks, I8), "score": pa.array(scores, score_type or pa.float32()),
                     **columns})


@pytest.fixture(scope="module")
def openrlhf():
    return openrlhf_experience_maker()


@pytest.fixture(scope="module")
def nemo_rl():
    return nemo_rl_advantage_estimator()


@pytest.fixture(scope="module")
def skyrl():
    return skyrl_ppo_utils()


# ------------------------------------------------------------------ OpenRLHF 0.11.2 (tests/test_reward_shaping.py)
def openrlhf_maker(module, estimator: str, n: int, *, no_std_norm: bool = False, overlong=None, stop=None,
                   gamma: float = 1.0):
    """A ``RemoteExperienceMaker`` without its Ray actors, as OpenRLHF's own tests build it: the settings its
    advantage step reads; ``overlong``: (buffer_len, penalty_factor, max_new_tokens)."""
    buffer_len, factor, max_new = overlong or (None, 1.0, None)
    args = ns(rollout=ns(n_samples_per_prompt=n, max_new_tokens=max_new), data=ns(max_len=max_new),
              reward=ns(clip_range=None, overlong_buffer_len=buffer_len, overlong_penalty_factor=factor,
                        stop_properly_penalty_coef=stop),
              algo=ns(advantage=ns(estimator=estimator, gamma=gamma, lambd=1.0, no_std_norm=no_std_norm)))
    maker = object.__new__(module.RemoteExperienceMaker)
    maker.strategy, maker.args, maker.advantage_estimator, maker.kl_ctl = ns(args=args), args, estimator, ns(value=0.0)
    return maker


def openrlhf_experience(rewards: torch.Tensor, mask: torch.Tensor, index, **fields):
    return ns(rewards=rewards, index=list(index), info={"reward": rewards.clone()}, kl=torch.zeros_like(mask),
              action_mask=mask.bool(), values=torch.zeros_like(mask), response_length=fields.get("response_length"),
              truncated=fields.get("truncated"))


def rladv_openrlhf(table: pa.Table, estimator: str, n: int, no_std_norm: bool = False, **settings) -> torch.Tensor:
    if estimator in ("reinforce", "reinforce_baseline"):  # OpenRLHF's no_std_norm is rladv's --no-norm-adv-by-std
        settings["norm_adv_by_std"] = not no_std_norm
    return rladv_advantages(table, convention="openrlhf", estimator=estimator, group_size=n, **settings)


OPENRLHF_ESTIMATORS = ["reinforce", "group_norm", "rloo", "reinforce_baseline", "dr_grpo", "flash_reinforce"]


@pytest.mark.parametrize("estimator", OPENRLHF_ESTIMATORS)  # its "gae" is not followed
@pytest.mark.parametrize("dtype", ["float16", "float32", "int64", "float64"])  # bfloat16 has no Parquet type
def test_openrlhf_reward_shaping_matches_fp32_reference(openrlhf, estimator, dtype):
    """test_reward_shaping_matches_fp32_reference: no_std_norm, rewards of several dtypes; the advantages are the
    float32 reference (R − mean; rloo × 4/3; group_norm over std + 1e-9)."""
    values = [0, 0, 0, 1] if dtype == "int64" else [1, 1, 1, 1.0078125]
    rewards = torch.tensor(values, dtype=getattr(torch, dtype))
    mask = torch.ones(4, 2)
    theirs = openrlhf_maker(openrlhf, estimator, 4, no_std_norm=True).compute_advantages_and_returns(
        [openrlhf_experience(rewards, mask, range(4))])[0].advantages
    reference = rewards.float() - rewards.float().mean()
    if estimator == "rloo":
        reference *= 4 / 3
    elif estimator == "group_norm":
        reference /= rewards.float().std() + 1e-9
    ours = rladv_openrlhf(outcome_table(values, [[1, 1]] * 4, getattr(pa, dtype)()), estimator, 4, no_std_norm=True)
    torch.testing.assert_close(ours, reference[:, None].expand(-1, 2))
    torch.testing.assert_close(ours, theirs.float())


@pytest.mark.parametrize("dtype", ["float16", "int64"])
def test_openrlhf_constant_rewards_have_finite_zero_group_advantages(openrlhf, dtype):
    """test_constant_rewards_have_finite_zero_group_advantages: group_norm of two zeros is 0, not NaN."""
    theirs = openrlhf_maker(openrlhf, "group_norm", 2).compute_advantages_and_returns(
        [openrlhf_experience(torch.zeros(2, dtype=getattr(torch, dtype)), torch.ones(2, 1), [0, 1])])[0].advantages
    ours = rladv_openrlhf(outcome_table([0, 0], [[1], [1]], getattr(pa, dtype)()), "group_norm", 2)
    torch.testing.assert_close(ours, torch.zeros(2, 1))
    torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("dtype, gap", [("float32", 1 / 128), ("float64", 1e-8)])  # its bfloat16 case as float32
def test_openrlhf_group_advantages_produce_reference_policy_gradient(openrlhf, dtype, gap):
    """test_group_advantages_produce_reference_policy_gradient: 1, 1, 1, 1 + gap; float64 rewards stay float64,
    so 1e-8 is no tie; the gradient of OpenRLHF's PolicyLoss is −reference / mask.sum(), which is rladv's
    token_weight under --loss-agg-mode token-mean."""
    rewards = torch.tensor([1, 1, 1, 1 + gap], dtype=getattr(torch, dtype))
    mask = torch.ones(4, 2)
    advantage = openrlhf_maker(openrlhf, "group_norm", 4).compute_advantages_and_returns(
        [openrlhf_experience(rewards, mask, range(4))])[0].advantages
    loss_module = load("openrlhf/models/loss.py", "openrlhf.models.loss")
    log_probs = torch.zeros(4, 2, requires_grad=True)
    loss, *_ = loss_module.PolicyLoss()(log_probs, log_probs.detach(), advantage, mask)
    loss.backward()
    reference = (rewards.double() - rewards.double().mean()) / (rewards.double().std() + 1e-9)
    torch.testing.assert_close(advantage, reference.float()[:, None].expand(-1, 2))
    out, _ = rladv_cli.compute(outcome_table(rewards.tolist(), [[1, 1]] * 4, getattr(pa, dtype)()), device="cpu",
                               convention="openrlhf", estimator="group_norm", group_size=4, loss_agg_mode="token-mean")
    torch.testing.assert_close(padded(out["advantages"]), reference.float()[:, None].expand(-1, 2))
    torch.testing.assert_close(padded(out["token_weight"]), -log_probs.grad)


def test_openrlhf_integer_rewards_preserve_fractional_length_penalty(openrlhf):
    """test_integer_rewards_preserve_fractional_length_penalty: integer rewards 1, 1, max_new_tokens 2, buffer 1,
    factor .5, response lengths 2 and 1: the rewards .5 and 1, dr_grpo −.25 and .25 on every token (rladv's row
    of length 1 has its one action token, where OpenRLHF's test keeps two)."""
    experience = openrlhf_experience(torch.tensor([1, 1]), torch.ones(2, 2), [0, 1],
                                     response_length=torch.tensor([2, 1]))
    done = openrlhf_maker(openrlhf, "dr_grpo", 2, overlong=(1, 0.5, 2)).compute_advantages_and_returns([experience])[0]
    torch.testing.assert_close(done.rewards, torch.tensor([0.5, 1.0]))
    torch.testing.assert_close(done.advantages, torch.tensor([[-0.25, -0.25], [0.25, 0.25]]))
    out, _ = rladv_cli.compute(outcome_table([1, 1], [[1, 1], [1]], pa.int64()), device="cpu", convention="openrlhf",
                               estimator="dr_grpo", group_size=2, overlong_buffer_len=1, overlong_penalty_factor=0.5,
                               max_resp_len=2)
    assert out["advantages"].to_pylist() == [[-0.25, -0.25], [0.25]]
    assert [sum(r) for r in out["token_level_rewards"].to_pylist()] == done.rewards.tolist()


def test_openrlhf_flash_reinforce_centers_on_the_rollout_batch_mean(openrlhf):
    """test_flash_reinforce_centers_on_the_rollout_batch_mean_without_whitening: one sample per prompt, rewards
    1, 0, 0, 0 -> .75, −.25, −.25, −.25, and advantages equal the returns."""
    done = openrlhf_maker(openrlhf, "flash_reinforce", 1).compute_advantages_and_returns(
        [openrlhf_experience(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.ones(4, 2), range(4))])[0]
    out, _ = rladv_cli.compute(outcome_table([1.0, 0.0, 0.0, 0.0], [[1, 1]] * 4), device="cpu", convention="openrlhf",
                               estimator="flash_reinforce", group_size=1)
    want = torch.tensor([0.75, -0.25, -0.25, -0.25])[:, None].expand(-1, 2)
    torch.testing.assert_close(padded(out["advantages"]), want)
    torch.testing.assert_close(padded(out["returns"]), want)
    torch.testing.assert_close(done.advantages, want)


def action_span(mask: torch.Tensor) -> torch.Tensor:
    """OpenRLHF's ``response_length`` of each row (``samples_generator._process_response_into_experience``): its
    first to its last action token, inclusive; 0 without one."""
    out = []
    for row in mask:
        ones = torch.where(row > 0)[0]
        out.append(int(ones[-1] - ones[0] + 1) if len(ones) else 0)
    return torch.tensor(out)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator", OPENRLHF_ESTIMATORS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_openrlhf_length_penalties_no_std_norm_and_reward_dtypes(openrlhf, seed, estimator, dtype):
    """Random rewards with near-ties (gaps float32 cannot hold, which float64 keeps), OpenRLHF's overlong penalty
    on the action spans of masks with observation spans, its stop-properly penalty (a negative coefficient
    replaces) and no_std_norm, over two experiences in shuffled sample order."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 5))
    rows = n * int(rng.integers(1, 6))
    cols = ragged(rng, rows)
    base = rng.choice([0.0, 1.0, 0.5], rows)
    scores = (base + rng.choice([0.0, 1e-9, 3e-8, 1e-7], rows) * rng.integers(-3, 4, rows)).astype(dtype)
    truncated = rng.random(rows) < 0.3
    index = rng.permutation(rows)
    table = pa.table({**cols, "score": pa.array(scores, getattr(pa, dtype)()), "truncated": pa.array(truncated),
                      "index": pa.array(index)})
    mask = padded(table["response_mask"])
    buffer_len = int(rng.integers(1, 8))
    overlong = (buffer_len, float(rng.uniform(0.1, 2.0)), buffer_len + int(rng.integers(0, 20)))
    stop = float(rng.choice([0.5, 0.0, -0.5, 1.0]))
    no_std_norm = bool(rng.integers(0, 2))
    half = rows // 2 or rows
    # copies: OpenRLHF shapes its rewards in place, and the table may share the array's memory
    experiences = [openrlhf_experience(torch.tensor(scores[s]), mask[s], index[s].tolist(),
                                       response_length=action_span(mask[s]), truncated=torch.tensor(truncated[s]))
                   for s in (slice(0, half), slice(half, rows)) if s.start < rows]
    maker = openrlhf_maker(openrlhf, estimator, n, no_std_norm=no_std_norm, overlong=overlong, stop=stop)
    theirs = torch.cat([e.advantages for e in maker.compute_advantages_and_returns(experiences)])
    ours = rladv_openrlhf(table, estimator, n, no_std_norm, overlong_buffer_len=overlong[0],
                          overlong_penalty_factor=overlong[1], max_resp_len=overlong[2],
                          stop_properly_penalty_coef=stop)
    assert_close_on_mask(ours, theirs, mask, f"{estimator} {dtype} seed {seed}")


# ------------------------------------------------------------------ NeMo-RL (7ea279a)
@pytest.fixture(scope="module")
def nemo_shaping():
    return load("nemo_rl/algorithms/reward_functions.py", "nemo_rl.algorithms.reward_functions",
                stubs=("nemo_rl.distributed.batched_data_dict",))


@pytest.fixture(scope="module")
def nemo_clip():
    """``_clip_grpo_advantages`` of ``nemo_rl/algorithms/grpo.py``, run as its own source (grpo.py imports the
    whole trainer)."""
    namespace = {"torch": torch, "GRPOConfig": object}
    exec(function_source("nemo_rl/algorithms/grpo.py", "_clip_grpo_advantages"), namespace)
    return namespace["_clip_grpo_advantages"]


def nemo_shaped(module, rewards, truncated, coef) -> torch.Tensor:
    """NeMo-RL's ``apply_reward_shaping`` of ``rewards`` with its stop-properly penalty ``coef``."""
    batch = {"total_reward": torch.tensor(rewards), "truncated": torch.tensor(truncated)}
    config = module.RewardShapingConfig(enabled=True, stop_properly_penalty_coef=coef)
    return module.apply_reward_shaping(batch, config)["total_reward"]


@pytest.mark.parametrize("rewards, truncated, coef, want", [
    ([1.0, 0.8, 0.6, 0.4], [False, True, False, True], 0.5, [1.0, 0.4, 0.6, 0.2]),  # test_stop_properly_penalty
    ([1.0, 0.5], [True, True], 0.0, [0.0, 0.0]),  # test_stop_properly_penalty_boundary_coefs
    ([1.0, 0.5], [True, True], 1.0, [1.0, 0.5]),
])
def test_nemo_rl_stop_properly_penalty(nemo_shaping, nemo_rl, rewards, truncated, coef, want):
    """The truncated rows' rewards scaled, in rladv's shaped totals and so in NeMo-RL's advantages of them."""
    shaped = nemo_shaped(nemo_shaping, rewards, truncated, coef)
    torch.testing.assert_close(shaped, torch.tensor(want), atol=1e-6, rtol=0)
    n = len(rewards)
    table = outcome_table(rewards, [[1]] * n, uid=pa.array(["p"] * n), truncated=pa.array(truncated))
    out, _ = rladv_cli.compute(table, device="cpu", convention="nemo_rl", estimator="grpo",
                               stop_properly_penalty_coef=coef)
    assert [sum(r) for r in out["token_level_rewards"].to_pylist()] == shaped.tolist()
    config = nemo_rl.AdvEstimatorConfig(use_leave_one_out_baseline=True, normalize_rewards=True)
    theirs = nemo_rl.GRPOAdvantageEstimator(config, None).compute_advantage(
        torch.ones(n, 1, dtype=torch.long), shaped, torch.ones(n, 1))
    torch.testing.assert_close(padded(out["advantages"]), theirs)


@pytest.mark.parametrize("coef", [-0.1, 1.5])
def test_nemo_rl_stop_properly_penalty_error_cases(nemo_shaping, coef):
    """test_stop_properly_penalty_error_cases: NeMo-RL asserts 0 <= coef <= 1; rladv refuses both under nemo_rl."""
    with pytest.raises(AssertionError, match="stop_properly_penalty_coef must be in"):
        nemo_shaped(nemo_shaping, [1.0, 0.5], [False, True], coef)
    with pytest.raises(rladv_cli.RladvError, match="stop_properly_penalty_coef"):
        rladv_cli.Config(convention="nemo_rl", estimator="grpo", stop_properly_penalty_coef=coef)


def test_nemo_rl_clip_grpo_advantages_respects_config_bounds(nemo_clip):
    """test_clip_grpo_advantages_respects_config_bounds: [[-10, 15], [0, 5]] clamped to [-2, 3]; unchanged without
    bounds. rladv's rows are the same values as pairs without std (R − the other row's)."""
    extreme = torch.tensor([[-10.0, 15.0], [0.0, 5.0]])
    clipped = nemo_clip(extreme.clone(), ns(advantage_clip_low=-2.0, advantage_clip_high=3.0))
    assert (clipped.min().item(), clipped.max().item()) == (-2.0, 3.0)
    assert torch.equal(nemo_clip(extreme.clone(), ns(advantage_clip_low=None, advantage_clip_high=None)), extreme)
    # pairs [0, 10] -> -10, 10 and [15, 0] -> 15, -15: the four values of its matrix and their negatives
    table = outcome_table([0.0, 10.0, 15.0, 0.0], [[1]] * 4, uid=pa.array(["a", "a", "b", "b"]))
    for low, high in ((-2.0, 3.0), (None, None), (-2.0, None), (None, 3.0)):
        ours = rladv_advantages(table, convention="nemo_rl", estimator="grpo", norm_adv_by_std=False,
                                adv_clip_low=low, adv_clip_high=high)
        raw = torch.tensor([[-10.0], [10.0], [15.0], [-15.0]])
        assert torch.equal(ours, nemo_clip(raw, ns(advantage_clip_low=low, advantage_clip_high=high)))


@pytest.mark.parametrize("seed", SEEDS)
def test_nemo_rl_advantages_clipped_asymmetrically(nemo_rl, nemo_clip, seed):
    """NeMo-RL's GRPO advantages of random prompt groups, then its clip with random one- or two-sided bounds."""
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(4, 40))
    uids = [f"p{int(u)}" for u in rng.integers(0, max(rows // 3, 1), rows)]
    table = pa.table({"uid": uids, **ragged(rng, rows)})
    low = None if rng.random() < 0.3 else float(rng.uniform(-2.0, 0.0))
    high = None if rng.random() < 0.3 else float(rng.uniform(0.0, 2.0))
    prompt_ids = torch.tensor([[int(u[1:])] for u in uids])
    mask = padded(table["response_mask"])
    config = nemo_rl.AdvEstimatorConfig(use_leave_one_out_baseline=True, normalize_rewards=True)
    theirs = nemo_clip(nemo_rl.GRPOAdvantageEstimator(config, None).compute_advantage(
        prompt_ids, torch.tensor(table["score"].to_pylist(), dtype=torch.float32), mask),
        ns(advantage_clip_low=low, advantage_clip_high=high))
    ours = rladv_advantages(table, convention="nemo_rl", estimator="grpo", adv_clip_low=low, adv_clip_high=high)
    assert_close_on_mask(ours, theirs, mask, f"seed {seed} [{low}, {high}]")


# ------------------------------------------------------------------ TRL 1.16.0
@pytest.mark.parametrize("x, dim, want", [
    ([1.0, 2.0, 3.0, float("nan")], None, 1.0),  # TestNanStd.test_nanstd_ignores_nans
    ([[1.0, float("nan")], [3.0, 5.0]], 1, [float("nan"), 1.4142135]),  # test_nanstd_dim_and_keepdim
    ([float("nan"), float("nan")], None, float("nan")),  # test_nanstd_all_nan
])
def test_trl_nanstd(x, dim, want):
    """rladv's ``nanstd`` (estimators/trl.py) gives TRL's values on TRL's cases, and TRL's own function agrees."""
    from rladv_cli.estimators.trl import nanstd

    namespace = {"torch": torch}
    exec(function_source("trl/trainer/utils.py", "nanstd"), namespace)
    x = torch.tensor(x)
    torch.testing.assert_close(nanstd(x, dim), torch.tensor(want), equal_nan=True, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(nanstd(x, dim), namespace["nanstd"](x, dim), equal_nan=True)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_trl_unscorable_rows(seed, scale_rewards):
    """Two reward functions returning None for some completions, every one of them for a few (unscorable): TRL's
    own lines from ``sum_then_normalize`` to ``nan_to_num`` against rladv on the nansum, null where all are None
    (what ``rladv convert --from trl`` writes)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 6))
    rows = n * int(rng.integers(1, 8))
    cols = ragged(rng, rows)
    per_func = torch.tensor(rng.choice([0.0, 1.0, 0.5, -0.3], (rows, 2)), dtype=torch.float32)
    per_func[torch.from_numpy(rng.random((rows, 2)) < 0.25)] = float("nan")
    theirs = trl_advantages(per_func, n, scale_rewards)
    unscorable = torch.isnan(per_func).all(dim=1)
    score = [None if u else float(s) for u, s in zip(unscorable, per_func.nansum(dim=1))]
    table = pa.table({**cols, "score": pa.array(score, pa.float32())})
    mask = padded(table["response_mask"])
    ours = rladv_advantages(table, convention="trl", estimator="grpo", group_size=n, scale_rewards=scale_rewards)
    assert_close_on_mask(ours, theirs[:, None].expand_as(mask), mask, f"seed {seed}")


# ------------------------------------------------------------------ SkyRL 0.3.0 (tests/train/test_trainer.py)
def skyrl_step_wise(skyrl, rewards, mask, uids, is_last_step, estimator: str, norm_by_std: bool = True):
    """SkyRL's own step-wise branch of ``RayPPOTrainer.compute_advantages_and_returns`` (its lines, run with the
    trainer's config and batch as it reads them): ``(advantages, returns)``."""
    block = code_between("skyrl/train/trainer.py", "compute_advantages_and_returns",
                         "if self.cfg.generator.step_wise_trajectories:",
                         "returns = last_step_returns[traj_ids] * response_mask_float")
    algorithm = ns(advantage_estimator=estimator, gamma=1.0, lambd=1.0, grpo_norm_by_std=norm_by_std)
    data = {"rewards": rewards, "response_mask": mask, "values": torch.zeros_like(rewards)}
    namespace = {"torch": torch, "np": np, "ppo_utils": skyrl, "token_level_rewards": rewards,
                 "self": ns(cfg=ns(generator=ns(step_wise_trajectories=True), trainer=ns(algorithm=algorithm))),
                 "data": type("Batch", (dict,), {"metadata": {"is_last_step": list(is_last_step), "uids": uids}})(data)}
    exec(block, namespace)
    return namespace["advantages"], namespace["returns"]


def test_skyrl_calc_advantages_and_returns_step_wise_broadcast(skyrl):
    """test_calc_advantages_and_returns_step_wise_broadcast: trajectories A (rewards 2 at its last step) and B (0),
    two steps each, one group, grpo without std: +1 on every token of A's steps, −1 on B's."""
    masks = [[1, 1, 1, 1], [1], [1, 1, 1], [1, 1]]
    mask = padded(pa.array(masks, I8))
    rewards = torch.zeros_like(mask)
    rewards[1, 0] = 2.0  # the last token of A's last step
    is_last_step = [False, True, False, True]
    theirs, returns = skyrl_step_wise(skyrl, rewards, mask, np.array(["grp0"] * 4), is_last_step, "grpo",
                                      norm_by_std=False)
    table = outcome_table([0.0, 2.0, 0.0, 0.0], masks, uid=pa.array(["grp0"] * 4), is_last_step=pa.array(is_last_step))
    out, _ = rladv_cli.compute(table, device="cpu", convention="skyrl", estimator="grpo", norm_adv_by_std=False)
    want = torch.tensor([[1.0] * 4, [1.0, 0, 0, 0], [-1.0] * 3 + [0], [-1.0] * 2 + [0, 0]])
    torch.testing.assert_close(theirs, want)
    torch.testing.assert_close(returns, want)
    torch.testing.assert_close(padded(out["advantages"]), want)
    torch.testing.assert_close(padded(out["returns"]), want)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("estimator, norm_by_std", [("grpo", True), ("grpo", False), ("rloo", True), ("maxrl", True)])
def test_skyrl_step_wise_trajectories(skyrl, seed, estimator, norm_by_std):
    """Random trajectories of 1-4 steps (rewards on every step, of which SkyRL reads the last's), uid groups of
    uneven sizes with singletons, steps without actor tokens; SkyRL's own step-wise branch against rladv."""
    rng = np.random.default_rng(seed)
    trajectories = int(rng.integers(2, 14))
    uid_of = [f"p{int(u)}" for u in rng.integers(0, max(trajectories // 2, 1), trajectories)]
    steps = rng.integers(1, 5, trajectories)
    uids = [u for u, k in zip(uid_of, steps) for _ in range(k)]
    is_last_step = [i == k - 1 for k in steps for i in range(k)]
    rows = len(uids)
    cols = ragged(rng, rows)
    table = pa.table({"uid": uids, **cols, "is_last_step": pa.array(is_last_step)})
    mask = padded(table["response_mask"])
    lengths = torch.tensor([len(m) for m in table["response_mask"].to_pylist()])
    rewards = torch.zeros_like(mask)
    rewards[torch.arange(rows), lengths - 1] = torch.tensor(table["score"].to_pylist(), dtype=torch.float32)
    theirs, _ = skyrl_step_wise(skyrl, rewards, mask, np.array(uids, dtype=object), is_last_step, estimator,
                                norm_by_std)
    ours = rladv_advantages(table, convention="skyrl", estimator=estimator,
                            **({} if estimator != "grpo" else {"norm_adv_by_std": norm_by_std}))
    assert_close_on_mask(ours, theirs, mask, f"{estimator} seed {seed}")
