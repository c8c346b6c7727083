"""Golden cases of the estimators rladv takes from other trainers, made by those trainers' own functions.

    bash tests/data/fetch_peers.sh DIR
    RLADV_PEER_SRC=DIR .venv/bin/python tests/data/make_peer_golden.py

writes ``tests/golden/expected/mix__{grpo_loo,maxrl}__plain.parquet`` from ``tests/golden/inputs/mix.parquet`` and
their entries in ``tests/golden/cases.json`` (``reference`` names the function): ``grpo_loo`` by NeMo-RL's
``GRPOAdvantageEstimator`` (nemo_rl/algorithms/advantage_estimator.py at 7ea279a), its prompt ids standing for
the uids; ``maxrl`` by SkyRL 0.3.0's ``compute_maxrl_advantage``. The trainers' modules are loaded as the
optional differential tests load them (tests/against_peers/peers.py).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "against_peers"))
from peers import load  # noqa: E402

GOLDEN = ROOT / "tests" / "golden"


def padded(column, dtype=torch.float32):
    rows = column.to_pylist()
    out = torch.zeros(len(rows), max(len(r) for r in rows), dtype=dtype)
    for i, r in enumerate(rows):
        out[i, :len(r)] = torch.tensor(r, dtype=dtype)
    return out


def nemo_rl_grpo(table):
    load("nemo_rl/algorithms/utils.py", "nemo_rl.algorithms.utils", stubs=(
        "transformers", "nemo_rl.data.chat_templates", "nemo_rl.models.policy", "nemo_rl.utils.fastokens",
        "nemo_rl.utils.logger"))
    module = load("nemo_rl/algorithms/advantage_estimator.py", "nemo_rl.algorithms.advantage_estimator",
                  stubs=("nemo_rl.algorithms.loss",))
    rewards, mask = padded(table["rm_scores"]), padded(table["response_mask"])
    uids = table["uid"].to_pylist()
    prompt_ids = torch.tensor([[sorted(set(uids)).index(u)] for u in uids])
    estimator = module.GRPOAdvantageEstimator(module.AdvEstimatorConfig(), None)
    return estimator.compute_advantage(prompt_ids, rewards.sum(-1), mask) * mask


def skyrl_maxrl(table):
    module = load("skyrl/backends/skyrl_train/utils/ppo_utils.py", "skyrl_ppo_utils", stubs=(
        "ray", "jaxtyping", "loguru", "skyrl.backends.skyrl_train.utils.off_policy_correction_utils",
        "skyrl.backends.skyrl_train.utils.torch_utils", "skyrl.train.config"), ray={"is_initialized": lambda: False})
    advantages, _ = module.compute_maxrl_advantage(
        token_level_rewards=padded(table["rm_scores"]), response_mask=padded(table["response_mask"]),
        index=np.array(table["uid"].to_pylist(), dtype=object))
    return advantages


MADE_BY = {
    "grpo_loo": (nemo_rl_grpo, "NeMo-RL 0.6.0 (7ea279a) GRPOAdvantageEstimator, CPU, float32"),
    "maxrl": (skyrl_maxrl, "SkyRL 0.3.0 compute_maxrl_advantage, CPU, float32"),
}


def main() -> None:
    table = pq.read_table(GOLDEN / "inputs" / "mix.parquet")
    lengths = [len(m) for m in table["response_mask"].to_pylist()]
    cases_path = GOLDEN / "cases.json"
    cases = json.loads(cases_path.read_text())
    for name, (make, reference) in MADE_BY.items():
        advantages = make(table)
        rows = [advantages[i, :n].tolist() for i, n in enumerate(lengths)]
        expected = f"expected/mix__{name}__plain.parquet"
        pq.write_table(pa.table({
            "uid": table["uid"], "token_level_rewards": table["rm_scores"],
            "response_mask": pa.array([[float(x) for x in m] for m in table["response_mask"].to_pylist()],
                                      pa.list_(pa.float32())),
            "advantages": pa.array(rows, pa.list_(pa.float32())), "returns": pa.array(rows, pa.list_(pa.float32())),
            "row_id": table["row_id"]}), GOLDEN / expected)
        entry = {"input": "inputs/mix.parquet", "expected": expected, "rladv_args": ["--estimator", name],
                 "metrics": {}, "reference": reference}
        cases["cases"] = [c for c in cases["cases"] if c["expected"] != expected] + [entry]
    cases_path.write_text(json.dumps(cases, indent=1) + "\n")


if __name__ == "__main__":
    main()
