"""Where a verl 0.9.1 trainer YAML keeps its ``algorithm`` section, and the keys verl defines there.

``locate`` finds the section (the file's ``algorithm:``, or the file itself when it is that section alone);
``check_algorithm`` refuses a key verl does not define under it, naming the closest one it does.
"""
from __future__ import annotations

import difflib
from typing import Any

from .verl_yaml import Document, kind

__all__ = ["check_algorithm", "locate"]

_FREE = "free-form"  # a mapping verl passes on without a schema (its contents are not checked)

# The keys verl 0.9.1 defines under ``algorithm`` (AlgoConfig and its nested dataclasses). None = a value.
_ALGO_SCHEMA: dict[str, Any] = {
    "_target_": None,
    "gamma": None,
    "lam": None,
    "adv_estimator": None,
    "norm_adv_by_std_in_grpo": None,
    "use_kl_in_reward": None,
    "kl_penalty": None,
    "kl_ctrl": {"_target_": None, "type": None, "kl_coef": None, "horizon": None, "target_kl": None},
    "use_pf_ppo": None,
    "pf_ppo": _FREE,
    "filter_groups": {
        "_target_": None, "enable": None, "metric": None, "max_num_gen_batches": None,
        "max_inflight_gen_batches": None,
    },
    "rollout_correction": {
        "_target_": None, "rollout_is": None, "rollout_is_threshold": None, "rollout_is_batch_normalize": None,
        "rollout_rs": None, "rollout_rs_threshold": None, "bypass_mode": None, "loss_type": None,
    },
    "gdpo_reward_keys": None,
    "gdpo_reward_weights": None,
}

# Top-level sections of verl's trainer config: a file with one of them (and no ``algorithm:``) is a trainer
# config that leaves the algorithm at verl's defaults, not a bare algorithm section.
_TRAINER_SECTIONS = frozenset({
    "defaults", "actor_rollout_ref", "data", "critic", "reward_model", "reward", "custom_reward_function",
    "sandbox_fusion", "trainer", "global_profiler", "ray_kwargs", "transfer_queue", "distillation", "skip",
    "model_engine", "rladv",
})


def _paths(schema: dict, prefix: str = "") -> list[str]:
    """Every dotted key of a schema (sections and values), ``_target_`` left out."""
    out = []
    for key, sub in schema.items():
        if key == "_target_":
            continue
        out.append(prefix + key)
        if isinstance(sub, dict):
            out.extend(_paths(sub, prefix + key + "."))
    return out


_ALGO_PATHS = _paths(_ALGO_SCHEMA)


def locate(path: str, tree: dict, notes: list[str]) -> tuple[Document, dict]:
    """The file ``load`` read as a ``Document``, and its ``algorithm`` section: the file's ``algorithm:``, or
    the file itself (``bare``) when it has keys of that section, or none of a trainer config's sections (an
    algorithm section whose keys are all wrong: ``check_algorithm`` reports them). What the file leaves to
    verl goes to ``notes``."""
    if "algorithm" not in tree and (any(key in _ALGO_SCHEMA for key in tree)
                                    or not any(key in _TRAINER_SECTIONS for key in tree)):
        return Document(path, tree, bare="algorithm"), tree
    doc = Document(path, tree)
    if "algorithm" not in tree:
        notes.append("no algorithm: section: verl's algorithm defaults apply")
    algo = {} if tree.get("algorithm") is None else tree["algorithm"]
    if not isinstance(algo, dict):
        raise doc.error("algorithm", f"must be a mapping, got a {kind(algo)}")
    if "defaults" in tree:
        notes.append(
            "the file has a Hydra defaults: list; rladv reads only the values written in the file "
            "(defaults it would compose, such as algorithm.rollout_correction, are not loaded)"
        )
    return doc, algo


def check_algorithm(doc: Document, algo: dict) -> None:
    """Every key under ``algorithm`` must be one verl defines; a typo names the closest known key."""
    _check_keys(doc, algo, _ALGO_SCHEMA, "algorithm")


def _check_keys(doc: Document, node: dict, schema: dict, prefix: str) -> None:
    for key, value in node.items():
        dotted = f"{prefix}.{key}"
        if not isinstance(key, str):
            raise doc.error(dotted, "keys must be strings")
        if key not in schema:
            raise doc.error(dotted, f"not a key verl 0.9.1 defines under {prefix}{_suggest(key, schema, prefix)}")
        sub = schema[key]
        if isinstance(sub, dict) or sub is _FREE:
            if value is None:
                if key == "kl_ctrl":
                    raise doc.error(dotted, "must be a mapping, got null")
                continue
            value = doc.resolve(dotted, value) if isinstance(value, str) else value
            if not isinstance(value, dict):
                raise doc.error(dotted, f"must be a mapping, got a {kind(value)}")
            if isinstance(sub, dict):
                _check_keys(doc, value, sub, dotted)


def _suggest(key: str, schema: dict, prefix: str) -> str:
    """'; did you mean algorithm.X?' for the closest key verl defines, or the list of keys allowed here."""
    # the key exists elsewhere in the section (kl_coef -> kl_ctrl.kl_coef, rollout_is -> rollout_correction.*)
    elsewhere = [p for p in _ALGO_PATHS if p.rsplit(".", 1)[-1] == key]
    if elsewhere:
        return f"; did you mean algorithm.{elsewhere[0]}?"
    siblings = [k for k in schema if k != "_target_"]
    close = difflib.get_close_matches(key, siblings, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {prefix}.{close[0]}?"
    leaves = {p.rsplit(".", 1)[-1]: p for p in _ALGO_PATHS}
    close = difflib.get_close_matches(key, list(leaves), n=1, cutoff=0.7)
    if close:
        return f"; did you mean algorithm.{leaves[close[0]]}?"
    return f" (known keys: {', '.join(siblings)})"
