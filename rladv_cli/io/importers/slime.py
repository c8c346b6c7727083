"""slime's debug rollout data (``--save-debug-rollout-data``, docs/dumps.md "Trainers' logs"): one
``torch.save`` file per rollout, ``{"rollout_id": N, "samples": [Sample.to_dict(), ...]}``, read without running
code from it (``load_saved``: ``torch.load(weights_only=True)`` unless ``--trust-pickle``)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa

from ...errors import InputError
from ..dump import load_saved
from . import common
from .common import Format, Options, integer, number, numeric

EVAL = re.compile(r".*eval_\d+")  # slime names its evaluation dumps with the rollout id "eval_{N}"
CARRIED = ("index", "rollout_id", "response_length", "status", "remove_sample", "label", "prompt", "response",
           "metadata")


def _find(folder: Path) -> list[str]:
    """A folder's ``*.pt`` files but slime's evaluation dumps (``eval_{N}``: other prompts, not trained on)."""
    return [str(q) for q in folder.glob("*.pt") if q.is_file() and not EVAL.fullmatch(q.stem)]


def _order(p: str):
    """By the number a file's name ends with (slime's path template puts the rollout id there)."""
    found = re.search(r"(\d+)$", Path(p).stem)
    return numeric(found.group(1)) if found else numeric(Path(p).stem)


def _plain(v: Any) -> Any:
    """Tensors and numpy arrays as lists (slime keeps some fields as tensors)."""
    return v.tolist() if hasattr(v, "tolist") and not isinstance(v, (int, float, str, bool)) else v


def _load(path: str, options: Options) -> tuple[int, list]:
    """The rollout id and the samples of one file; the shape checked."""
    saved = load_saved(path, trust_pickle=options.trust_pickle)
    if not isinstance(saved, dict) or "samples" not in saved or "rollout_id" not in saved:
        raise InputError(path, "is not slime's debug rollout data: save_debug_rollout_data writes a dict of "
                         "rollout_id and samples")
    rollout_id, samples = _plain(saved["rollout_id"]), saved["samples"]
    if not integer(rollout_id):
        raise InputError(path, f"rollout_id is {rollout_id!r}; slime writes the rollout's integer id")
    if not isinstance(samples, list) or not samples:
        raise InputError(path, "samples is not a list of samples (Sample.to_dict()), or is empty")
    return rollout_id, samples


def _score(sample: dict, options: Options) -> tuple[str | None, float | None]:
    """A problem, or the sample's reward as slime's ``Sample.get_reward_value`` takes it (``reward[key]`` for a
    dict reward)."""
    reward = sample.get("reward")
    if isinstance(reward, dict):
        if options.reward_key is None:
            return (f"reward is a dict ({', '.join(map(str, reward))}); give --reward-key KEY, the key slime's "
                    "--reward-key names", None)
        if options.reward_key not in reward:
            return f"reward has no key {options.reward_key!r} (it has {', '.join(map(str, reward))})", None
        reward = _plain(reward[options.reward_key])
    elif options.reward_key is not None and reward is not None:
        return f"reward is {reward!r}, not a dict: --reward-key is for dict rewards", None
    if not number(reward):
        return f"reward is {reward!r}; slime scores every sample before training (a number is needed)", None
    return None, float(reward)


def _row(sample: Any, options: Options) -> tuple[str | None, dict]:
    """A problem, or one sample as a contract row (see the package docstring)."""
    if not isinstance(sample, dict):
        return "is not a dict (Sample.to_dict())", {}
    missing = [k for k in ("tokens", "response_length", "group_index") if sample.get(k) is None]
    if missing:
        return f"has no {', '.join(missing)} (slime's Sample has tokens, response_length, group_index)", {}
    tokens, n, group = _plain(sample["tokens"]), _plain(sample["response_length"]), _plain(sample["group_index"])
    if not integer(group):
        return f"group_index is {group!r}; an integer is needed", {}
    if not isinstance(tokens, list) or not all(integer(t) for t in tokens):
        return "tokens is not a list of token ids", {}
    if not integer(n) or n < 1 or n > len(tokens):
        return (f"response_length is {n!r}; it must be 1 to len(tokens) {len(tokens)} (no response, nothing to "
                "train)", {})
    mask = _plain(sample.get("loss_mask"))
    mask = [1] * n if mask is None else mask  # slime's _convert_samples_to_train_data: None is all 1
    if not isinstance(mask, list) or len(mask) != n or any(m not in (0, 1) for m in mask):
        return f"loss_mask is not {n} (response_length) values 0 or 1", {}
    if sample.get("remove_sample"):
        mask = [0] * n  # slime trains a removed sample with loss_mask all 0
    logp = _plain(sample.get("rollout_log_probs"))
    if logp is not None and (not isinstance(logp, list) or len(logp) != n or not all(number(x) for x in logp)):
        return f"rollout_log_probs is not {n} (response_length) numbers", {}
    problem, score = _score(sample, options)
    if problem:
        return problem, {}
    carried = {k: _plain(sample.get(k)) for k in CARRIED}
    carried["status"] = None if carried["status"] is None else str(carried["status"])
    for k in ("prompt", "label", "metadata"):  # chat prompts (a list of messages) and dicts as JSON text
        if carried[k] is not None and not isinstance(carried[k], str):
            carried[k] = json.dumps(carried[k], default=str)
    if isinstance(sample.get("reward"), dict):
        carried["reward"] = json.dumps(_plain(sample["reward"]), default=str)
    return None, {"group_index": group, "score": score, "responses": tokens[-n:], "response_mask": mask,
                  "rollout_log_probs": logp, **carried}


TYPES = {"uid": pa.string(), "step": pa.int64(), "group_index": pa.int64(), "score": pa.float32(),
         "responses": pa.list_(pa.int32()), "response_mask": pa.list_(pa.int8()),
         "rollout_log_probs": pa.list_(pa.float32()), "index": pa.int64(), "rollout_id": pa.int64(),
         "response_length": pa.int64(), "status": pa.string(), "remove_sample": pa.bool_(), "label": pa.string(),
         "prompt": pa.string(), "response": pa.string(), "metadata": pa.string(), "reward": pa.string()}


def _read(path: str, options: Options) -> Iterator[tuple[pa.Table, bool]]:
    """One slime ``{rollout_id}.pt`` as Arrow tables of contract rows, ``common.TOKEN_CHUNK_ROWS`` samples at a
    time; a bad sample is an error naming its number; with whether the rewards were dicts."""
    rollout_id, samples = _load(path, options)
    rows = []
    for i, sample in enumerate(samples):
        problem, row = _row(sample, options)
        if problem:
            raise InputError(path, f"sample {i}: {problem}")
        rows.append(row)
    have = {r["rollout_log_probs"] is not None for r in rows}
    if len(have) > 1:
        i = next(i for i, r in enumerate(rows) if r["rollout_log_probs"] is None)
        raise InputError(path, f"sample {i}: no rollout_log_probs while other samples have them")
    dict_rewards = "reward" in rows[0]
    names = [n for n in TYPES if n not in ("uid", "step") and (n != "rollout_log_probs" or have == {True})
             and (n != "reward" or dict_rewards)]
    for start in range(0, len(rows), common.TOKEN_CHUNK_ROWS):
        part = rows[start:start + common.TOKEN_CHUNK_ROWS]
        columns = {"uid": pa.array([f"{rollout_id}:{r['group_index']}" for r in part], pa.string()),
                   "step": pa.array([rollout_id] * len(part), pa.int64()),
                   **{n: pa.array([r.get(n) for r in part], TYPES[n]) for n in names}}
        yield pa.table(columns), dict_rewards


def _describe(files: list[str], notes: set, options: Options) -> tuple[dict[str, str], str]:
    score = f"reward[{options.reward_key!r}] (the reward dict carried as JSON text)" if notes == {True} else "reward"
    return ({"uid": "rollout_id:group_index (slime's prompt group within its rollout)", "score": score,
             "step": "rollout_id", "responses": "the last response_length tokens", "response_mask": "loss_mask",
             "rollout_log_probs": "rollout_log_probs"},
            "absent: advantages (slime computes them in training), old and reference log-probs and values, so "
            "no replay, not gae, not KL shaping and not the optimal-token baselines")


SLIME = Format("slime", _find, _order, _read, _describe, None, "*.pt")
