"""A YAML file read as OmegaConf reads it where it matters to a verl config: ``1e-3`` is a float, ``_`` in a
number is a digit separator, duplicate keys are refused; plain ``${a.b.c}`` (and relative ``${.x}``)
interpolations are resolved, and values are typed as OmegaConf types a dataclass field (docs/contract.md §2).

``load`` reads the file into a tree; ``Document`` looks values of that tree up by dotted key and types them.
Every problem is a one-line ``ConfigError`` that names the file (and the dotted key).
"""
from __future__ import annotations

import math
import os
import re
import stat
from typing import Any

import yaml

from ..errors import ConfigError

__all__ = ["Document", "kind", "load"]

_MISSING = object()
_REF = re.compile(r"\$\{([^${}]*)\}")
_SIMPLE_REF = re.compile(r"\.*[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")


# ------------------------------------------------------------------------------------------------ loading


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as OmegaConf reads it where it matters here: ``1e-3`` is a float; duplicate keys are refused."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: set = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable key: let PyYAML report it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
        return super().construct_mapping(node, deep)


class _Underscored:
    """A number YAML read from a scalar written with ``_`` (YAML 1.1, as OmegaConf reads it, takes ``_`` as a digit
    separator: ``0.5_2`` is 0.52, ``2_5`` is 25); ``text`` is what the file says. Thresholds, where verl gives
    ``_`` a meaning of its own (``lo_hi``), refuse such a number rather than read a band as one value."""

    text: str


class _UnderscoredInt(_Underscored, int):
    pass


class _UnderscoredFloat(_Underscored, float):
    pass


class _Unreadable(Exception):
    """A scalar YAML resolves to a number that Python cannot convert (an integer of more than 4300 digits)."""

    def __init__(self, reason: str, mark):
        super().__init__(reason)
        self.reason, self.mark = reason, mark


def _construct_number(loader: "_Loader", node, base, number_type):
    try:
        value = base(loader, node)
    except ValueError as err:
        raise _Unreadable(str(err).split(";")[0], node.start_mark) from None
    if isinstance(node.value, str) and "_" in node.value and not isinstance(value, bool):
        value = number_type(value)
        value.text = node.value
    return value


_Loader.add_constructor("tag:yaml.org,2002:int", lambda loader, node: _construct_number(
    loader, node, yaml.constructor.SafeConstructor.construct_yaml_int, _UnderscoredInt))
_Loader.add_constructor("tag:yaml.org,2002:float", lambda loader, node: _construct_number(
    loader, node, yaml.constructor.SafeConstructor.construct_yaml_float, _UnderscoredFloat))

# How deep a YAML document may nest: a verl config is a few levels deep; the reader recurses per level.
_MAX_DEPTH = 200

# PyYAML's float pattern needs a dot and a signed exponent; OmegaConf (and users) also write 1e-3 and 5e3.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load(path: str) -> dict:
    """The mapping at the top of the YAML file ``path``; a ``ConfigError`` for a file that is not one."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None  # reported by open() below
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        # open() would wait on a FIFO for a writer that never comes
        raise ConfigError(f"{path}: not a regular file (a FIFO, socket or device); expected a verl YAML config")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such config file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a config file") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a UTF-8 text file; expected a verl YAML config") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the config file ({err.strerror or err})") from None
    try:
        doc = yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to read (a verl config is a few levels deep)") from None
    except _Unreadable as err:
        raise ConfigError(f"{path}: line {err.mark.line + 1}, column {err.mark.column + 1}: cannot read this "
                          f"number ({err.reason})") from None
    except yaml.YAMLError as err:
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise ConfigError(f"{path}: not valid YAML: {problem}{where}") from None
    if doc is None:
        raise ConfigError(f"{path}: the file is empty; expected a verl trainer config or its algorithm: section")
    if _depth(doc) > _MAX_DEPTH:
        raise ConfigError(f"{path}: nested more than {_MAX_DEPTH} levels deep; a verl config is a few levels deep")
    if not isinstance(doc, dict):
        raise ConfigError(
            f"{path}: the top level is a {kind(doc)}; expected a mapping (a verl trainer config or its "
            "algorithm: section)"
        )
    return doc


def _depth(doc: Any) -> int:
    """How deep mappings and lists nest in ``doc`` (without recursion; shared nodes, from YAML anchors, are
    walked once per path, up to a bound)."""
    deepest, stack, seen = 0, [(doc, 1)], 0
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > _MAX_DEPTH or seen > 1_000_000:
            return deepest
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                seen += 1
                stack.append((child, depth + 1))
    return deepest


def kind(value: Any) -> str:
    """What a message calls a YAML value: mapping, list, string, boolean, number (else its type's name)."""
    if isinstance(value, _Underscored):
        return "number"
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__)


# ------------------------------------------------------------------------------------------------ values


class Document:
    """The tree ``load`` read from ``path``, its values looked up by dotted key and typed.

    ``bare``: the key of the one section the file holds without that key (a verl ``algorithm:`` section written
    on its own), or None: dotted keys then start with it, and an interpolation that finds nothing at the top
    looks under it (the section may refer to its own keys).
    """

    def __init__(self, path: str, tree: dict, bare: str | None = None):
        self.path = path
        self.tree = tree
        self.bare = bare

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {message}")

    def _root(self) -> dict:
        """The tree dotted keys are looked up in; a bare section sits under its key."""
        return {self.bare: self.tree} if self.bare else self.tree

    @staticmethod
    def _walk(tree: Any, parts: list[str]) -> Any:
        node = tree
        for part in parts:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return _MISSING
        return node

    def _lookup(self, ref: str, key: str) -> tuple[Any, str]:
        """The raw value an interpolation ``${ref}`` written at ``key`` points to, and its dotted key."""
        if ref.startswith("."):
            depth = len(ref) - len(ref.lstrip("."))  # '.x' = sibling of key; each further dot goes one level up
            parts = key.split(".")
            if depth > len(parts):
                return _MISSING, ref
            target = parts[: len(parts) - depth] + ref[depth:].split(".")
            return self._walk(self._root(), target), ".".join(target)
        value = self._walk(self._root(), ref.split("."))
        if value is _MISSING and self.bare:  # a bare section may refer to its own keys
            return self._walk(self._root(), [self.bare, *ref.split(".")]), f"{self.bare}.{ref}"
        return value, ref

    def resolve(self, key: str, raw: Any, _seen: tuple[str, ...] = ()) -> Any:
        """``raw`` (written at dotted ``key``) with its interpolations resolved; a ConfigError otherwise."""
        if isinstance(raw, str) and raw == "???":
            raise self.error(key, "is '???' (a mandatory value that was never given)")
        if not isinstance(raw, str) or "${" not in raw:
            return raw
        if key in _seen:
            raise self.error(_seen[0], f"interpolation cycle through {key}")
        seen = _seen + (key,)
        pieces = _REF.split(raw)  # literal, ref, literal, ref, ..., literal
        if any("${" in lit or "\\" in lit for lit in pieces[0::2]):
            raise self.error(seen[0], f"cannot resolve {raw!r} offline: only plain ${{a.b.c}} references are "
                                      "supported; write the value")
        values = []
        for ref in pieces[1::2]:
            ref = ref.strip()
            if not _SIMPLE_REF.fullmatch(ref):
                raise self.error(seen[0], f"cannot resolve '${{{ref}}}' offline (resolvers such as oc.select or "
                                          "oc.env are not evaluated); write the value")
            target, target_key = self._lookup(ref, key)
            if target is _MISSING:
                raise self.error(seen[0], f"'${{{ref}}}' refers to {target_key}, which the file does not set")
            values.append(self.resolve(target_key, target, seen))
        if len(values) == 1 and pieces[0] == "" and pieces[2] == "":
            return values[0]  # the whole value is one reference: keep the target's type
        out = pieces[0]
        for value, lit in zip(values, pieces[2::2]):
            if isinstance(value, (dict, list)):
                raise self.error(seen[0], f"{raw!r} embeds a {kind(value)} in a string")
            out += str(value) + lit
        return out

    # ---- typed values (OmegaConf converts numeric / boolean strings for typed dataclass fields, and so do we)

    def number(self, key: str, raw: Any) -> float:
        value = self.resolve(key, raw)
        if isinstance(value, bool) or value is None:
            raise self.error(key, f"must be a finite number, got {value!r}")
        number = math.nan
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                pass
        if math.isfinite(number):
            return number
        raise self.error(key, f"must be a finite number, got {value!r}")

    def integer(self, key: str, raw: Any) -> int:
        value = self.resolve(key, raw)
        if isinstance(value, int) and not isinstance(value, bool):
            return int(value)
        if isinstance(value, (float, str)) and not isinstance(value, bool):
            try:
                number = float(value)
            except ValueError:
                number = math.nan
            if math.isfinite(number) and number == int(number):
                return int(number)
        raise self.error(key, f"must be an integer, got {value!r}")

    def boolean(self, key: str, raw: Any) -> bool:
        value = self.resolve(key, raw)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "false", "no", "off"):
            return value.strip().lower() in ("true", "yes", "on")
        raise self.error(key, f"must be true or false, got {value!r}")

    def string(self, key: str, raw: Any, *, optional: bool = False) -> str | None:
        value = self.resolve(key, raw)
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"must be a non-empty string{' or null' if optional else ''}, got {value!r}")
        return value.strip()

    def spec(self, key: str, raw: Any) -> str | None:
        """A threshold verl takes as ``str | float``: a number ``x`` becomes ``str(x)``, as in verl."""
        value = self.resolve(key, raw)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise self.error(key, f"must be a number or a string, got {value!r}")
        if isinstance(value, _Underscored):
            raise self.error(key, f"{value.text} is read by YAML (as by OmegaConf, so by verl) as the number "
                                  f"{value!r}, '_' being a digit separator; quote it ('{value.text}') for verl's lo_hi "
                                  "form, or write the number without '_'")
        text = str(value).strip()
        if not text:
            raise self.error(key, "is empty")
        return text
