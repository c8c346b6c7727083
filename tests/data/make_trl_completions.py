"""The TRL completion logs in tests/data/trl_completions, as TRL 1.16.0's GRPO trainer writes them.

    bash tests/data/fetch_peers.sh DIR
    RLADV_PEER_SRC=DIR .venv/bin/python tests/data/make_trl_completions.py

``GRPOTrainer.log`` (trl/trainer/grpo_trainer.py) writes ``completions/completions_{global_step:05d}.parquet``
from the table ``{"step", "prompt", "completion", **rewards, **extra, "advantage"}`` of its ``_logs`` (the last
generation batch, in the trainer's order: each prompt's ``num_generations`` completions next to each other);
``pd.DataFrame(table).to_parquet`` makes int64, string and float64 columns, which pyarrow writes here. The
advantages are TRL's own: the lines of ``_generate_and_score_completions`` run on the rewards
(tests/against_peers/peers.py), with ``num_generations`` 4 and ``scale_rewards`` "group"; one completion's
format reward is None (NaN), as a reward function may return.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "against_peers"))
sys.path.insert(0, str(ROOT / "tests" / "against_peers"))
from test_peers_differential import trl_advantages  # noqa: E402

OUT = ROOT / "tests" / "data" / "trl_completions"
N = 4
PROMPTS = ["What is 2+2?", "Name a prime above 10.", "Spell 'cat' backwards.", "What is 3*3?"]


def main() -> None:
    rng = np.random.default_rng(7)
    OUT.mkdir(exist_ok=True)
    for step in (1, 2):
        prompts = [p for p in PROMPTS for _ in range(N)]
        accuracy = rng.choice([0.0, 1.0], len(prompts))
        accuracy[:N] = 1.0  # one prompt every completion solves: all-equal
        fmt = rng.choice([0.0, 0.5], len(prompts))
        fmt[5] = np.nan  # a reward function that returned None
        rewards = torch.tensor(np.stack([accuracy, fmt], axis=1), dtype=torch.float32)
        advantages = trl_advantages(rewards, N, "group")
        pq.write_table(pa.table({
            "step": pa.array([step] * len(prompts), pa.int64()),
            "prompt": prompts,
            "completion": [f"completion {i} of step {step}" for i in range(len(prompts))],
            "accuracy_reward": accuracy, "format_reward": fmt,
            "solution": [f"solution of {p}" for p in prompts],  # an extra column of a reward function
            "advantage": advantages.double().numpy(),
        }), OUT / f"completions_{step:05d}.parquet")


if __name__ == "__main__":
    main()
