"""Writes tests/data/areal_rollouts/rollout/{1,2}/{task_id}.jsonl with AReaL 1.0.4's own code: the trajectory dump
of ``InferenceEngineConfig.dump_to_file`` (areal/infra/workflow_executor.py ``WorkflowExecutor._dump_trajectory``,
called for every finished task, accepted or not, into ``{log_path}/rollout/{tail_version}/{task_id}.jsonl``).
Run it with AReaL's wheel unpacked (its source):

    pip download --no-deps areal==1.0.4 -d /tmp/areal
    unzip -q /tmp/areal/areal-1.0.4-py3-none-any.whl -d /tmp/areal/src
    AREAL_SRC=/tmp/areal/src python tests/data/make_areal_rollouts.py

What runs is AReaL's, taken from its files with ``ast`` (their modules import the whole system: torch.distributed,
torchdata, megatron, aiofiles, the RPC layer) and run as written:

* ``RLVRWorkflow.arun_episode`` (areal/workflow/rlvr.py) builds each sample's trajectory, a batch of one:
  ``input_ids`` (prompt + output tokens), ``loss_mask`` (0 on the prompt, 1 on the output), ``logprobs``,
  ``versions`` (-1 on the prompt, the policy version of each output token), ``attention_mask``, ``rewards``.
  Generation and the reward function (``_collect_samples``) are replaced by fixed responses and rewards.
* ``GroupedRolloutWorkflow.arun_episode`` (areal/infra/remote_inf_engine.py) runs it ``group_size`` times for
  one prompt and joins the results with ``concat_padded_tensors`` (areal/utils/data.py, with
  ``_pad_cat_dim0``, ``is_multi_modal_key``, ``get_batch_size``), leaving out a sample that returned None.
* ``WorkflowExecutor._dump_trajectory`` writes the task's lines. ``aiofiles`` is a thin async stand-in over
  ``open``/``os.makedirs``, ``RTensor.localize`` the identity (the tensors are local), and the tokenizer's
  ``decode`` a stand-in that spells token ids as words (no tokenizer is downloaded here).

The run: group size 4. Version 1: tasks 0 and 1 (a group with equal rewards). Version 2: task 2 (one sample
returned None: a group of 3), task 3 (one sample generated no token: AReaL skips it), task 4 (tokens of two
policy versions: its lines go to version 2, its tail). Rewards are fixed; log-probs are multiples of 1/64.
"""
from __future__ import annotations

import ast
import asyncio
import json
import os
import random
import sys
import types
import uuid
from pathlib import Path

import torch

SRC = Path(os.environ.get("AREAL_SRC", "/tmp/areal_dl/src"))
HERE = Path(__file__).resolve().parent / "areal_rollouts"
GROUP = 4
VOCAB = ["the", "answer", "is", "four", "eleven", "tac", "yes", "no", "so", "=", "2", "+", "</s>"]


def _methods(relative: str, wanted: dict[str, list[str]], namespace: dict) -> dict[str, types.FunctionType]:
    """The named methods of classes (and top-level functions, under "") of one AReaL file, compiled as written."""
    tree = ast.parse((SRC / relative).read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in wanted:
            found.update({(node.name, f.name): f for f in node.body if getattr(f, "name", None) in wanted[node.name]})
        elif getattr(node, "name", None) in wanted.get("", []):
            found[("", node.name)] = node
    assert len(found) == sum(map(len, wanted.values())), (relative, wanted, list(found))
    future = ast.parse("from __future__ import annotations").body
    exec(compile(ast.Module(body=future + list(found.values()), type_ignores=[]), str(SRC / relative), "exec"),
         namespace)
    return {name: namespace[name] for _, name in found}


class _File:
    def __init__(self, path, mode):
        self.f = open(path, mode)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.f.close()

    async def write(self, text):
        self.f.write(text)


async def _makedirs(path, exist_ok=False):
    os.makedirs(path, exist_ok=exist_ok)


class _Interaction:  # areal.experimental.openai's type; no trajectory here is one
    pass


ns = {"torch": torch, "F": torch.nn.functional, "json": json, "os": os, "asyncio": asyncio, "uuid": uuid, "Any": object,
      "RTensor": types.SimpleNamespace(localize=lambda traj: traj),
      "aiofiles": types.SimpleNamespace(open=_File, os=types.SimpleNamespace(makedirs=_makedirs)),
      "ModelRequest": types.SimpleNamespace}
sys.modules["areal"] = types.ModuleType("areal")
sys.modules["areal.experimental"] = types.ModuleType("areal.experimental")
sys.modules["areal.experimental.openai"] = types.SimpleNamespace(InteractionWithTokenLogpReward=_Interaction)
_methods("areal/utils/data.py", {"": ["get_batch_size", "is_multi_modal_key", "_pad_cat_dim0",
                                      "concat_padded_tensors"]}, ns)
RLVR = _methods("areal/workflow/rlvr.py", {"RLVRWorkflow": ["arun_episode"]}, ns)["arun_episode"]
GROUPED = _methods("areal/infra/remote_inf_engine.py", {"GroupedRolloutWorkflow": ["arun_episode"]}, ns)["arun_episode"]
DUMP = _methods("areal/infra/workflow_executor.py", {"WorkflowExecutor": ["_dump_trajectory"]}, ns)["_dump_trajectory"]


class Tokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return " ".join(VOCAB[i % len(VOCAB)] for i in ids)


PROMPTS = ["What is 2+2?", "Name a prime above 10.", "Spell 'cat' backwards.", "Is 7 prime?", "What is 1+1?"]
# per task: version, the samples' rewards (None: the sample returned None; "empty": no output token)
TASKS = [(1, [1.0, 0.0, 1.0, 0.0]), (1, [1.0, 1.0, 1.0, 1.0]), (2, [0.0, None, 1.0, 0.5]),
         (2, [1.0, "empty", 0.0, 0.0]), (2, [0.0, 1.0, 1.0, 0.0])]


def workflow(task_id: int) -> types.SimpleNamespace:
    """RLVRWorkflow's attributes that arun_episode reads, its generation and reward fixed per sample; a sample
    whose reward is None returns None (as a workflow may)."""
    version, rewards = TASKS[task_id]
    rng, samples = random.Random(task_id), iter(rewards)

    async def episode(engine, data):
        reward = next(samples)  # gather starts the samples in order, none awaits before this
        if reward is None:
            return None

        async def collect(engine, req, prompt_str, data):
            n = 0 if reward == "empty" else rng.randint(3, 6)
            versions = [version - 1] * (n // 2) + [version] * (n - n // 2) if task_id == 4 else [version] * n
            return types.SimpleNamespace(
                input_tokens=req.input_ids, input_len=len(req.input_ids), output_len=n,
                output_tokens=[rng.randint(0, 500) for _ in range(n)], output_versions=versions,
                output_logprobs=[-rng.randint(1, 160) / 64 for _ in range(n)]), 0.0 if reward == "empty" else reward

        self = types.SimpleNamespace(
            reward_fn=lambda *a: None, get_input_ids_fn=lambda prompt, tok, thinking: [len(w) for w in prompt.split()],
            data_extract_prompt_fn=lambda d: d["prompt"], tokenizer=Tokenizer(), enable_thinking=False,
            gconfig=types.SimpleNamespace(new=lambda **kw: kw), _collect_samples=collect)
        return await RLVR(self, engine, data)

    return types.SimpleNamespace(arun_episode=episode)


class _Logger:
    def warning(self, *args):
        pass


async def run_task(task_id: int, out: Path) -> None:
    grouped = types.SimpleNamespace(workflow=workflow(task_id), group_size=GROUP, logger=_Logger())
    traj = await GROUPED(grouped, None, {"prompt": PROMPTS[task_id]})
    executor = types.SimpleNamespace(_get_dump_dir=lambda is_eval: str(out / "rollout"),
                                     _get_tokenizer=lambda: Tokenizer(), logger=_Logger())
    ok, why = await DUMP(executor, traj, task_id, False)
    assert ok, why


def main(out: Path = HERE) -> None:
    for task_id in range(len(TASKS)):
        asyncio.run(run_task(task_id, out))


if __name__ == "__main__":
    main()
