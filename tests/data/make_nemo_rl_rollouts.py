"""Writes tests/data/nemo_rl_rollouts/train_data_step{1,2}.jsonl with NeMo-RL's own code: the per-step training
dump GRPO writes (nemo_rl/algorithms/grpo.py, "Log training data": ``logger.log_batched_dict_as_jsonl(log_data,
f"train_data_step{total_steps + 1}.jsonl")``). Run it with NeMo-RL's source on the path, e.g. from its mirror:

    mkdir -p /tmp/nemo_src && git -C /work/.mirror/NVIDIA-NeMo+RL/repo archive HEAD nemo_rl | tar -x -C /tmp/nemo_src
    NEMO_RL_SRC=/tmp/nemo_src python tests/data/make_nemo_rl_rollouts.py

(NeMo-RL 7ea279abfbeb698b092856d0dab61e7cf39bc909). What runs is NeMo-RL's:

* ``Logger.log_batched_dict_as_jsonl`` (nemo_rl/utils/logger.py) writes the files. ``Logger.__init__`` starts the
  configured backends (wandb, tensorboard, mlflow, ...), so the unbound method is called on a minimal object that
  has only ``base_log_dir``, the one attribute the method reads. It wraps the dict in ``BatchedDataDict`` and
  iterates ``make_microbatch_iterator(1)``, whose ``slice`` gives every field as ``value[i:i+1]``: a list of
  length 1 (``rewards`` ``[r]``, ``token_ids`` ``[[...]]`` padded to the batch's longest sequence), plus ``idx``.
* ``batched_message_log_to_flat_message`` (nemo_rl/data/llm_message_utils.py) flattens and right-pads the
  message logs (``token_ids`` with the pad id, every other per-token field with 0; ``input_lengths`` the
  unpadded lengths; ``content`` each sample's list of message texts), as grpo.py does for the batch and for the
  prompts it groups by (``prompt_ids_for_adv``).
* ``add_grpo_token_loss_masks_and_generation_logprobs`` (grpo.py; token_loss_mask 1 on assistant messages that
  have generation_logprobs, else 0), ``calculate_baseline_and_std_per_prompt`` (nemo_rl/algorithms/utils.py) and
  ``GRPOAdvantageEstimator`` (nemo_rl/algorithms/advantage_estimator.py; leave-one-out baseline, std
  normalisation): their modules import the whole trainer (transformers, vLLM, ...), so their source is taken
  from the files with ``ast`` and run as it is. ``backfill_missing_routed_experts`` (router replay, which this
  batch does not use) is a no-op there.

Modules the two imported ones pull in but these functions do not use (mlflow, swanlab, wandb, prometheus_client,
torch.utils.tensorboard, transformers, datasets) are empty stubs in ``sys.modules``. The batch: 3 prompts x 4
samples (the prompt's token ids shared within a group), one sample (step 1, prompt 2, sample 3) multi-turn with
a tool observation between two generated turns (token_loss_mask 0 inside the response), one sample with
sample_mask 0 (step 2), a group with equal rewards (step 2); ``prev_logprobs`` nonzero on prompt tokens too (a
policy's logprobs of every input token, the first 0), ``generation_logprobs`` only on generated tokens.
Log-probs are multiples of 1/64 so that the files stay small.
"""
from __future__ import annotations

import ast
import os
import random
import sys
import types
from pathlib import Path

import torch

# stub_modules.py is beside this file; the regeneration tests run its text with -c, from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parent if "__file__" in globals() else Path("tests/data").resolve()))
from stub_modules import install_stubs  # noqa: E402

SRC = Path(os.environ.get("NEMO_RL_SRC", "/tmp/nemo_src"))
HERE = Path(__file__).resolve().parent / "nemo_rl_rollouts"
STUBS = ("mlflow", "swanlab", "wandb", "prometheus_client", "torch.utils.tensorboard", "transformers", "datasets")
PAD = 0


def _from_source(relative: str, names: list[str], namespace: dict) -> dict:
    """Run the named top-level functions/classes of one NeMo-RL file, as written there, in ``namespace``."""
    tree = ast.parse((SRC / relative).read_text())
    nodes = [n for n in tree.body if getattr(n, "name", None) in names]
    assert sorted(n.name for n in nodes) == sorted(names), (relative, names)
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(SRC / relative), "exec"), namespace)
    return namespace


install_stubs(STUBS)
sys.path.insert(0, str(SRC))
from nemo_rl.data.llm_message_utils import batched_message_log_to_flat_message  # noqa: E402
from nemo_rl.utils.logger import Logger  # noqa: E402

ns = {"torch": torch, "cast": lambda _t, v: v, "backfill_missing_routed_experts": lambda logs: None,
      "AdvEstimatorConfig": object, "ClippedPGLossConfig": object, "LLMMessageLogType": list,
      "VLMMessageLogType": list}
_from_source("nemo_rl/algorithms/utils.py", ["calculate_baseline_and_std_per_prompt"], ns)
_from_source("nemo_rl/algorithms/advantage_estimator.py", ["GRPOAdvantageEstimator"], ns)
_from_source("nemo_rl/algorithms/grpo.py", ["add_grpo_token_loss_masks_and_generation_logprobs"], ns)

PROMPTS = [[151644, 872, 3838, 374, 220, 17, 10, 17], [151644, 872, 7535, 264, 10250], [151644, 872, 41710, 8251]]
REWARDS = {1: [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.5]],
           2: [[1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 1.0, 1.0]]}


def _logprobs(rng: random.Random, n: int) -> torch.Tensor:
    return torch.tensor([-rng.randint(1, 160) / 64 for _ in range(n)], dtype=torch.float32)


def _tokens(rng: random.Random, n: int) -> torch.Tensor:
    return torch.tensor([rng.randint(100, 150000) for _ in range(n)], dtype=torch.int64)


def batch(step: int):
    rng = random.Random(step)
    logs, prompt_logs, rewards, loss_multiplier = [], [], [], []
    for g, prompt in enumerate(PROMPTS):
        for s in range(4):
            user = {"role": "user", "content": f"prompt {g}", "token_ids": torch.tensor(prompt)}
            n = rng.randint(3, 8)
            answer = {"role": "assistant", "content": f"answer {s} to prompt {g}", "token_ids": _tokens(rng, n),
                      "generation_logprobs": _logprobs(rng, n)}
            log = [user, answer]
            if step == 1 and (g, s) == (2, 3):  # multi-turn: a tool's observation, then a second generated turn
                log = [user, {**answer, "content": "<tool_call>look</tool_call>"},
                       {"role": "tool", "content": "observation", "token_ids": _tokens(rng, 3)},
                       {"role": "assistant", "content": "final answer", "token_ids": _tokens(rng, 2),
                        "generation_logprobs": _logprobs(rng, 2)}]
            logs.append(log)
            prompt_logs.append([dict(user)])
            rewards.append(REWARDS[step][g][s])
            loss_multiplier.append(0.0 if step == 2 and (g, s) == (0, 2) else 1.0)
    ns["add_grpo_token_loss_masks_and_generation_logprobs"](logs)
    flat, input_lengths = batched_message_log_to_flat_message(logs, pad_value_dict={"token_ids": PAD},
                                                              make_sequence_length_divisible_by=4)
    prompt_ids, _ = batched_message_log_to_flat_message(prompt_logs, pad_value_dict={"token_ids": PAD})
    rewards = torch.tensor(rewards, dtype=torch.float32)
    sample_mask = torch.tensor(loss_multiplier, dtype=torch.float32)
    token_mask = flat["token_loss_mask"]
    # a policy's logprob of every input token (the first 0, padding 0)
    prev = torch.zeros(flat["token_ids"].shape, dtype=torch.float32)
    for i, length in enumerate(input_lengths.tolist()):
        prev[i, 1:length] = _logprobs(rng, length - 1)
    cfg = types.SimpleNamespace(use_leave_one_out_baseline=True, normalize_rewards=True)
    advantages = ns["GRPOAdvantageEstimator"](cfg, None).compute_advantage(
        prompt_ids=prompt_ids["token_ids"], rewards=rewards, mask=token_mask * sample_mask.unsqueeze(-1))
    # grpo.py's "Log training data" block, field for field
    return {"content": flat["content"], "rewards": rewards.tolist(), "input_lengths": input_lengths.tolist(),
            "token_ids": flat["token_ids"].tolist(), "token_loss_mask": token_mask.tolist(),
            "sample_loss_mask": sample_mask.tolist(), "advantages": advantages.tolist(),
            "generation_logprobs": flat["generation_logprobs"].tolist(), "prev_logprobs": prev.tolist()}


if __name__ == "__main__":
    os.makedirs(HERE, exist_ok=True)
    writer = types.SimpleNamespace(base_log_dir=str(HERE))
    for step in (1, 2):
        Logger.log_batched_dict_as_jsonl(writer, batch(step), f"train_data_step{step}.jsonl")
