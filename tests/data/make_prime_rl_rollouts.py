"""Writes tests/data/prime_rl_rollouts/rollouts/step_{1,2}/train/effective/traces.jsonl (and step 1's ``all``)
with prime-rl's and verifiers' own code: the episode log prime-rl's file monitor keeps (src/prime_rl/monitors/file.py
``FileMonitor.log_episodes``; the orchestrator logs each arriving episode to ``all`` and, in
``finalize_train_batch``, the shipped cohort's ``effective.vf_episodes`` to ``effective``). Run it with both
sources and orjson on the path, e.g. from their mirrors:

    mkdir -p /tmp/vf_src /tmp/prl_src /tmp/peer_py && pip install --target /tmp/peer_py orjson
    git -C /work/.mirror/PrimeIntellect-ai+verifiers/repo archive HEAD verifiers | tar -x -C /tmp/vf_src
    git -C /work/.mirror/PrimeIntellect-ai+prime-rl/repo archive HEAD src/prime_rl | tar -x -C /tmp/prl_src
    PYTHONPATH=/tmp/peer_py VERIFIERS_SRC=/tmp/vf_src PRIME_RL_SRC=/tmp/prl_src/src \
        python tests/data/make_prime_rl_rollouts.py

(prime-rl 559b44772e471d1538537b8805cc77f3824a5e64, its verifiers submodule a60a606ecc4d309247edf9ff92c3eabca362781f).
What runs is theirs:

* verifiers' pydantic models (verifiers/v1/episode.py ``Episode``, trace.py ``Trace``, graph.py ``MessageNode``)
  hold the episodes, and ``Episode.to_record()`` makes each line. Their packages' ``__init__`` import the whole
  v1 stack (clients, harnesses, sandboxes), so ``verifiers`` and ``verifiers.v1`` are bare packages over the
  source folders; modules the models' imports pull in but these models do not use (renderers, anthropic,
  openai, httpx, h11, prime_sandboxes) are stubs, and ``pydantic_config.BaseConfig`` (prime's config base,
  not on PyPI here) is a plain pydantic model: ``agent.config`` in the records may differ from a real run's.
  The nodes are built as verifiers' graph builder (graph.py ``_commit_turn``) lays them: a message's template
  scaffold and tokens in ``token_ids``, ``mask`` true on an assistant's sampled completion only, ``logprobs``
  per sampled token, each node's ``parent`` the previous message's node.
* prime-rl's ``GRPOAlgorithm.score_group`` (orchestrator/algo/grpo.py, with ``iter_trainable_traces`` and
  ``assign_advantages`` from base.py and routing.py) assigns the advantages; ``iter_trainable_branches``
  (trajectories.py) and ``_prune_zero_advantages`` (train_sink.py; ``filter_zero_advantages`` is on by
  default) decide which traces ship; ``TrainEpisodes.effective.vf_episodes`` (metrics.py) makes the logged
  cohort; ``FileMonitor.log_episodes`` writes. Their modules import prime-rl's configs and transports, so
  their source is taken from the files with ``ast`` and run as it is.

The run: group size 4, env ``gsm8k``; rewards ``correct`` (weight 1) and ``format`` (weight 0.5). Step 1: group
A (a multi-turn trace with a tool observation), group B (one errored trace, and one whose reward equals the
group mean, so its advantages are 0 and it does not ship). Step 2: group C (a trace that forks: two branches
sharing a sampled turn), group E (each episode also has an untrainable ``judge`` trace). Only step 1's arrivals
are logged to ``all``, to keep the files small. Timestamps, ids and token ids are fixed; log-probs are multiples
of 1/64.
"""
from __future__ import annotations

import ast
import asyncio
import os
import random
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pydantic
import torch

# stub_modules.py is beside this file; the regeneration tests run its text with -c, from the repository root
sys.path.insert(0, str(Path(__file__).resolve().parent if "__file__" in globals() else Path("tests/data").resolve()))
from stub_modules import install_stubs  # noqa: E402

VF_SRC = Path(os.environ.get("VERIFIERS_SRC", "/tmp/vf_src"))
PRL_SRC = Path(os.environ.get("PRIME_RL_SRC", "/tmp/prl_src/src"))
HERE = Path(__file__).resolve().parent / "prime_rl_rollouts"
STUBS = ("renderers", "anthropic", "openai", "httpx", "h11", "prime_sandboxes")


def _model(module: str, name: str) -> type:
    """A stub's placeholder: a pydantic model that takes any fields (verifiers' models have fields of its type)."""
    return type(name, (pydantic.BaseModel,), {"__module__": module, "model_config": pydantic.ConfigDict(
        extra="allow", arbitrary_types_allowed=True)})


class _BaseConfig(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


install_stubs(STUBS, _model)
sys.modules["pydantic_config"] = types.SimpleNamespace(BaseConfig=_BaseConfig)
for _name, _folder in (("verifiers", VF_SRC / "verifiers"), ("verifiers.v1", VF_SRC / "verifiers" / "v1")):
    _package = types.ModuleType(_name)
    _package.__path__ = [str(_folder)]
    sys.modules[_name] = _package
from verifiers.v1.configs.agent import AgentConfig  # noqa: E402
from verifiers.v1.episode import EnvInfo, Episode, GroupInfo, PolicySpan, TrainRunInfo, TrainWorkInfo  # noqa: E402
from verifiers.v1.graph import MessageNode  # noqa: E402
from verifiers.v1.trace import AgentInfo, Error, Reward, Timing, Trace, TraceTask, VersionInfo  # noqa: E402
from verifiers.v1.types import AssistantMessage, ToolMessage, UserMessage  # noqa: E402


def _from_source(relative: str, names: list[str], namespace: dict) -> dict:
    """Run the named top-level functions/classes of one prime-rl file, as written there, in ``namespace``."""
    tree = ast.parse((PRL_SRC / relative).read_text())
    nodes = [n for n in tree.body if getattr(n, "name", None) in names]
    assert sorted(n.name for n in nodes) == sorted(names), (relative, names)
    future = ast.parse("from __future__ import annotations").body
    exec(compile(ast.Module(body=future + nodes, type_ignores=[]), str(PRL_SRC / relative), "exec"), namespace)
    return namespace


class _Logger:
    def info(self, *args):
        pass

    warning = debug = info


ns = {"dataclass": dataclass, "Callable": object, "Any": object, "ABC": object, "abstractmethod": lambda f: f,
      "overload": lambda f: f, "get_logger": _Logger, "asyncio": asyncio, "TYPE_CHECKING": False,
      "torch": torch}
__import__("orjson")
ns["orjson"] = sys.modules["orjson"]
_from_source("prime_rl/orchestrator/algo/base.py", ["iter_trainable_traces", "Algorithm"], ns)
_from_source("prime_rl/orchestrator/algo/routing.py", ["assign_advantages", "scalar_advantage"], ns)
_from_source("prime_rl/orchestrator/algo/grpo.py", ["GRPOAlgorithm"], ns)
_from_source("prime_rl/orchestrator/trajectories.py", ["iter_trainable_branches"], ns)
_from_source("prime_rl/orchestrator/train_sink.py", ["_prune_zero_advantages"], ns)
_from_source("prime_rl/orchestrator/metrics.py", ["TraceRecord", "_records", "EpisodeCollection", "TrainEpisodes"], ns)
_from_source("prime_rl/monitors/base.py", ["Monitor"], ns)
_from_source("prime_rl/monitors/file.py", ["FileMonitor"], ns)

START = 1_760_000_000.0
BUILD = VersionInfo(version="0.3.1", commit="a60a606ecc4d309247edf9ff92c3eabca362781f")
ENV = EnvInfo(id="gsm8k", name="gsm8k")
PROMPTS = {"A": ("What is 2+2?", [3838, 374, 220, 17, 10, 17]), "B": ("Name a prime above 10.", [7535, 264, 10250]),
           "C": ("Spell 'cat' backwards.", [41710, 8251]), "E": ("Is 7 prime?", [3872, 22, 10250])}
# per episode: (correct, format) scores; None: the episode's trace errored
REWARDS = {"A": [(1.0, 1.0), (0.0, 1.0), (1.0, 0.0), (0.0, 0.0)], "B": [(1.0, 0.0), None, (0.0, 0.0), (0.5, 0.0)],
           "C": [(1.0, 1.0), (0.0, 1.0), (1.0, 1.0), (0.0, 0.0)],
           "E": [(1.0, 0.0), (0.0, 0.0), (0.0, 0.0), (1.0, 1.0)]}
STEPS = {1: "AB", 2: "CE"}
USER, ASSISTANT, TOOL = [151644, 872], [151645, 151644, 77091], [151645, 151644, 14172]  # template scaffolds


class Turns:
    """Message nodes as verifiers' graph builder lays them, each a child of the one before unless told."""

    def __init__(self, rng: random.Random, stamp: float):
        self.rng, self.stamp, self.nodes = rng, stamp, []

    def add(self, message, tokens: list[int], sampled: int = 0, parent: int | None = -1) -> int:
        parent = len(self.nodes) - 1 if parent == -1 else parent  # -1: the node before; None: a root
        completion = [self.rng.randint(100, 150000) for _ in range(sampled)]
        self.stamp += 1.0
        self.nodes.append(MessageNode(
            parent=parent, message=message, sampled=sampled > 0, timestamp=self.stamp,
            token_ids=tokens + completion, mask=[False] * len(tokens) + [True] * sampled,
            logprobs=[-self.rng.randint(1, 160) / 64 for _ in range(sampled)]))
        return len(self.nodes) - 1


def trace(key: str, g: str, e: int, rewards, rng: random.Random, agent: str = "solver") -> Trace:
    prompt, ids = PROMPTS[g]
    turns = Turns(rng, START + 100 * e)
    turns.add(UserMessage(content=prompt), USER + ids, parent=None)
    first = turns.add(AssistantMessage(content=f"answer {e}"), ASSISTANT, sampled=rng.randint(3, 6))
    if (g, e) == ("A", 1):  # multi-turn: a tool's observation, then a second sampled turn
        turns.add(ToolMessage(tool_call_id="call_0", content="4"), TOOL + [19])
        turns.add(AssistantMessage(content="final answer"), ASSISTANT, sampled=2)
    if (g, e) == ("C", 0):  # a fork after the first turn: two branches share it, it trains in the first only
        turns.add(UserMessage(content="Are you sure?"), USER + [11, 12])
        turns.add(AssistantMessage(content="yes"), ASSISTANT, sampled=2)
        turns.add(UserMessage(content="Summarise."), USER + [13], parent=first)
        turns.add(AssistantMessage(content="tac"), ASSISTANT, sampled=3)
    task = TraceTask(type="Task", data={"idx": ord(g) - ord("A"), "question": prompt}, key=key)
    if rewards is None:
        return Trace(id=f"{key}-{agent}", verifiers=BUILD, task=task, agent=AgentInfo(config=AgentConfig(), name=agent),
                     nodes=turns.nodes[:1], errors=[Error(type="SandboxError", message="sandbox timed out")],
                     is_completed=True, ok=False, stop_condition="error", timing=Timing(start=turns.stamp))
    return Trace(id=f"{key}-{agent}", verifiers=BUILD, task=task,
                 agent=AgentInfo(config=AgentConfig(), name=agent, trainable=agent == "solver"), nodes=turns.nodes,
                 rewards={"correct": Reward(score=rewards[0]), "format": Reward(score=rewards[1], weight=0.5)},
                 is_completed=True, ok=True, stop_condition="stop", timing=Timing(start=turns.stamp))


def group(step: int, g: str) -> list[Episode]:
    rng = random.Random(f"{step}{g}")
    episodes = []
    for e, rewards in enumerate(REWARDS[g]):
        key = f"{g.lower()}{e}"
        traces = [trace(key, g, e, rewards, rng)]
        if g == "E":
            traces.append(trace(key, g, e, (1.0, 1.0), rng, agent="judge"))
        episodes.append(Episode(
            id=f"episode-{step}-{key}", env=ENV, task=traces[0].task, group=GroupInfo(id=f"group-{step}-{g}"),
            run=TrainRunInfo(id="run-0", name="rladv-fixture", work=TrainWorkInfo(
                step=step - 1, policy=PolicySpan(start=step - 1, end=step - 1))),
            ok=rewards is not None, traces=traces))
    return episodes


def shipped(episodes: list[Episode]) -> set[str]:
    """train_sink's selection: traces with a trainable branch whose RL tokens are not all pruned (advantage 0)."""
    ids = set()
    for _, t in ns["iter_trainable_traces"](episodes):
        samples = [types.SimpleNamespace(mask=mask, advantages=branch.advantages, rl_weights=None, ce_weights=None,
                                         ref_kl_weights=None) for branch, mask in ns["iter_trainable_branches"](t)]
        if any(ns["_prune_zero_advantages"](s) for s in samples):
            ids.add(t.id)
    return ids


def main(out: Path = HERE) -> None:
    monitor = object.__new__(ns["FileMonitor"])
    monitor.output_dir = out
    grpo = ns["GRPOAlgorithm"](types.SimpleNamespace(length_penalty=None), None)
    for step, groups in STEPS.items():
        cohort, ids = [], set()
        for g in groups:
            episodes = group(step, g)
            for episode in episodes if step == 1 else ():  # orchestrator.py: each arrival goes to ``all``
                asyncio.run(monitor.log_episodes([episode], step, "train", "all"))
            asyncio.run(grpo.finalize_group(episodes))
            ships = shipped(episodes)
            ids |= ships
            cohort += [e.model_copy(update={"traces": [t for t in e.traces if t.id in ships]}) for e in episodes
                       if any(t.id in ships for t in e.traces)]
        effective = ns["TrainEpisodes"](cohort, sampled_trace_ids=ids).effective
        asyncio.run(monitor.log_episodes(effective.vf_episodes, step, "train", "effective"))


if __name__ == "__main__":
    main()
