"""Optional: the whole loop with verl 0.9.1's own trainer functions. A padded DataProto goes through verl's
``apply_kl_penalty`` and ``compute_advantage`` (its legacy trainer's step functions), is written by
``dump_batch`` and replayed by ``rladv compute``: the replay must agree.

Runs only where verl is importable (``python -m pytest -m verl``); the default test run skips it.
"""
import json

import numpy as np
import pytest
import torch

from conftest import runner
from rladv_cli.cli import app
from rladv_cli.io.dump import dump_batch

pytestmark = pytest.mark.verl
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
from verl import DataProto  # noqa: E402

PROMPT, PAD = 5, 7  # prompt width; response padding beyond the longest response


class AlgoSection(dict):
    """verl reads its algorithm config both as attributes and with .get()."""

    __getattr__ = dict.__getitem__


def trainer_batch(seed: int, rows: int = 24) -> DataProto:
    """A batch as verl's trainer holds it before the advantage step: right-padded responses of width T, the
    prompt + response attention mask, a scalar score at each row's last non-padding position, tool-observation
    spans (response_mask 0), critic values on actor tokens, log-probs, uids in groups of 2+."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, rows)
    T = int(lengths.max()) + PAD
    attention = torch.zeros(rows, PROMPT + T, dtype=torch.int64)
    attention[:, PROMPT - 2:PROMPT] = 1  # left-padded prompts
    mask = torch.zeros(rows, T, dtype=torch.int64)
    scores = torch.zeros(rows, T)
    for i, n in enumerate(lengths):
        attention[i, PROMPT:PROMPT + n] = 1
        mask[i, :n] = 1
        for _ in range(rng.integers(0, 3)):
            a = int(rng.integers(0, n))
            mask[i, a:min(a + int(rng.integers(1, 5)), n)] = 0
        scores[i, n - 1] = float(rng.choice([0.0, 0.25, 0.5, 1.0]))
    old = torch.tensor(rng.normal(-1, 0.3, (rows, T)), dtype=torch.float32)
    uids = [f"p{int(u)}" for u in rng.integers(0, rows // 3, rows)]
    uids = [u if uids.count(u) > 1 else uids[0] for u in uids]
    return DataProto.from_dict(
        tensors={
            "prompts": torch.ones(rows, PROMPT, dtype=torch.int64),
            "responses": torch.tensor(rng.integers(3, 1000, (rows, T))),
            "attention_mask": attention,
            "response_mask": mask,
            "token_level_scores": scores,
            "old_log_probs": old,
            "ref_log_prob": old + torch.tensor(rng.normal(0, 0.1, (rows, T)), dtype=torch.float32),
            "values": torch.tensor(rng.normal(size=(rows, T)), dtype=torch.float32) * mask,
            "sum_pi_squared": torch.tensor(rng.uniform(0.05, 0.9, (rows, T)), dtype=torch.float32),
            "reward_baselines": torch.tensor(rng.choice([0.0, 0.5, 1.0], rows), dtype=torch.float32),
        },
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


# (verl's estimator and settings, the rladv options that say the same)
CASES = [
    ("gae", dict(gamma=0.99, lam=0.95), ["--gamma", "0.99", "--lam", "0.95"]),
    ("grpo", {}, []),
    ("grpo", dict(norm_adv_by_std_in_grpo=False), ["--no-norm-adv-by-std"]),
    ("rloo", {}, []),
    ("reinforce_plus_plus", dict(gamma=0.99), ["--gamma", "0.99", "--rpp-mask-mode", "carry"]),
    ("reinforce_plus_plus_baseline", {}, []),
    ("remax", {}, []),
    ("opo", {}, []),
    ("gpg", {}, []),
    ("optimal_token_baseline", {}, []),
]


@pytest.mark.parametrize("kl", [False, True], ids=["no-kl", "kl"])
@pytest.mark.parametrize("estimator, settings, options", CASES, ids=[" ".join([c[0], *c[2]]) for c in CASES])
def test_verls_trainer_step_replays(estimator, settings, options, kl, tmp_path):
    data = trainer_batch(seed=len(estimator) + 10 * kl)
    if kl:
        data, _ = ray_trainer.apply_kl_penalty(data, core_algos.FixedKLController(0.05), kl_penalty="kl")
    else:
        data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    settings = dict(settings)  # the parameters are shared by both KL variants
    norm = settings.pop("norm_adv_by_std_in_grpo", True)
    config = AlgoSection(gamma=settings.get("gamma", 1.0), lam=settings.get("lam", 1.0), norm_adv_by_std_in_grpo=norm)
    data = ray_trainer.compute_advantage(data, estimator, norm_adv_by_std_in_grpo=norm, config=config, **settings)
    dumped = dump_batch(data, tmp_path / "step.parquet", step=1)
    assert {"token_level_rewards", "advantages", "returns", "attention_mask"} <= set(dumped.columns)
    report = tmp_path / "r.json"
    kl_options = ["--kl-coef", "0.05", "--kl-penalty", "kl"] if kl else []
    result = runner.invoke(app, ["compute", str(tmp_path / "step.parquet"), "--estimator", estimator, *options,
                                      *kl_options, "-o", str(tmp_path / "out.parquet"), "--report", str(report), "-q",
                                      "--device", "cpu"])
    assert result.exit_code == 0, result.output
    replay = json.loads(report.read_text())["replay"]
    assert replay["compared"] == ["token_level_rewards", "advantages", "returns"]
    assert replay["agree"], json.dumps(replay["columns"], indent=1)
