"""How a setting is named to whoever set it. Each ``Config`` field carries a ``Flag``: how it is typed on the
command line (``rladv_cli.cli.options`` builds every option from it and from the field's type, default and
description), and a message names the setting as its reader gave it: ``--kl-coef -0.5`` on the command line,
``kl_coef=-0.5`` to a Python caller (docs/python-api.md, "Errors").
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from ..errors import ConfigError

# the panels of --help that group the options
ESTIMATOR = "Estimator settings"
SHAPING = "Reward shaping (before the estimator)"
CORRECTION = "Rollout correction (rejection and importance weights)"
RUN = "Execution"
WEIGHTS = "Token weights (the trainer's loss aggregation, docs/weights.md)"


@dataclass(frozen=True)
class Flag:
    """How one ``Config`` field is typed on the command line.

    panel:    its --help panel
    metavar:  its value's name in --help (default: N for an integer, FLOAT, the choices ``a|b|c``)
    name:     the flag, where it is not ``--<field-name>`` (``--column``, one per mapped column)
    typed_as: what the command line gives, where it is not the field's type (``str`` for a comma list,
              ``list[str]`` for a repeated option), and ``parse`` turns it into the field's value
    choices:  the names shell completion offers for its value
    numbers:  False where it changes how a run goes but never its numbers (left out of printed commands)
    shared:   False where only ``rladv compute`` and ``rladv compare`` take it (how the data is held and where)
    """

    panel: str
    metavar: Optional[str] = None
    name: Optional[str] = None
    typed_as: Any = None
    parse: Optional[Callable[[Any], Any]] = None
    choices: Optional[Callable[[], list[str]]] = None
    numbers: bool = True
    shared: bool = True


def flag_of(field: Any) -> Optional[Flag]:
    """The ``Flag`` among a pydantic field's metadata, None for a field the command line has no flag for."""
    return next((m for m in field.metadata if isinstance(m, Flag)), None)


@functools.cache
def flags() -> dict[str, Flag]:
    """Every ``Config`` field that has a flag, in declaration order."""
    from .settings import Config

    return {name: flag for name, field in Config.model_fields.items() if (flag := flag_of(field)) is not None}


# the outputs' options, by the Python keyword that names the same file (``dump_batch``'s path is convert's -o,
# ``export_group``'s folder inspect's --export)
OUTPUTS = {"output": "-o", "path": "-o", "report_path": "--report", "html_path": "--html",
           "groups_path": "--groups-out", "rows_path": "--rows-out", "folder": "--export"}


def option_name(name: str) -> str:
    """The command-line flag of setting ``name`` (``kl_coef`` -> ``--kl-coef``; ``columns`` -> ``--column``) or
    of an output (``OUTPUTS``)."""
    if name in OUTPUTS:
        return OUTPUTS[name]
    flag = flags().get(name)
    return flag.name if flag is not None and flag.name else "--" + name.replace("_", "-")


def flag_word(name: str, value: Any = True) -> str:
    """The flag that sets ``name``: ``--x``, or ``--no-x`` for a boolean setting set False."""
    flag = option_name(name)
    return f"--no-{flag[2:]}" if value is False else flag


_AUDIENCE = {"command_line": False}  # one per process: a run's threads name settings as the run does


@contextmanager
def to_command_line() -> Iterator[None]:
    """Messages raised inside name settings as flags (the ``rladv`` command wraps each run in this)."""
    before, _AUDIENCE["command_line"] = _AUDIENCE["command_line"], True
    try:
        yield
    finally:
        _AUDIENCE["command_line"] = before


_NO_VALUE = object()


def named(name: str, value: Any = _NO_VALUE) -> str:
    """Setting ``name`` (a ``Config`` field) as a message names it, with ``value`` when given: ``--kl-coef`` /
    ``--kl-coef -0.5`` / ``--no-norm-adv-by-std`` on the command line, ``kl_coef`` / ``kl_coef=-0.5`` /
    ``norm_adv_by_std=False`` to a Python caller. Floats are written with ``:g``."""
    shown = f"{value:g}" if isinstance(value, float) else value
    if not _AUDIENCE["command_line"]:
        return name if value is _NO_VALUE else f"{name}={shown!r}" if isinstance(value, str) else f"{name}={shown}"
    if value is _NO_VALUE or isinstance(value, bool):
        return flag_word(name, value)
    return f"{option_name(name)} {shown}"


def command_flags(settings: Mapping[str, Any]) -> list[str]:
    """The command-line words that set ``settings`` (``Config`` field names; None values are left out)."""
    out = []
    for key, value in settings.items():
        flag = option_name(key)
        if isinstance(value, bool):  # every boolean setting is an --x/--no-x pair
            out.append(flag_word(key, value))
        elif isinstance(value, (list, tuple)):
            out += [flag, ",".join(str(v) for v in value)]
        elif isinstance(value, dict):  # columns: one --column NAME=COLUMN each
            out += [part for name, column in value.items() for part in (flag, f"{name}={column}")]
        elif value is not None:
            out += [flag, str(value)]
    return out


def threshold_levels(given: Optional[Sequence[str]]) -> Optional[dict[str, tuple[Optional[float], Optional[float]]]]:
    """``["all_equal_group=0.3,0.8", "length_bias=off", ...]`` (``--threshold``, repeated) -> ``{code: (warn,
    fail)}``; a missing FAIL keeps the default's, ``off`` is never. None or empty stays None."""
    if not given:
        return None
    from ..report.verdict import THRESHOLDS, check_thresholds

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


def comma_list(text: Optional[str]) -> Optional[list[str]]:
    """``"a, b"`` -> ``["a", "b"]`` (a comma-separated flag); None stays None."""
    return None if text is None else [part.strip() for part in text.split(",") if part.strip()]
