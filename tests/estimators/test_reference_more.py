"""The oracle for the remaining estimators (those test_reference.py does not check: grpo_passk, remax, opo, gpg, the
optimal-token baselines, gdpo): docs/semantics.md's worked examples and verl 0.9.1's golden outputs (the expected
token_level_rewards as input), through the oracle map ``reference.ORACLE``."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

import reference as ref
from conftest import GOLDEN, case_estimator, golden_cases
from rladv_cli.estimators.registry import ESTIMATORS
from test_reference import ESTIMATORS as CHECKED_IN_TEST_REFERENCE

# every registered estimator whose golden cases test_reference.py does not check against the oracle
MORE = tuple(name for name in ESTIMATORS if name not in CHECKED_IN_TEST_REFERENCE)


def close(got, want, atol=1e-6):
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64), atol=atol)


def test_worked_examples():
    r, m, u = [[1.0], [0.0], [0.5]], [[1], [1], [1]], ["a"] * 3
    close(ref.grpo_passk(r, m, u)[0], [[0.999998], [0], [0]])
    close(ref.grpo_passk(r, m, u, norm_adv_by_std=False)[0], [[0.5], [0], [0]])
    with pytest.raises(ValueError, match="at least 2 samples"):
        ref.grpo_passk(r, m, ["a", "a", "b"])
    adv, ret = ref.remax([[0.1, 0, 1.0]], [[1, 1, 1]], [0.5])
    close(ret, [[1.1, 1.0, 1.0]])
    close(adv, [[0.6, 0.5, 0.5]])
    close(ref.opo([[0, 0, 1.0], [0.0], [0, 0.5]], [[1, 1, 1], [1], [1, 1]], u)[0], [[1 / 3] * 3, [-2 / 3], [-1 / 6] * 2])
    close(ref.gpg(r, m, u)[0], [[0.75], [-0.75], [0]])
    close(ref.gpg([[1.0], [0.0], [0.0], [0.0]], [[1]] * 4, ["a", "a", "b", "b"])[0], [[2], [-2], [0], [0]])
    adv, _ = ref.gdpo([[0, 0, 1.0], [0.0, 0, 0], [0, 0, 0.5]], [[1, 1, 1], [1, 0, 0], [1, 1, 0]], u)
    close(adv, [[0.8164966] * 3, [-1.6329931, 0, 0], [-0.4082482, -0.4082482, 0]])


def _cases():
    for c in golden_cases().values():
        a = c["rladv_args"]
        est = case_estimator(c)
        if est in MORE and "--rollout-rs" not in a and "--rollout-is" not in a:
            yield pytest.param(c, est, id=Path(c["expected"]).stem)


@pytest.mark.parametrize("case, est", list(_cases()))
def test_golden(case, est):
    t, e = pq.read_table(GOLDEN / case["input"]), pq.read_table(GOLDEN / case["expected"])
    r, m = e["token_level_rewards"].to_pylist(), e["response_mask"].to_pylist()
    columns = SimpleNamespace(uids=t["uid"].to_pylist(), **{name: t[name].to_pylist() for name in (
        "values", "reward_baselines", "old_log_probs", "sum_pi_squared") if name in t.column_names})
    args = case["rladv_args"]
    number = lambda flag: float(args[args.index(flag) + 1]) if flag in args else 1.0  # noqa: E731
    settings = dict(gamma=number("--gamma"), lam=number("--lam"), norm_adv_by_std="--no-norm-adv-by-std" not in args,
                    rpp_mask_mode=args[args.index("--rpp-mask-mode") + 1] if "--rpp-mask-mode" in args else "reset")
    for flag, kind in (("--mean-level", str), ("--std-level", str), ("--k", int), ("--vapo-alpha", float),
                       ("--value-lam", float)):  # the other trainers' estimators' own settings
        if flag in args:
            settings[flag[2:].replace("-", "_")] = kind(args[args.index(flag) + 1])
    adv, ret = ref.ORACLE[est](r, m, columns, settings)
    valid = np.concatenate([np.asarray(x) for x in m]) > 0
    if est == "grpo_loo":  # near-tied non-dyadic groups: NeMo-RL's matrix product's summation order decides them
        valid &= np.concatenate([np.full(len(x), keep) for x, keep in zip(m, _well_conditioned(r, columns.uids))])
    # grpo_passk divides by the group std: near-tied KL-shaped groups amplify the float32 summation order of
    # R (sequential here, torch's cascade in verl) as in tests/estimators/test_reference.py's _reduction_slack
    divides = "std" in ESTIMATORS[est].group_statistics
    atol = 1e-4 if divides and "--kl-coef" in case["rladv_args"] else 1e-5
    for got, column in ((adv, "advantages"), (ret, "returns")):
        want = np.concatenate([np.asarray(x) for x in e[column].to_pylist()])
        np.testing.assert_allclose(np.concatenate(got)[valid], want[valid], atol=atol, rtol=1e-4, err_msg=column)


def _well_conditioned(rewards, uids) -> list[bool]:
    """Rows whose group's float32 totals are not all equal unless they are small dyadic numbers: the oracle's
    sequential sums and NeMo-RL's matrix product agree on the others (tests/pipeline/test_golden.py compares
    the rest with NeMo-RL's own output)."""
    R = [np.float32(np.sum(np.asarray(x, np.float32))) for x in rewards]
    members: dict = {}
    for i, u in enumerate(uids):
        members.setdefault(u, []).append(R[i])
    def ok(g):
        g = np.asarray(g, np.float64)
        return g.size < 2 or np.ptp(g) > 1e-6 * np.max(np.abs(g)) or bool(np.all(g * 16 == np.round(g * 16)))
    return [ok(members[u]) for u in uids]
