"""Optional: rladv against verl 0.9.1's own functions on random ragged batches.

Runs only where verl is importable (`pip install verl==0.9.1` into the venv, then
`python -m pytest -m verl`); the default test run skips it.
"""
import numpy as np
import pyarrow as pa
import pytest
import torch

import rladv_cli
from rladv_cli.estimators.registry import REFERENCE_NAMES

pytestmark = pytest.mark.verl
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")


class AlgoSection(dict):
    """verl reads its algorithm config both as attributes and with .get()."""

    __getattr__ = dict.__getitem__


def random_batch(seed: int, rows: int = 24):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 40, rows)
    uids = [f"p{int(u)}" for u in rng.integers(0, rows // 3, rows)]
    masks, scores, values, old, ref, spp = [], [], [], [], [], []
    for L in lengths:
        m = np.ones(L, dtype=np.int8)
        for _ in range(rng.integers(0, 3)):  # tool-observation spans
            a = int(rng.integers(0, L))
            m[a:a + int(rng.integers(1, 6))] = 0
        s = np.zeros(L, dtype=np.float32)
        s[-1] = rng.choice([0.0, 0.25, 0.5, 1.0])
        masks.append(m)
        scores.append(s)
        values.append((rng.normal(size=L).astype(np.float32) * m))
        old.append(rng.normal(-1, 0.3, L).astype(np.float32))
        ref.append(rng.normal(-1, 0.3, L).astype(np.float32))
        spp.append(rng.uniform(0.05, 0.9, L).astype(np.float32))
    # every group gets 2+ rows so grpo_passk (which refuses singletons) runs on the same data
    uids = [u if uids.count(u) > 1 else uids[0] for u in uids]
    table = pa.table({
        "uid": uids,
        "response_mask": pa.array([m.tolist() for m in masks], pa.list_(pa.int8())),
        "rm_scores": pa.array([s.tolist() for s in scores], pa.list_(pa.float32())),
        "values": pa.array([v.tolist() for v in values], pa.list_(pa.float32())),
        "old_log_probs": pa.array([o.tolist() for o in old], pa.list_(pa.float32())),
        "ref_log_prob": pa.array([r.tolist() for r in ref], pa.list_(pa.float32())),
        "sum_pi_squared": pa.array([x.tolist() for x in spp], pa.list_(pa.float32())),
        "reward_baselines": pa.array(rng.choice([0.0, 0.5, 1.0], rows).astype(np.float32)),
    })
    return table


def padded(table, column, dtype):
    rows = table[column].to_pylist()
    T = max(len(r) for r in rows)
    out = torch.zeros(len(rows), T, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=dtype)
    return out


def verl_outputs(table, estimator, gamma, lam, kl_coef, kl_mode):
    mask = padded(table, "response_mask", torch.int64)
    scores = padded(table, "rm_scores", torch.float32)
    rewards = scores
    if kl_coef:
        kld = core_algos.kl_penalty(padded(table, "old_log_probs", torch.float32),
                                    padded(table, "ref_log_prob", torch.float32), kl_mode) * mask
        rewards = scores - kl_coef * kld
    index = np.array(table["uid"].to_pylist(), dtype=object)
    fn = core_algos.get_adv_estimator_fn(estimator)
    if estimator == "gae":
        adv, ret = fn(rewards, padded(table, "values", torch.float32), mask, gamma, lam)
    elif estimator == "grpo":
        adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=index)
    elif estimator == "remax":
        adv, ret = fn(token_level_rewards=rewards, response_mask=mask,
                      reward_baselines=torch.tensor(table["reward_baselines"].to_pylist(), dtype=torch.float32))
    elif estimator in ("optimal_token_baseline", "tir_optimal_token_baseline"):
        adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=index,
                      old_log_probs=padded(table, "old_log_probs", torch.float32),
                      sum_pi_squared=padded(table, "sum_pi_squared", torch.float32))
    elif estimator == "gdpo":
        adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=index)
    else:
        adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=index,
                      config=AlgoSection(gamma=gamma, norm_adv_by_std_in_grpo=True))
    return rewards, mask, adv, ret


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("estimator", sorted(n for n in rladv_cli.ESTIMATORS if n in REFERENCE_NAMES))  # verl's own
@pytest.mark.parametrize("kl", [(0.0, "kl"), (0.05, "low_var_kl"), (0.02, "kl")])
def test_rladv_equals_verl(seed, estimator, kl):
    table = random_batch(seed)
    gamma, lam = 0.99, 0.95
    rewards, mask, adv, ret = verl_outputs(table, estimator, gamma, lam, *kl)
    out, _ = rladv_cli.compute(table, estimator=estimator, gamma=gamma, lam=lam, kl_coef=kl[0], kl_penalty=kl[1],
                               rpp_mask_mode="carry", device="cpu", chunk_rows=7)
    got_r = padded(out, "token_level_rewards", torch.float32)
    got_a = padded(out, "advantages", torch.float32)
    got_ret = padded(out, "returns", torch.float32)
    valid = mask > 0
    torch.testing.assert_close(got_r, rewards, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_a[valid], adv[valid], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got_ret[valid], ret[valid], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("gamma, lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.5)])
def test_gae_on_the_cpu_is_bit_identical_to_verl(seed, gamma, lam):
    """The C loop evaluates verl's recurrence in verl's order and rounding: GAE returns (raw advantages +
    values, before verl's whitening) agree bit for bit, not just within the tolerance."""
    from rladv_cli.estimators.gae import gae
    from rladv_cli.estimators.inputs import Inputs
    from rladv_cli.tensors.batch import from_arrow
    from rladv_cli.tensors.kernels import NATIVE_SCAN

    if not NATIVE_SCAN:
        pytest.skip("the C scan was not built")
    table = random_batch(seed)
    mask = padded(table, "response_mask", torch.float32)
    _, want = core_algos.compute_gae_advantage_return(
        padded(table, "rm_scores", torch.float32), padded(table, "values", torch.float32), mask, gamma, lam)
    params = rladv_cli.Config(estimator="gae", gamma=gamma, lam=lam).params()
    _, got = gae(from_arrow(table, 0, torch.device("cpu")), Inputs(), params)
    lengths = [len(r) for r in table["response_mask"].to_pylist()]
    flat_want = torch.cat([want[i, :n] for i, n in enumerate(lengths)])
    kept = torch.cat([mask[i, :n] for i, n in enumerate(lengths)]) > 0
    assert torch.equal(got[kept], flat_want[kept])
