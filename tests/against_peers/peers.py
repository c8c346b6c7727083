"""Load other trainers' advantage code from their released source, without their dependencies.

``RLADV_PEER_SRC`` names a folder holding the trainers' packages as released (``trl/``, ``openrlhf/``,
``skyrl/``, ``nemo_rl/``): ``bash tests/data/fetch_peers.sh DIR`` fills it (``pip download --no-deps`` of trl
1.16.0, openrlhf 0.11.2 and skyrl 0.3.0, NeMo-RL's advantage and loss files at its commit 7ea279a). Each module is loaded from its
file under its own name, with stub modules standing in for the heavy imports it makes at import time (ray,
deepspeed, transformers, loguru, ...), which the functions under test never call.
"""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("RLADV_PEER_SRC", "/nonexistent"))


class _Anything:
    """Stands in for any attribute of a stubbed module: callable, subscriptable, usable as a base class."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else _Anything()

    def __getattr__(self, name):
        return _Anything()

    def __getitem__(self, item):
        return _Anything()

    def __mro_entries__(self, bases):
        return (object,)


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


def stub(*names: str) -> list[str]:
    """Register stub modules ``names`` (and their parent packages) in ``sys.modules`` where no module of that name
    is there; returns the names it registered."""
    added = []
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            full = ".".join(parts[:i])
            if full not in sys.modules:
                sys.modules[full] = _Stub(full)
                added.append(full)
    return added


def load(relative: str, name: str, stubs: tuple[str, ...] = (), **attributes: dict) -> types.ModuleType:
    """The module at ``SOURCE/relative`` registered as ``name``, after ``stubs`` and the stub modules' given
    ``attributes`` (module name -> {attribute: value}); skips the test when the source is absent."""
    path = SOURCE / relative
    if not path.is_file():
        pytest.skip(f"{relative} not found under RLADV_PEER_SRC={SOURCE} (tests/data/fetch_peers.sh)")
    added = stub(*stubs)
    try:
        for module, values in attributes.items():
            for key, value in values.items():
                setattr(sys.modules[module], key, value)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:  # a stub of an installed package leaves with the import: a later test importing ray gets ray
        for full in added:
            if importlib.machinery.PathFinder.find_spec(full.split(".")[0]) is not None:
                sys.modules.pop(full, None)
    return module


def code_between(relative: str, function: str, first: str, last: str) -> str:
    """The source lines of ``function`` in ``SOURCE/relative`` from the line starting with ``first`` up to and
    including the line starting with ``last`` (stripped), dedented: a trainer's inline computation, to run as its
    own code where the function around it cannot run in isolation."""
    path = SOURCE / relative
    if not path.is_file():
        pytest.skip(f"{relative} not found under RLADV_PEER_SRC={SOURCE} (tests/data/fetch_peers.sh)")
    text = path.read_text()
    node = next(n for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                and n.name == function)
    lines = text.splitlines()[node.lineno - 1:node.end_lineno]
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(first))
    end = next(i for i in range(start, len(lines)) if lines[i].strip().startswith(last))
    block = lines[start:end + 1]
    indent = min(len(line) - len(line.lstrip()) for line in block if line.strip())
    return "\n".join(line[indent:] for line in block)


def function_source(relative: str, function: str) -> str:
    """The source of the module-level function ``function`` in ``SOURCE/relative``."""
    path = SOURCE / relative
    if not path.is_file():
        pytest.skip(f"{relative} not found under RLADV_PEER_SRC={SOURCE} (tests/data/fetch_peers.sh)")
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == function)
    return ast.get_source_segment(text, node)


def skyrl_ppo_utils() -> types.ModuleType:
    """SkyRL 0.3.0's ``ppo_utils`` (its registered advantage estimators)."""
    return load("skyrl/backends/skyrl_train/utils/ppo_utils.py", "skyrl_ppo_utils", stubs=(
        "ray", "jaxtyping", "loguru", "skyrl.backends.skyrl_train.utils.off_policy_correction_utils",
        "skyrl.backends.skyrl_train.utils.torch_utils", "skyrl.train.config"),
        ray={"is_initialized": lambda: False})


def nemo_rl_advantage_estimator() -> types.ModuleType:
    """NeMo-RL's ``advantage_estimator`` (and the ``utils`` it imports), at 7ea279a."""
    load("nemo_rl/algorithms/utils.py", "nemo_rl.algorithms.utils", stubs=(
        "transformers", "nemo_rl.data.chat_templates", "nemo_rl.models.policy", "nemo_rl.utils.fastokens",
        "nemo_rl.utils.logger"))
    return load("nemo_rl/algorithms/advantage_estimator.py", "nemo_rl.algorithms.advantage_estimator",
                stubs=("nemo_rl.algorithms.loss",))


def openrlhf_experience_maker() -> types.ModuleType:
    """OpenRLHF 0.11.2's ``experience_maker`` (with ``models/utils.py`` and its length penalties)."""
    load("openrlhf/models/utils.py", "openrlhf.models.utils", stubs=("deepspeed",))
    load("openrlhf/trainer/ppo_utils/length_penalty.py", "openrlhf.trainer.ppo_utils.length_penalty",
         stubs=("openrlhf.utils.logging_utils",))
    return load("openrlhf/trainer/ppo_utils/experience_maker.py", "openrlhf_experience_maker", stubs=(
        "ray", "openrlhf.trainer.ppo_utils.experience", "openrlhf.trainer.ray.launcher",
        "openrlhf.utils.seqlen_balancing"))
