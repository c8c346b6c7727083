"""A command's settings: its flags resolved over a ``--config`` verl YAML, and the flags refused for having no
effect. Plain values in, settings or a one-line message out: the command (``cli``) passes what typer parsed
and what was typed on the command line; a Python caller or a test passes dicts.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional

from ..estimators.registry import REFERENCE_DEFAULT
from .flags import flag_word, flags
from .settings import Config

__all__ = ["merge_verl_config", "refused_inert", "settings_from_flags"]


def settings_from_flags(params: Mapping[str, object]) -> dict:
    """The ``Config`` fields among a command's parameters, as ``Config`` takes them: what a flag gives as text
    (a comma list, repeated ``--column`` pairs) parsed as its ``Flag`` says."""
    settings = {k: v for k, v in params.items() if k in Config.model_fields}
    for key, flag in flags().items():
        if key in settings and flag.parse is not None:
            settings[key] = flag.parse(settings[key])
    return settings


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
    return f"{flag_word(name, typed_values[name])} has no effect {why}"
