"""Empty stand-ins for the heavy packages a trainer's modules import, for the fixture generators in this folder.

The generators run a trainer's own functions (slime's, NeMo-RL's, prime-rl's and verifiers'), but the modules
those functions live in import packages the functions never call (httpx, transformers, wandb, openai, ...):
installing them all is slow, and some are not on PyPI here. ``install_stubs`` serves each named package, and
every submodule under it, as a stub module whose attributes are placeholder classes made on first use, so that
``from httpx import AsyncClient`` and ``class X(transformers.PreTrainedModel)`` succeed and nothing else runs.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Callable, Iterable


def plain_class(module: str, name: str) -> type:
    """The default placeholder: an empty class ``name`` of the stub module ``module``."""
    return type(name, (), {"__module__": module})


class _Stub(types.ModuleType):
    __path__: list[str] = []  # a package, so that its submodules import too

    def __init__(self, name: str, placeholder: Callable[[str, str], type]):
        super().__init__(name)
        self._placeholder = placeholder

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = self._placeholder(self.__name__, name)
        setattr(self, name, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: tuple[str, ...], placeholder: Callable[[str, str], type]):
        self.names, self.placeholder = names, placeholder

    def find_spec(self, fullname, path, target=None):
        if any(fullname == s or fullname.startswith(s + ".") for s in self.names):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Stub(spec.name, self.placeholder)

    def exec_module(self, module):
        pass


def install_stubs(names: Iterable[str], placeholder: Callable[[str, str], type] = plain_class) -> None:
    """Make each module in ``names``, and its submodules, import as a stub, ahead of any installed copy (a dotted
    name such as ``torch.utils.tensorboard`` stubs that subpackage only); an attribute of a stub is
    ``placeholder(module, name)``, made once. Call it before importing the trainer's modules."""
    sys.meta_path.insert(0, _StubFinder(tuple(names), placeholder))
