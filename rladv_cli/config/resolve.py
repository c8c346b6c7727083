"""A command's settings: its flags resolved over a ``--config`` verl YAML, and the flags refused for having no
effect. Plain values in, settings or a one-line message out: the command (``cli``) passes what typer parsed
and what was typed on the command line; a Python caller or a test passes dicts.
"""
from __future__ import annotations

import os
from enum import Enum
from typing import Mapping, Optional, Sequence

from ..errors import ConfigError
from ..estimators.registry import REFERENCE_DEFAULT
from .settings import Config

__all__ = ["column_names", "merge_verl_config", "refused_inert", "settings_from_flags", "threshold_levels"]


def settings_from_flags(params: Mapping[str, object]) -> dict:
    """The ``Config`` fields among a command's parameters, as ``Config`` takes them (enum values, split lists,
    ``--column`` pairs)."""
    settings = {k: v for k, v in params.items() if k in Config.model_fields}
    for key, value in settings.items():
        if isinstance(value, Enum):
            settings[key] = value.value
        elif key in ("reward_components", "reward_weights"):
            settings[key] = _split(value)
        elif key == "columns":
            settings[key] = column_names(value)
        elif key == "thresholds":
            settings[key] = threshold_levels(value)
    return settings


def threshold_levels(given: Optional[Sequence[str]]) -> Optional[dict[str, tuple[Optional[float], Optional[float]]]]:
    """``["all_equal_group=0.3,0.8", "length_bias=off", ...]`` (``--threshold``, repeated) -> ``{code: (warn,
    fail)}``; a missing FAIL keeps the default's, ``off`` is never. None or empty stays None."""
    from ..report.verdict import THRESHOLDS, check_thresholds

    if not given:
        return None
    out = {}
    for item in given:
        code, sep, levels = item.partition("=")
        code = code.strip()
        parts = [p.strip() for p in levels.split(",")]
        if not sep or not code or not 1 <= len(parts) <= 2 or not all(parts):
            raise ConfigError(f"--threshold {item}: write CODE=WARN or CODE=WARN,FAIL (numbers, or off)")
        try:
            values = [None if p == "off" else float(p) for p in parts]
        except ValueError:
            raise ConfigError(f"--threshold {item}: {levels} is not WARN[,FAIL] (numbers, or off)") from None
        out[code] = (values[0], values[1] if len(values) == 2 else THRESHOLDS.get(code, (None, None))[1])
    try:
        check_thresholds(out)
    except ValueError as err:
        raise ConfigError(f"--threshold {err}") from None
    return out


def column_names(given: Optional[Sequence[str]]) -> Optional[dict[str, str]]:
    """``["uid=prompt_id", ...]`` (``--column``, repeated) -> ``{"uid": "prompt_id", ...}``; None or empty stays
    None. A value without ``=`` is a ``ConfigError``."""
    if not given:
        return None
    out = {}
    for item in given:
        name, sep, column = item.partition("=")
        if not sep or not name.strip() or not column.strip():
            raise ConfigError(f"--column {item}: write NAME=COLUMN, the contract's name and yours (uid=prompt_id)")
        if name.strip() in out:
            raise ConfigError(f"--column {item}: {name.strip()} is mapped twice")
        out[name.strip()] = column.strip()
    return out


def _split(text: Optional[str]) -> Optional[list[str]]:
    """``"a, b"`` -> ``["a", "b"]``; None stays None."""
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]


def merge_verl_config(flags: dict, typed: set[str], path: Optional[str | os.PathLike]) -> tuple[dict, Optional[dict]]:
    """Settings from ``path`` (a verl YAML, or None) overridden by the ``flags`` named in ``typed`` (those given
    on the command line); flags left at their defaults do not override the file, and a None among them is left
    out; a file that sets no estimator, and no flag that names one, gives verl's default (``gae``) and a note.
    Returns the settings and what the file contributed (None without a file); a ``ConfigError`` for a file
    that cannot be read."""
    typed_flags = {k: v for k, v in flags.items() if k in typed}
    if path is None:
        return {k: v for k, v in flags.items() if v is not None or k in typed_flags}, None
    from .verl import settings_from_verl_yaml

    from_file = settings_from_verl_yaml(str(path))
    merged = {k: v for k, v in flags.items() if v is not None}
    merged.update(from_file.settings)
    merged.update(typed_flags)
    notes = list(from_file.notes)
    if merged.get("estimator") is None:  # verl's AlgoConfig default, as its trainer would take it
        merged["estimator"] = REFERENCE_DEFAULT
        notes.append(f"algorithm.adv_estimator is not set: verl's default {REFERENCE_DEFAULT}")
    source = {"path": str(path), "settings": from_file.settings,
              "overridden_by_flags": sorted(set(typed_flags) & set(from_file.settings)),
              "ignored": from_file.ignored, "notes": notes}
    return merged, source


def refused_inert(cfg: Config, typed_values: Mapping[str, object], ray_engine: bool) -> Optional[str]:
    """``--flag has no effect ...`` for the first option typed on the command line (``typed_values``: name ->
    the value typed) that the other settings (flags, or the --config file) leave without effect
    (``Config.inert``), as --rollout-rs-threshold without --rollout-rs is, unless it says the default
    (``--kl-ctrl fixed``, ``--gamma 1.0``); then --ray-address/--ray-workers/--ray-keep-workers unless ``ray_engine``. None when
    every typed option counts. Only what was typed is judged: a verl YAML writes verl's defaults for keys its
    author never thought about."""
    defaults = type(cfg).model_fields
    inert = [(name, why) for name, why in cfg.inert().items()
             if name in typed_values and getattr(cfg, name) != defaults[name].default]
    if not ray_engine:
        inert += [(name, "without --engine ray") for name in ("ray_address", "ray_workers", "ray_keep_workers")
                   if name in typed_values]
    if not inert:
        return None
    name, why = inert[0]
    if name == "norm_adv_by_std":
        flag = "--norm-adv-by-std" if typed_values[name] else "--no-norm-adv-by-std"
    else:
        flag = f"--{name.replace('_', '-')}"
    return f"{flag} has no effect {why}"
