"""``--config``: read a verl 0.9.1 trainer YAML (or only its ``algorithm:`` section) into rladv settings.

What is read (CONTRACT §2, SEMANTICS §3-§6):

- ``algorithm.*``: estimator, ``gamma``, ``lam``, the GRPO std flag, KL reward shaping (``use_kl_in_reward``,
  ``kl_penalty``, ``kl_ctrl.*``), ``rollout_correction.*`` and the GDPO reward keys/weights;
- the DAPO overlong buffer: ``reward.reward_kwargs`` ([P]) or ``reward_model.reward_kwargs`` ([S]), each with
  ``overlong_buffer_cfg.{enable,len,penalty_factor}`` and ``max_resp_len``.

Only keys the file writes (or settings derived from them, such as ``kl_coef``) end up in
``VerlSettings.settings``, so flags typed on the command line can be merged on top. Every problem is a
one-line ``ConfigError`` that names the file and the dotted key. The file is read as plain YAML: Hydra's
``defaults:`` list is not composed, and of OmegaConf's interpolations only plain references
(``${data.max_response_length}``, or relative ``${.x}``) are resolved, and only in values rladv reads.
"""
from __future__ import annotations

import difflib
import math
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..errors import ConfigError

__all__ = ["VerlSettings", "settings_from_verl_yaml", "VERL_ESTIMATORS"]

# verl 0.9.1's registry names (``AdvantageEstimator``); rladv may implement only some of them.
VERL_ESTIMATORS = (
    "gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo", "grpo_passk",
    "gpg", "rloo_vectorized", "grpo_vectorized", "optimal_token_baseline", "tir_optimal_token_baseline", "gdpo",
)

# verl's rejection options (``rollout_correction.rollout_rs``), SEMANTICS §5.3.
_RS_OPTIONS = (
    "token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3",
)

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
_OVERLONG_KEYS = ("enable", "len", "penalty_factor", "log")

# Top-level sections of verl's trainer config: a file with one of them (and no ``algorithm:``) is a trainer
# config that leaves the algorithm at verl's defaults, not a bare algorithm section.
_TRAINER_SECTIONS = frozenset({
    "defaults", "actor_rollout_ref", "data", "critic", "reward_model", "reward", "custom_reward_function",
    "sandbox_fusion", "trainer", "global_profiler", "ray_kwargs", "transfer_queue", "distillation", "skip",
    "model_engine",
})

_KL_CTRL_DEFAULT_COEF = 0.001  # verl's KLControlConfig.kl_coef
_MISSING = object()
_REF = re.compile(r"\$\{([^${}]*)\}")
_SIMPLE_REF = re.compile(r"\.*[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")


@dataclass(frozen=True)
class VerlSettings:
    """What a verl YAML says, in rladv's terms.

    ``settings``: ``Config`` field names -> values, only for what the file sets or implies; merge command-line
    flags on top, then ``Config(**merged)``. ``ignored``: dotted keys of the ``algorithm`` section (and of
    the ``reward_kwargs`` rladv reads) that verl defines but that do not affect rladv's numbers; the other
    sections of a trainer config (actor, rollout, data, trainer, ...) are never listed. ``notes``: one-line
    explanations of derived settings and of verl behaviour rladv does not reproduce.
    """

    settings: dict[str, object]
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def settings_from_verl_yaml(path: str) -> VerlSettings:
    """Read ``path`` (a verl trainer config, or its ``algorithm:`` section with or without that key)."""
    try:
        return _Reader(str(path), _load(str(path))).read()
    except RecursionError:  # a chain of thousands of ${...} references
        raise ConfigError(f"{path}: its interpolations chain too deeply to resolve") from None


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


def _construct_number(loader: "_Loader", node, base, kind):
    try:
        value = base(loader, node)
    except ValueError as err:
        raise _Unreadable(str(err).split(";")[0], node.start_mark) from None
    if isinstance(node.value, str) and "_" in node.value and not isinstance(value, bool):
        value = kind(value)
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


def _load(path: str) -> Any:
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
            f"{path}: the top level is a {_kind(doc)}; expected a mapping (a verl trainer config or its "
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


def _kind(value: Any) -> str:
    if isinstance(value, _Underscored):
        return "number"
    return {dict: "mapping", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), type(value).__name__)


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


# ------------------------------------------------------------------------------------------------ reading


class _Reader:
    def __init__(self, path: str, doc: dict):
        self.path = path
        self.doc = doc
        self.headless = False
        self.settings: dict[str, object] = {}
        self.ignored: list[str] = []
        self.notes: list[str] = []

    # ---- errors and lookups

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {key}: {message}")

    def _root(self) -> dict:
        """The tree dotted keys are looked up in; a bare algorithm section sits under ``algorithm``."""
        return {"algorithm": self.doc} if self.headless else self.doc

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
        if value is _MISSING and self.headless:  # a bare algorithm section may refer to its own keys
            return self._walk(self._root(), ["algorithm", *ref.split(".")]), "algorithm." + ref
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
                raise self.error(seen[0], f"{raw!r} embeds a {_kind(value)} in a string")
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

    # ---- the file

    def read(self) -> VerlSettings:
        algo = self._locate()
        self._check_keys(algo, _ALGO_SCHEMA, "algorithm")
        self._algorithm(algo)
        if not self.headless:
            self._overlong()
        return VerlSettings(settings=self.settings, ignored=self.ignored, notes=self.notes)

    def _locate(self) -> dict:
        doc = self.doc
        if "algorithm" in doc:
            algo = doc["algorithm"]
            if algo is None:
                algo = {}
            if not isinstance(algo, dict):
                raise self.error("algorithm", f"must be a mapping, got a {_kind(algo)}")
        elif any(key in _ALGO_SCHEMA for key in doc):
            self.headless = True
            algo = doc
        elif any(key in _TRAINER_SECTIONS for key in doc):
            algo = {}
            self.notes.append("no algorithm: section: verl's algorithm defaults apply")
        else:
            self.headless = True  # an algorithm section whose keys are all wrong: report them
            algo = doc
        if not self.headless and "defaults" in doc:
            self.notes.append(
                "the file has a Hydra defaults: list; rladv reads only the values written in the file "
                "(defaults it would compose, such as algorithm.rollout_correction, are not loaded)"
            )
        return algo

    def _check_keys(self, node: dict, schema: dict, prefix: str) -> None:
        """Every key under ``algorithm`` must be one verl defines; a typo names the closest known key."""
        for key, value in node.items():
            dotted = f"{prefix}.{key}"
            if not isinstance(key, str):
                raise self.error(dotted, "keys must be strings")
            if key not in schema:
                hint = self._suggest(key, schema, prefix)
                raise self.error(dotted, f"not a key verl 0.9.1 defines under {prefix}{hint}")
            sub = schema[key]
            if isinstance(sub, dict) or sub is _FREE:
                if value is None:
                    if key == "kl_ctrl":
                        raise self.error(dotted, "must be a mapping, got null")
                    continue
                value = self.resolve(dotted, value) if isinstance(value, str) else value
                if not isinstance(value, dict):
                    raise self.error(dotted, f"must be a mapping, got a {_kind(value)}")
                if isinstance(sub, dict):
                    self._check_keys(value, sub, dotted)

    @staticmethod
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

    def _section(self, algo: dict, key: str) -> dict | None:
        value = algo.get(key)
        if isinstance(value, str):
            value = self.resolve(f"algorithm.{key}", value)
        return value

    # ---- algorithm

    def _algorithm(self, a: dict) -> None:
        s = self.settings
        estimator = None
        if "adv_estimator" in a:
            estimator = self._estimator(a["adv_estimator"])
            s["estimator"] = estimator
        for key in ("gamma", "lam"):
            if key in a:
                value = self.number(f"algorithm.{key}", a[key])
                if not 0.0 <= value <= 1.0:
                    raise self.error(f"algorithm.{key}", f"must be in [0, 1] for rladv, got {value}")
                s[key] = value
        if "norm_adv_by_std_in_grpo" in a:
            s["norm_adv_by_std"] = self.boolean("algorithm.norm_adv_by_std_in_grpo", a["norm_adv_by_std_in_grpo"])
        self._kl(a)
        self._unused(a)
        self._rollout_correction(a)
        self._gdpo(a, estimator)

    def _estimator(self, raw: Any) -> str:
        from ..estimators.registry import ESTIMATORS

        key = "algorithm.adv_estimator"
        name = self.string(key, raw)
        if name in ESTIMATORS:
            return name
        if name in VERL_ESTIMATORS:
            raise self.error(key, f"verl's estimator {name!r} is not implemented by rladv (rladv estimators "
                                  "lists those it has)")
        close = difflib.get_close_matches(name, list(dict.fromkeys([*ESTIMATORS, *VERL_ESTIMATORS])), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; choose one of {', '.join(ESTIMATORS)}"
        raise self.error(key, f"unknown advantage estimator {name!r}{hint}")

    def _kl(self, a: dict) -> None:
        from .settings import KL_MODES

        s = self.settings
        if "kl_penalty" in a:
            mode = self.string("algorithm.kl_penalty", a["kl_penalty"])
            if mode.removesuffix("+") not in KL_MODES:
                extra = " (verl raises NotImplementedError for it)" if mode.removesuffix("+") == "full" else ""
                raise self.error("algorithm.kl_penalty", f"{mode!r} is not a KL estimate verl computes{extra}; "
                                                         f"choose one of {', '.join(KL_MODES)} (optionally with +)")
            s["kl_penalty"] = mode
        ctrl = self._section(a, "kl_ctrl") or {}
        if "type" in ctrl:
            kind = self.string("algorithm.kl_ctrl.type", ctrl["type"])
            if kind not in ("fixed", "adaptive"):
                raise self.error("algorithm.kl_ctrl.type", f"{kind!r} is not a verl KL controller; choose fixed or "
                                                           "adaptive")
            s["kl_ctrl"] = kind
        if "target_kl" in ctrl:
            s["kl_target"] = self.number("algorithm.kl_ctrl.target_kl", ctrl["target_kl"])
        if "horizon" in ctrl:
            s["kl_horizon"] = self.integer("algorithm.kl_ctrl.horizon", ctrl["horizon"])
        coef = self.number("algorithm.kl_ctrl.kl_coef", ctrl["kl_coef"]) if "kl_coef" in ctrl else None

        if "use_kl_in_reward" not in a:
            if coef is not None:
                self.ignored.append("algorithm.kl_ctrl.kl_coef")
                self.notes.append("algorithm.kl_ctrl.kl_coef is unused: algorithm.use_kl_in_reward is not set "
                                  "(verl's default false); pass --kl-coef to turn KL shaping on")
            return
        if not self.boolean("algorithm.use_kl_in_reward", a["use_kl_in_reward"]):
            s["kl_coef"] = 0.0
            if coef is not None:
                self.ignored.append("algorithm.kl_ctrl.kl_coef")
            self.notes.append("algorithm.use_kl_in_reward=false: kl_coef set to 0 (no KL reward shaping)")
            return
        if coef is None:
            coef = _KL_CTRL_DEFAULT_COEF
            self.notes.append(f"algorithm.use_kl_in_reward=true without kl_ctrl.kl_coef: kl_coef set to verl's "
                              f"default {coef}")
        else:
            self.notes.append(f"algorithm.use_kl_in_reward=true: kl_coef set to algorithm.kl_ctrl.kl_coef={coef}")
        if coef == 0.0:
            self.notes.append("kl_coef 0: KL shaping subtracts 0 * KL, which leaves the rewards unchanged")
        s["kl_coef"] = coef
        if s.get("kl_ctrl") == "adaptive":
            if s.get("kl_horizon", 10000) <= 0:
                raise self.error("algorithm.kl_ctrl.horizon", f"must be > 0 for the adaptive controller, got "
                                                              f"{s['kl_horizon']} (verl asserts it)")
            if s.get("kl_target", 0.1) == 0:
                raise self.error("algorithm.kl_ctrl.target_kl", "must not be 0 for the adaptive controller "
                                                                "(verl divides by it)")

    def _unused(self, a: dict) -> None:
        """verl keys that do not change rladv's numbers: listed in ``ignored``, with a note where it matters."""
        if "use_pf_ppo" in a:
            self.ignored.append("algorithm.use_pf_ppo")
            if self.boolean("algorithm.use_pf_ppo", a["use_pf_ppo"]):
                self.notes.append("algorithm.use_pf_ppo=true: verl resamples the batch at random after gae; "
                                  "rladv does not reproduce that")
        if "pf_ppo" in a:
            self.ignored.append("algorithm.pf_ppo")
        if "filter_groups" in a:
            self.ignored.append("algorithm.filter_groups")
            groups = self._section(a, "filter_groups") or {}
            if "enable" in groups and self.boolean("algorithm.filter_groups.enable", groups["enable"]):
                self.notes.append("algorithm.filter_groups.enable=true: verl drops groups whose metric is constant "
                                  "before computing advantages; rladv computes every row it is given")

    def _rollout_correction(self, a: dict) -> None:
        rc = self._section(a, "rollout_correction")
        if not rc:
            return
        s = self.settings
        base = "algorithm.rollout_correction"
        if "bypass_mode" in rc and self.boolean(f"{base}.bypass_mode", rc["bypass_mode"]):
            raise self.error(f"{base}.bypass_mode", "true is not supported by rladv (bypass mode replaces "
                                                    "old_log_probs by rollout_log_probs and rejects inside the "
                                                    "actor loss); set it to false")
        level = None
        if "rollout_is" in rc:
            level = self.string(f"{base}.rollout_is", rc["rollout_is"], optional=True)
            if level is not None and level not in ("token", "sequence"):
                raise self.error(f"{base}.rollout_is", f"{level!r}: must be token, sequence or null")
            s["rollout_is"] = level
        if "rollout_is_threshold" in rc:
            thr = self.spec(f"{base}.rollout_is_threshold", rc["rollout_is_threshold"])
            if thr is not None:
                s["rollout_is_threshold"] = thr
            elif level is not None:
                raise self.error(f"{base}.rollout_is_threshold", f"is null but rollout_is is {level!r}")
        if "rollout_is_batch_normalize" in rc:
            s["rollout_is_batch_normalize"] = self.boolean(f"{base}.rollout_is_batch_normalize",
                                                           rc["rollout_is_batch_normalize"])
        options = None
        if "rollout_rs" in rc:
            options = self.string(f"{base}.rollout_rs", rc["rollout_rs"], optional=True)
            if options is not None:
                for name in (part.strip() for part in options.split(",")):
                    if name and name not in _RS_OPTIONS:
                        close = difflib.get_close_matches(name, _RS_OPTIONS, n=1)
                        hint = f"; did you mean {close[0]}?" if close else f"; choose from {', '.join(_RS_OPTIONS)}"
                        raise self.error(f"{base}.rollout_rs", f"invalid option {name!r}{hint}")
            s["rollout_rs"] = options
        thresholds = self.spec(f"{base}.rollout_rs_threshold", rc["rollout_rs_threshold"]) \
            if "rollout_rs_threshold" in rc else None
        if options is not None:
            if thresholds is None:
                raise self.error(f"{base}.rollout_rs_threshold", f"must be set when rollout_rs is {options!r} "
                                                                 "(verl raises ValueError)")
            s["rollout_rs_threshold"] = thresholds
        elif thresholds is not None:
            self.ignored.append(f"{base}.rollout_rs_threshold")
            self.notes.append(f"{base}.rollout_rs_threshold={thresholds} is unused: rollout_rs is not set")
        elif "rollout_rs_threshold" in rc:
            s["rollout_rs_threshold"] = None
        if "loss_type" in rc:
            self.ignored.append(f"{base}.loss_type")
        # verl's strings, checked as verl parses them, with this file's keys in the message
        from .settings import parse_rollout_is, parse_rollout_rs

        try:
            if options is not None:
                parse_rollout_rs(options, s["rollout_rs_threshold"],
                                 names=(f"{base}.rollout_rs", f"{base}.rollout_rs_threshold"))
            if level is not None:
                parse_rollout_is(level, s.get("rollout_is_threshold", "2.0"),
                                 names=(f"{base}.rollout_is", f"{base}.rollout_is_threshold"))
        except ConfigError as err:
            raise ConfigError(f"{self.path}: {err}") from None

    def _gdpo(self, a: dict, estimator: str | None) -> None:
        present = [k for k in ("gdpo_reward_keys", "gdpo_reward_weights") if k in a and a[k] is not None]
        if not present:
            return
        if estimator is not None and estimator != "gdpo":
            for key in present:
                self.ignored.append(f"algorithm.{key}")
            self.notes.append(f"algorithm.{present[0]} is unused: only adv_estimator gdpo reads it "
                              f"(the file says {estimator})")
            return
        keys = weights = None
        if "gdpo_reward_keys" in present:
            dotted = "algorithm.gdpo_reward_keys"
            raw = self.resolve(dotted, a["gdpo_reward_keys"])
            if not isinstance(raw, list) or not raw:
                raise self.error(dotted, f"must be a non-empty list of reward column names, got {raw!r}")
            keys = [self.string(f"{dotted}.{i}", item) for i, item in enumerate(raw)]
            if len(set(keys)) != len(keys):
                raise self.error(dotted, f"names a column twice: {keys}")
            self.settings["reward_components"] = keys
        if "gdpo_reward_weights" in present:
            dotted = "algorithm.gdpo_reward_weights"
            raw = self.resolve(dotted, a["gdpo_reward_weights"])
            if not isinstance(raw, list) or not raw:
                raise self.error(dotted, f"must be a non-empty list of numbers, got {raw!r}")
            weights = [self.number(f"{dotted}.{i}", item) for i, item in enumerate(raw)]
            self.settings["reward_weights"] = weights
        if keys is not None and weights is not None and len(keys) != len(weights):
            raise self.error("algorithm.gdpo_reward_weights", f"has {len(weights)} weights for {len(keys)} "
                                                              "gdpo_reward_keys")

    # ---- DAPO overlong buffer

    def _overlong(self) -> None:
        found = []
        for section, tag in (("reward", "[P]"), ("reward_model", "[S]")):
            node = self.doc.get(section)
            if not isinstance(node, dict):
                continue
            if section == "reward_model" and node.get("overlong_buffer") is not None:
                self.ignored.append("reward_model.overlong_buffer")
                self.notes.append("reward_model.overlong_buffer (the old DAPO recipe layout) is not read; "
                                  "rladv reads reward.reward_kwargs.overlong_buffer_cfg and max_resp_len")
            if node.get("reward_kwargs") is None:
                continue
            base = f"{section}.reward_kwargs"
            kwargs = self.resolve(base, node["reward_kwargs"])
            if not isinstance(kwargs, dict):
                raise self.error(base, f"must be a mapping, got a {_kind(kwargs)}")
            for key in kwargs:
                if key not in ("overlong_buffer_cfg", "max_resp_len"):
                    self.ignored.append(f"{base}.{key}")
            parsed = self._overlong_cfg(base, kwargs)
            if parsed is not None:
                found.append((section, base, tag, parsed))
        if not found:
            return
        if len(found) == 2 and found[0][3] != found[1][3]:
            raise self.error(f"{found[1][1]}.overlong_buffer_cfg",
                             f"disagrees with {found[0][1]}.overlong_buffer_cfg; keep one of them")
        section, base, tag, parsed = found[0]
        if len(found) == 2:
            self.notes.append(f"{found[1][1]} repeats {base}; {base} ({tag}, verl 0.9.1's place) is used")
        if not parsed:
            self.notes.append(f"{base}.overlong_buffer_cfg.enable is not true: no DAPO overlong penalty")
            return
        self.settings.update(parsed)
        manager = self._manager_name(section)
        if manager is not None and manager != "dapo":
            self.notes.append(f"the reward manager is {manager!r}, not 'dapo'; the overlong penalty is applied "
                              "as configured anyway")
        self.notes.append(
            f"{base}.overlong_buffer_cfg.enable=true: DAPO overlong penalty with overlong_buffer_len="
            f"{parsed['overlong_buffer_len']}, overlong_penalty_factor={parsed['overlong_penalty_factor']}, "
            f"max_resp_len={parsed['max_resp_len']}"
        )

    def _overlong_cfg(self, base: str, kwargs: dict) -> dict | None:
        """``None``: no overlong config here; ``{}``: present but disabled; else the three settings."""
        if kwargs.get("overlong_buffer_cfg") is None:
            if "max_resp_len" in kwargs:
                self.ignored.append(f"{base}.max_resp_len")
            return None
        key = f"{base}.overlong_buffer_cfg"
        cfg = self.resolve(key, kwargs["overlong_buffer_cfg"])
        if not isinstance(cfg, dict):
            raise self.error(key, f"must be a mapping, got a {_kind(cfg)}")
        for name in cfg:
            if name not in _OVERLONG_KEYS:
                close = difflib.get_close_matches(str(name), _OVERLONG_KEYS, n=1)
                hint = f"; did you mean {key}.{close[0]}?" if close else f" (known keys: {', '.join(_OVERLONG_KEYS)})"
                raise self.error(f"{key}.{name}", f"not an overlong_buffer_cfg key{hint}")
        if "log" in cfg:
            self.ignored.append(f"{key}.log")
        if not ("enable" in cfg and self.boolean(f"{key}.enable", cfg["enable"])):
            for name in ("len", "penalty_factor"):
                if name in cfg:
                    self.ignored.append(f"{key}.{name}")
            if "max_resp_len" in kwargs:
                self.ignored.append(f"{base}.max_resp_len")
            return {}
        for name in ("len", "penalty_factor"):
            if name not in cfg or cfg[name] is None:
                raise self.error(f"{key}.{name}", "must be set when overlong_buffer_cfg.enable is true")
        length = self.integer(f"{key}.len", cfg["len"])
        if length <= 0:
            raise self.error(f"{key}.len", f"must be > 0, got {length}")
        factor = self.number(f"{key}.penalty_factor", cfg["penalty_factor"])
        if kwargs.get("max_resp_len") is None:
            raise self.error(f"{base}.max_resp_len", "must be set when overlong_buffer_cfg.enable is true")
        max_len = self.integer(f"{base}.max_resp_len", kwargs["max_resp_len"])
        if max_len < length:
            raise self.error(f"{base}.max_resp_len", f"{max_len} is smaller than overlong_buffer_cfg.len {length}")
        return {"overlong_buffer_len": length, "overlong_penalty_factor": factor, "max_resp_len": max_len}

    def _manager_name(self, section: str) -> str | None:
        node = self.doc.get(section, {}).get("reward_manager")
        if isinstance(node, dict):
            node = node.get("name")
        return node if isinstance(node, str) and "${" not in node else None
