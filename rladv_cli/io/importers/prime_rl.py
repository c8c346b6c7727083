"""prime-rl's episode log (docs/dumps.md, "Trainers' logs"): ``rollouts/step_N/train/effective/traces.jsonl``,
one verifiers ``Episode.to_record()`` per line (``FileMonitor.log_episodes``), each trace a message graph whose
root-to-leaf branches are prime-rl's training samples. Read line by line in Python: a branch is a walk over the
nodes' ``parent`` links, which a columnar reader cannot do."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from ...errors import InputError
from . import common
from .common import Format, Options, integer, json_lines, number

STEP = re.compile(r"step_(\d+)")
SKIPPED = ("all", "eval")  # a folder's other subsets: every arrival (no advantages yet), and evaluation
TYPES = {"uid": pa.string(), "step": pa.int64(), "score": pa.float32(), "responses": pa.list_(pa.int32()),
         "response_mask": pa.list_(pa.int8()), "rollout_log_probs": pa.list_(pa.float32()),
         "advantages": pa.list_(pa.float32()), "ref_log_prob": pa.list_(pa.float32()), "episode_id": pa.string(),
         "trace_id": pa.string(), "branch": pa.int64(), "agent": pa.string(), "env": pa.string(),
         "dispatch_step": pa.int64(), "stop_condition": pa.string()}
OPTIONAL = ("advantages", "ref_log_prob")


def _find(folder: Path) -> list[str]:
    """A folder's ``traces.jsonl`` files below it, but those of the ``all`` and ``eval`` subsets (unless the
    folder is inside one)."""
    return [str(q) for q in folder.rglob("traces.jsonl")
            if q.is_file() and not set(q.relative_to(folder).parts[:-1]) & set(SKIPPED)]


def step_of(path: str) -> int | None:
    """The N of the nearest ``step_N`` folder above ``path``."""
    for part in reversed(Path(path).resolve().parts[:-1]):
        found = STEP.fullmatch(part)
        if found:
            return int(found.group(1))
    return None


def _order(p: str):
    step = step_of(p)
    return (0, step, p) if step is not None else (1, 0, p)


def _numbers(node: dict, name: str, n: int) -> str | None:
    values = node.get(name)
    if values is not None and (not isinstance(values, list) or len(values) != n or not all(map(number, values))):
        return f"{name} is not {n} numbers (one per sampled token, mask's {n} true values)"
    return None


def _nodes(trace: dict) -> tuple[str | None, list]:
    """A problem, or the trace's nodes, each checked: token_ids, a mask as long, per-sampled-token logprobs
    (and advantages, reference_logprobs when there), a parent index."""
    nodes = trace.get("nodes", [])
    if not isinstance(nodes, list):
        return "nodes is not a list", []
    for i, node in enumerate(nodes):
        where = f"node {i}"
        if not isinstance(node, dict):
            return f"{where} is not an object", []
        ids, mask = node.get("token_ids", []), node.get("mask", [])
        if not isinstance(ids, list) or not all(map(integer, ids)):
            return f"{where}: token_ids is not a list of token ids", []
        if not isinstance(mask, list) or len(mask) != len(ids) or any(not isinstance(m, bool) for m in mask):
            return f"{where}: mask is not {len(ids)} (token_ids) true/false values", []
        n = sum(mask)
        for name in ("logprobs", "advantages", "reference_logprobs"):
            problem = _numbers(node, name, n) if name != "logprobs" or n else None
            if problem:
                return f"{where}: {problem}", []
        parent = node.get("parent")
        if parent is not None and (not integer(parent) or not 0 <= parent < len(nodes) or parent == i):
            return f"{where}: parent is {parent!r}, not another node's index", []
    loop = _loop(nodes)
    return (f"nodes {' -> '.join(map(str, loop))} form a loop of parent links (a trace's nodes form a tree)"
            if loop else None), nodes


def _loop(nodes: list[dict]) -> list[int] | None:
    """The first loop of parent links (its node indices, the first repeated at the end), or None for a forest.
    Each node is walked up once: a walk stops at a root or at a node already known to reach one."""
    rooted: set[int] = set()
    for start in range(len(nodes)):
        path: list[int] = []
        on_path: set[int] = set()
        at = start
        while at is not None and at not in rooted:
            if at in on_path:
                return path[path.index(at):] + [at]
            path.append(at)
            on_path.add(at)
            at = nodes[at].get("parent")
        rooted.update(path)
    return None


def _reward(trace: dict) -> tuple[str | None, float]:
    """verifiers' ``Trace.reward``: the sum of score x weight over the rewards that ran (None: did not)."""
    rewards = trace.get("rewards", {})
    if not isinstance(rewards, dict):
        return "rewards is not an object of named rewards", 0.0
    total = 0.0
    for name, r in rewards.items():
        if r is None:
            continue
        if not isinstance(r, dict) or not number(r.get("score")) or not number(r.get("weight", 1.0)):
            return f"reward {name} is {r!r}; verifiers writes a score and a weight", 0.0
        total += r["score"] * r.get("weight", 1.0)
    return None, total


def _spread(path: list[dict], name: str) -> list[float] | None:
    """verifiers' ``Branch.spread``: a node's per-sampled-token values on its mask's true positions, 0.0 on
    the others; None when no node on the path has any."""
    if all(node.get(name) is None for node in path):
        return None
    out: list[float] = []
    for node in path:
        values = iter(node.get(name) or [])
        out += [float(next(values, 0.0)) if m else 0.0 for m in node.get("mask", [])]
    return out


def _branches(nodes: list) -> Iterator[tuple[int, list[dict], list[bool]]]:
    """verifiers' ``Trace.branches`` with prime-rl's ``iter_trainable_branches`` masks: one root-to-leaf path
    per leaf (a node no node names as parent); a sampled node shared by several branches trains in the first
    only; branches left without a trainable token are skipped."""
    parents = {n.get("parent") for n in nodes if n.get("parent") is not None}
    trained: set[int] = set()
    for index, leaf in enumerate(i for i in range(len(nodes)) if i not in parents):
        ids, at = [], leaf
        while at is not None:  # the links form a tree (_nodes): the walk ends at a root
            ids.append(at)
            at = nodes[at].get("parent")
        ids.reverse()
        mask: list[bool] = []
        for i in ids:
            node = nodes[i]
            shared = node.get("sampled", False) and any(node.get("mask", []))
            mask += [False] * len(node.get("mask", [])) if shared and i in trained else node.get("mask", [])
            if shared:
                trained.add(i)
        if any(mask):
            yield index, [nodes[i] for i in ids], mask


def _rows(entry: dict, step: int) -> Iterator[tuple[int | None, str | None, dict]]:
    """One episode's rows, a branch each, with the trace number: (t, problem, {}) for a bad trace."""
    group = entry.get("group")
    if not isinstance(group, dict) or not isinstance(group.get("id"), str):
        yield None, "no group.id (prime-rl's orchestrator stamps every train episode with its rollout group)", {}
        return
    traces = entry.get("traces", [])
    if not isinstance(traces, list):
        yield None, "traces is not a list", {}
        return
    work = (entry.get("run") or {}).get("work") or {}
    env = entry.get("env") or {}
    for t, trace in enumerate(traces):
        if not isinstance(trace, dict):
            yield t, "is not an object", {}
            return
        agent = trace.get("agent") or {}
        if not trace.get("ok", False) or agent.get("trainable", True) is False:
            continue  # prime-rl's iter_trainable_traces: errored and untrainable traces are not trained on
        problem, nodes = _nodes(trace)
        if not problem:
            problem, reward = _reward(trace)
        if problem:
            yield t, problem, {}
            return
        for b, path, mask in _branches(nodes):
            tokens = [x for node in path for x in node.get("token_ids", [])]
            start = mask.index(True)  # the tokens before the first trained one are the prompt
            cut = {name: None if values is None else values[start:] for name, values in (
                ("rollout_log_probs", _spread(path, "logprobs")), ("advantages", _spread(path, "advantages")),
                ("ref_log_prob", _spread(path, "reference_logprobs")))}
            yield t, None, {
                "uid": group["id"], "step": step, "score": reward, "responses": tokens[start:],
                "response_mask": [int(m) for m in mask[start:]], **cut, "episode_id": entry.get("id"),
                "trace_id": trace.get("id"), "branch": b, "agent": agent.get("name"),
                "env": env.get("name") or env.get("id"), "dispatch_step": work.get("step"),
                "stop_condition": trace.get("stop_condition")}


def _read(path: str, options: Options) -> Iterator[tuple[pa.Table, tuple[bool, ...]]]:
    """One ``traces.jsonl`` as Arrow tables of contract rows, ``common.TOKEN_CHUNK_ROWS`` at a time; a bad
    line is an error naming it; with which of ``OPTIONAL`` the rows hold (every row of a file, or none)."""
    step = step_of(path)
    if step is None:
        raise InputError(path, "is not inside a step_N folder (prime-rl writes rollouts/step_N/...): the step "
                         "comes from it")
    rows: list[dict] = []
    held: tuple[bool, ...] | None = None
    for number_, entry in json_lines(path):
        for t, problem, row in _rows(entry, step):
            where = f"line {number_}" + ("" if t is None else f": trace {t}")
            if problem:
                raise InputError(path, f"{where}: {problem}")
            has = tuple(row[n] is not None for n in OPTIONAL)
            if held is not None and has != held:
                name = next(n for n, a, b in zip(OPTIONAL, has, held) if a != b)
                raise InputError(path, f"{where}: {name} {'present' if has[OPTIONAL.index(name)] else 'absent'} "
                                 "unlike the rows before it (a file holds one subset: effective has advantages)")
            held = has
            rows.append(row)
            if len(rows) == common.TOKEN_CHUNK_ROWS:
                yield _table(rows, held), held
                rows = []
    if rows:
        yield _table(rows, held), held


def _table(rows: list[dict], held: tuple[bool, ...]) -> pa.Table:
    names = [n for n in TYPES if n not in OPTIONAL or held[OPTIONAL.index(n)]]
    return pa.table({n: pa.array([r[n] for r in rows], TYPES[n]) for n in names})


def _describe(files: list[str], notes: set, options: Options) -> tuple[dict[str, str], str]:
    sources = {"uid": "group.id (the episode's rollout group)", "score": "the trace's reward (sum of score x weight)",
               "step": "the step_N folder", "responses": "the branch's token_ids from its first trained token",
               "response_mask": "mask (a node shared by branches trains in the first)",
               "rollout_log_probs": "logprobs"}
    advantages = any(n[0] for n in notes)
    if advantages:
        sources["advantages"] = "advantages"
    if any(n[1] for n in notes):
        sources["ref_log_prob"] = "reference_logprobs (a teacher's under on-policy distillation)"
    replay = ("prime-rl's advantages are replayed against rladv's: compute --estimator grpo --no-norm-adv-by-std "
              "(prime-rl's GRPO: reward - group mean)" if advantages else "no advantages (not the effective "
              "subset?), so nothing to replay")
    return sources, f"absent: old log-probs and values, so not gae and not KL shaping; {replay}"


PRIME_RL = Format("prime-rl", _find, _order, _read, _describe, None, "traces.jsonl")
