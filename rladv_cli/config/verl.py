"""``--config``: read a verl 0.9.1 trainer YAML (or only its ``algorithm:`` section) into rladv settings.

What is read (docs/contract.md §2, docs/semantics.md §3-§6):

- ``algorithm.*``: estimator, ``gamma``, ``lam``, the GRPO std flag, KL reward shaping (``use_kl_in_reward``,
  ``kl_penalty``, ``kl_ctrl.*``), ``rollout_correction.*`` and the GDPO reward keys/weights;
- the DAPO overlong buffer: ``reward.reward_kwargs`` ([P]) or ``reward_model.reward_kwargs`` ([S]), each with
  ``overlong_buffer_cfg.{enable,len,penalty_factor}`` and ``max_resp_len``;
- rladv's own section ``rladv:`` beside ``algorithm:``: ``columns`` (the files' names of contract columns,
  ``uid: prompt_id``, as ``--column``).

Only keys the file writes (or settings derived from them, such as ``kl_coef``) end up in
``VerlSettings.settings``, so flags typed on the command line can be merged on top. Every problem is a
one-line ``ConfigError`` that names the file and the dotted key. The file is read as plain YAML
(``verl_yaml``): Hydra's ``defaults:`` list is not composed, and of OmegaConf's interpolations only plain
references (``${data.max_response_length}``, or relative ``${.x}``) are resolved, and only in values rladv
reads. Where the ``algorithm`` section is and which keys verl defines in it: ``verl_schema``.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..estimators.registry import ESTIMATORS, REFERENCE_NAMES, names_where
from .correction import RS_OPTIONS, parse_rollout_is, parse_rollout_rs
from .flags import named
from .verl_schema import check_algorithm, locate
from .verl_yaml import Document, kind, load

__all__ = ["VerlSettings", "settings_from_verl_yaml"]

_OVERLONG_KEYS = ("enable", "len", "penalty_factor", "log")
_KL_CTRL_DEFAULT_COEF = 0.001  # verl's KLControlConfig.kl_coef


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
        return _read(str(path))
    except RecursionError:  # a chain of thousands of ${...} references
        raise ConfigError(f"{path}: its interpolations chain too deeply to resolve") from None


def _read(path: str) -> VerlSettings:
    """The algorithm section, then (in a whole trainer config) the reward sections, into one ``VerlSettings``."""
    found = VerlSettings(settings={})
    doc, algo = locate(path, load(path), found.notes)
    check_algorithm(doc, algo)
    _Algorithm(doc, found).read(algo)
    if not doc.bare:
        _Overlong(doc, found).read()
        _own_section(doc, found)
    return found


def _own_section(doc: Document, found: VerlSettings) -> None:
    """``rladv:``, the file's settings for rladv itself: ``columns`` (contract name -> the files' column)."""
    raw = doc.tree.get("rladv")
    if raw is None:
        return
    section = doc.resolve("rladv", raw)
    if not isinstance(section, dict):
        raise doc.error("rladv", f"must be a mapping, got a {kind(section)}")
    for key in section:
        if key != "columns":
            raise doc.error(f"rladv.{key}", "not a key rladv reads under rladv (known keys: columns)")
    columns = doc.resolve("rladv.columns", section.get("columns"))
    if columns is None:
        return
    if not isinstance(columns, dict):
        raise doc.error("rladv.columns", f"must be a mapping of contract names to your columns, got a {kind(columns)}")
    found.settings["columns"] = {str(name): doc.string(f"rladv.columns.{name}", column)
                                 for name, column in columns.items()}


class _Part:
    """Reads one part of the file into ``found``'s ``settings``, ``ignored`` and ``notes``; ``doc`` gives the
    file's values, typed, and its errors."""

    def __init__(self, doc: Document, found: VerlSettings):
        self.doc = doc
        self.settings, self.ignored, self.notes = found.settings, found.ignored, found.notes


# ------------------------------------------------------------------------------------------------ algorithm


class _Algorithm(_Part):
    """``algorithm.*``: the estimator and its settings, KL shaping, the keys rladv does not use, rollout
    correction and the GDPO reward keys."""

    def read(self, a: dict) -> None:
        s = self.settings
        estimator = None
        if "adv_estimator" in a:
            estimator = self._estimator(a["adv_estimator"])
            s["estimator"] = estimator
        for key in ("gamma", "lam"):
            if key in a:
                value = self.doc.number(f"algorithm.{key}", a[key])
                if not 0.0 <= value <= 1.0:
                    raise self.doc.error(f"algorithm.{key}", f"must be in [0, 1] for rladv, got {value}")
                s[key] = value
        if "norm_adv_by_std_in_grpo" in a:
            s["norm_adv_by_std"] = self.doc.boolean("algorithm.norm_adv_by_std_in_grpo", a["norm_adv_by_std_in_grpo"])
        self._kl(a)
        self._unused(a)
        self._rollout_correction(a)
        self._gdpo(a, estimator)

    def _estimator(self, raw: Any) -> str:
        key = "algorithm.adv_estimator"
        name = self.doc.string(key, raw)
        if name in ESTIMATORS:
            return name
        if name in REFERENCE_NAMES:
            raise self.doc.error(key, f"verl's estimator {name!r} is not implemented by rladv (rladv estimators "
                                      "lists those it has)")
        close = difflib.get_close_matches(name, list(dict.fromkeys([*ESTIMATORS, *REFERENCE_NAMES])), n=1)
        hint = f"; did you mean {close[0]}?" if close else f"; choose one of {', '.join(ESTIMATORS)}"
        raise self.doc.error(key, f"unknown advantage estimator {name!r}{hint}")

    def _kl(self, a: dict) -> None:
        from .settings import KL_MODES

        s = self.settings
        if "kl_penalty" in a:
            mode = self.doc.string("algorithm.kl_penalty", a["kl_penalty"])
            if mode.removesuffix("+") not in KL_MODES:
                extra = " (verl raises NotImplementedError for it)" if mode.removesuffix("+") == "full" else ""
                raise self.doc.error("algorithm.kl_penalty", f"{mode!r} is not a KL estimate verl computes{extra}; "
                                                             f"choose one of {', '.join(KL_MODES)} (optionally with +)")
            s["kl_penalty"] = mode
        ctrl = self._section(a, "kl_ctrl") or {}
        if "type" in ctrl:
            kind = self.doc.string("algorithm.kl_ctrl.type", ctrl["type"])
            if kind not in ("fixed", "adaptive"):
                raise self.doc.error("algorithm.kl_ctrl.type", f"{kind!r} is not a verl KL controller; choose fixed or "
                                                               "adaptive")
            s["kl_ctrl"] = kind
        if "target_kl" in ctrl:
            s["kl_target"] = self.doc.number("algorithm.kl_ctrl.target_kl", ctrl["target_kl"])
        if "horizon" in ctrl:
            s["kl_horizon"] = self.doc.integer("algorithm.kl_ctrl.horizon", ctrl["horizon"])
        coef = self.doc.number("algorithm.kl_ctrl.kl_coef", ctrl["kl_coef"]) if "kl_coef" in ctrl else None

        if "use_kl_in_reward" not in a:
            if coef is not None:
                self.ignored.append("algorithm.kl_ctrl.kl_coef")
                self.notes.append("algorithm.kl_ctrl.kl_coef is unused: algorithm.use_kl_in_reward is not set "
                                  f"(verl's default false); pass {named('kl_coef')} to turn KL shaping on")
            return
        if not self.doc.boolean("algorithm.use_kl_in_reward", a["use_kl_in_reward"]):
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
                raise self.doc.error("algorithm.kl_ctrl.horizon", f"must be > 0 for the adaptive controller, got "
                                                                  f"{s['kl_horizon']} (verl asserts it)")
            if s.get("kl_target", 0.1) == 0:
                raise self.doc.error("algorithm.kl_ctrl.target_kl", "must not be 0 for the adaptive controller "
                                                                    "(verl divides by it)")

    def _unused(self, a: dict) -> None:
        """verl keys that do not change rladv's numbers: listed in ``ignored``, with a note where it matters."""
        if "use_pf_ppo" in a:
            self.ignored.append("algorithm.use_pf_ppo")
            if self.doc.boolean("algorithm.use_pf_ppo", a["use_pf_ppo"]):
                self.notes.append("algorithm.use_pf_ppo=true: verl resamples the batch at random after gae; "
                                  "rladv does not reproduce that")
        if "pf_ppo" in a:
            self.ignored.append("algorithm.pf_ppo")
        if "filter_groups" in a:
            self.ignored.append("algorithm.filter_groups")
            groups = self._section(a, "filter_groups") or {}
            if "enable" in groups and self.doc.boolean("algorithm.filter_groups.enable", groups["enable"]):
                self.notes.append("algorithm.filter_groups.enable=true: verl drops groups whose metric is constant "
                                  "before computing advantages; rladv computes every row it is given")

    def _rollout_correction(self, a: dict) -> None:
        rc = self._section(a, "rollout_correction")
        if not rc:
            return
        s = self.settings
        base = "algorithm.rollout_correction"
        if "bypass_mode" in rc and self.doc.boolean(f"{base}.bypass_mode", rc["bypass_mode"]):
            raise self.doc.error(f"{base}.bypass_mode", "true is not supported by rladv (bypass mode replaces "
                                                        "old_log_probs by rollout_log_probs and rejects inside the "
                                                        "actor loss); set it to false")
        level = None
        if "rollout_is" in rc:
            level = self.doc.string(f"{base}.rollout_is", rc["rollout_is"], optional=True)
            if level is not None and level not in ("token", "sequence"):
                raise self.doc.error(f"{base}.rollout_is", f"{level!r}: must be token, sequence or null")
            s["rollout_is"] = level
        if "rollout_is_threshold" in rc:
            thr = self.doc.spec(f"{base}.rollout_is_threshold", rc["rollout_is_threshold"])
            if thr is not None:
                s["rollout_is_threshold"] = thr
            elif level is not None:
                raise self.doc.error(f"{base}.rollout_is_threshold", f"is null but rollout_is is {level!r}")
        if "rollout_is_batch_normalize" in rc:
            s["rollout_is_batch_normalize"] = self.doc.boolean(f"{base}.rollout_is_batch_normalize",
                                                               rc["rollout_is_batch_normalize"])
        options = None
        if "rollout_rs" in rc:
            options = self.doc.string(f"{base}.rollout_rs", rc["rollout_rs"], optional=True)
            if options is not None:
                for name in (part.strip() for part in options.split(",")):
                    if name and name not in RS_OPTIONS:
                        close = difflib.get_close_matches(name, RS_OPTIONS, n=1)
                        hint = f"; did you mean {close[0]}?" if close else f"; choose from {', '.join(RS_OPTIONS)}"
                        raise self.doc.error(f"{base}.rollout_rs", f"invalid option {name!r}{hint}")
            s["rollout_rs"] = options
        thresholds = self.doc.spec(f"{base}.rollout_rs_threshold", rc["rollout_rs_threshold"]) \
            if "rollout_rs_threshold" in rc else None
        if options is not None:
            if thresholds is None:
                raise self.doc.error(f"{base}.rollout_rs_threshold", f"must be set when rollout_rs is {options!r} "
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
        try:
            if options is not None:
                parse_rollout_rs(options, s["rollout_rs_threshold"],
                                 names=(f"{base}.rollout_rs", f"{base}.rollout_rs_threshold"))
            if level is not None:
                parse_rollout_is(level, s.get("rollout_is_threshold", "2.0"),
                                 names=(f"{base}.rollout_is", f"{base}.rollout_is_threshold"))
        except ConfigError as err:
            raise ConfigError(f"{self.doc.path}: {err}") from None

    def _gdpo(self, a: dict, estimator: str | None) -> None:
        present = [k for k in ("gdpo_reward_keys", "gdpo_reward_weights") if k in a and a[k] is not None]
        if not present:
            return
        if estimator is not None and not ESTIMATORS[estimator].components:
            for key in present:
                self.ignored.append(f"algorithm.{key}")
            readers = " or ".join(names_where(lambda e: e.components))
            self.notes.append(f"algorithm.{present[0]} is unused: only adv_estimator {readers} reads it "
                              f"(the file says {estimator})")
            return
        keys = weights = None
        if "gdpo_reward_keys" in present:
            dotted = "algorithm.gdpo_reward_keys"
            raw = self.doc.resolve(dotted, a["gdpo_reward_keys"])
            if not isinstance(raw, list) or not raw:
                raise self.doc.error(dotted, f"must be a non-empty list of reward column names, got {raw!r}")
            keys = [self.doc.string(f"{dotted}.{i}", item) for i, item in enumerate(raw)]
            if len(set(keys)) != len(keys):
                raise self.doc.error(dotted, f"names a column twice: {keys}")
            self.settings["reward_components"] = keys
        if "gdpo_reward_weights" in present:
            dotted = "algorithm.gdpo_reward_weights"
            raw = self.doc.resolve(dotted, a["gdpo_reward_weights"])
            if not isinstance(raw, list) or not raw:
                raise self.doc.error(dotted, f"must be a non-empty list of numbers, got {raw!r}")
            weights = [self.doc.number(f"{dotted}.{i}", item) for i, item in enumerate(raw)]
            self.settings["reward_weights"] = weights
        if keys is not None and weights is not None and len(keys) != len(weights):
            raise self.doc.error("algorithm.gdpo_reward_weights", f"has {len(weights)} weights for {len(keys)} "
                                                                  "gdpo_reward_keys")

    def _section(self, algo: dict, key: str) -> dict | None:
        value = algo.get(key)
        if isinstance(value, str):
            value = self.doc.resolve(f"algorithm.{key}", value)
        return value


# ------------------------------------------------------------------------------------------------ reward


class _Overlong(_Part):
    """The DAPO overlong buffer of ``reward.reward_kwargs`` or ``reward_model.reward_kwargs``."""

    def read(self) -> None:
        found = []
        for section, tag in (("reward", "[P]"), ("reward_model", "[S]")):
            node = self.doc.tree.get(section)
            if not isinstance(node, dict):
                continue
            if section == "reward_model" and node.get("overlong_buffer") is not None:
                self.ignored.append("reward_model.overlong_buffer")
                self.notes.append("reward_model.overlong_buffer (the old DAPO recipe layout) is not read; "
                                  "rladv reads reward.reward_kwargs.overlong_buffer_cfg and max_resp_len")
            if node.get("reward_kwargs") is None:
                continue
            base = f"{section}.reward_kwargs"
            kwargs = self.doc.resolve(base, node["reward_kwargs"])
            if not isinstance(kwargs, dict):
                raise self.doc.error(base, f"must be a mapping, got a {kind(kwargs)}")
            for key in kwargs:
                if key not in ("overlong_buffer_cfg", "max_resp_len"):
                    self.ignored.append(f"{base}.{key}")
            parsed = self._buffer(base, kwargs)
            if parsed is not None:
                found.append((section, base, tag, parsed))
        if not found:
            return
        if len(found) == 2 and found[0][3] != found[1][3]:
            raise self.doc.error(f"{found[1][1]}.overlong_buffer_cfg",
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

    def _buffer(self, base: str, kwargs: dict) -> dict | None:
        """``None``: no overlong config here; ``{}``: present but disabled; else the three settings."""
        if kwargs.get("overlong_buffer_cfg") is None:
            if "max_resp_len" in kwargs:
                self.ignored.append(f"{base}.max_resp_len")
            return None
        key = f"{base}.overlong_buffer_cfg"
        cfg = self.doc.resolve(key, kwargs["overlong_buffer_cfg"])
        if not isinstance(cfg, dict):
            raise self.doc.error(key, f"must be a mapping, got a {kind(cfg)}")
        for name in cfg:
            if name not in _OVERLONG_KEYS:
                close = difflib.get_close_matches(str(name), _OVERLONG_KEYS, n=1)
                hint = f"; did you mean {key}.{close[0]}?" if close else f" (known keys: {', '.join(_OVERLONG_KEYS)})"
                raise self.doc.error(f"{key}.{name}", f"not an overlong_buffer_cfg key{hint}")
        if "log" in cfg:
            self.ignored.append(f"{key}.log")
        if not ("enable" in cfg and self.doc.boolean(f"{key}.enable", cfg["enable"])):
            for name in ("len", "penalty_factor"):
                if name in cfg:
                    self.ignored.append(f"{key}.{name}")
            if "max_resp_len" in kwargs:
                self.ignored.append(f"{base}.max_resp_len")
            return {}
        for name in ("len", "penalty_factor"):
            if name not in cfg or cfg[name] is None:
                raise self.doc.error(f"{key}.{name}", "must be set when overlong_buffer_cfg.enable is true")
        length = self.doc.integer(f"{key}.len", cfg["len"])
        if length <= 0:
            raise self.doc.error(f"{key}.len", f"must be > 0, got {length}")
        factor = self.doc.number(f"{key}.penalty_factor", cfg["penalty_factor"])
        if kwargs.get("max_resp_len") is None:
            raise self.doc.error(f"{base}.max_resp_len", "must be set when overlong_buffer_cfg.enable is true")
        max_len = self.doc.integer(f"{base}.max_resp_len", kwargs["max_resp_len"])
        if max_len < length:
            raise self.doc.error(f"{base}.max_resp_len", f"{max_len} is smaller than overlong_buffer_cfg.len {length}")
        return {"overlong_buffer_len": length, "overlong_penalty_factor": factor, "max_resp_len": max_len}

    def _manager_name(self, section: str) -> str | None:
        node = self.doc.tree.get(section, {}).get("reward_manager")
        if isinstance(node, dict):
            node = node.get("name")
        return node if isinstance(node, str) and "${" not in node else None
