"""verl's rollout-correction strings (``rollout_rs``, ``rollout_rs_threshold``, ``rollout_is``,
``rollout_is_threshold``; docs/semantics.md §5.2-§5.3) parsed into rules, torch-free. The settings parse them
when a run's ``Config`` is built, the verl YAML reader with the file's keys in its messages."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ConfigError

RS_OPTIONS: tuple[str, ...] = (
    "token_k1", "token_k2", "token_k3",
    "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
    "seq_mean_k1", "seq_mean_k2", "seq_mean_k3",
    "seq_max_k2", "seq_max_k3",
)

_RS_NAMES = ("--rollout-rs", "--rollout-rs-threshold")
_IS_NAMES = ("--rollout-is", "--rollout-is-threshold")


@dataclass(frozen=True)
class RejectionRule:
    """One ``--rollout-rs`` option: keep where ``lower ≤ stat ≤ upper`` (k1, log space) or ``stat ≤ upper``."""

    option: str
    stat: str  # 'k1' | 'k2' | 'k3'
    agg: str  # 'token' | 'sum' | 'mean' | 'max'
    lower: float | None  # ln(lo) for k1, None otherwise
    upper: float  # ln(hi) for k1, U otherwise

    @property
    def is_token(self) -> bool:
        return self.agg == "token"


@dataclass(frozen=True)
class ImportanceSampling:
    """``--rollout-is``: TIS ``min(w, threshold)`` or IcePop ``w·[lo ≤ w ≤ hi]`` (``band``); optional batch norm."""

    level: str  # 'token' | 'sequence'
    threshold: float | None  # TIS upper bound
    band: tuple[float, float] | None  # IcePop lo, hi
    batch_normalize: bool

    @property
    def upper(self) -> float:
        """The upper bound verl uses for truncation, std/ESS clamping and the high fractions."""
        return self.band[1] if self.band is not None else self.threshold

    @property
    def lower(self) -> float:
        """The lower bound of the low fractions: IcePop's ``lo``, else ``1/threshold``."""
        return self.band[0] if self.band is not None else 1.0 / self.threshold


def _positive(text: str, flag: str, spec: str, option: str | None) -> float:
    """``float(text)`` that must be ``> 0`` (NaN is refused too); ``ConfigError`` naming the flag and option.

    verl 0.9.1 reads these numbers with Python's ``float()``, and so does rladv (blanks around the number,
    ``1e-3``, ``inf``, non-ASCII digits such as ``２.０`` all read as there), with one exception: ``float()`` takes
    ``_`` as a digit separator, so verl reads the band ``0.5_1_2`` as ``(0.5, 12.0)`` without a word; rladv
    refuses a ``_`` inside a number."""
    where = f"{flag} {spec!r}" + (f" for {option}" if option else "")
    if "_" in text:
        try:
            misread = float(text)
        except ValueError:
            raise ConfigError(f"{where}: {text.strip()!r} is not a number (a band is lo_hi, with one '_')") from None
        raise ConfigError(f"{where}: {text.strip()!r} holds '_', a digit separator to Python's float() (verl "
                          f"0.9.1 would read it as {misread!r}); give a number without '_', or a band lo_hi with "
                          "one '_'")
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{where}: {text.strip()!r} is not a number") from None
    if not value > 0:
        raise ConfigError(f"{where}: thresholds must be positive, got {value}")
    return value


def parse_rollout_rs(options: str, thresholds: str | float | None, *,
                     names: tuple[str, str] = _RS_NAMES) -> tuple[RejectionRule, ...]:
    """``--rollout-rs`` / ``--rollout-rs-threshold`` → one rule per de-duplicated option (§5.3, [P]).

    Options: comma list, blanks stripped, empties dropped, first occurrence kept. Thresholds: a number ``x``
    means ``str(x)``; a string is a comma list of 1 (shared) or one entry per option. k1: ``"lo_hi"`` (split at
    the first ``_``) or ``"hi"`` with ``lo = 1/hi``, ``0 < lo ≤ hi``, stored as ``ln lo, ln hi``; k2/k3: one
    ``U > 0`` without ``_``. ``names``: how messages call the two settings (the flags, or a YAML file's keys).
    """
    rs_flag, thr_flag = names
    if not isinstance(options, str):
        raise ConfigError(f"{rs_flag} must be a comma-separated string of options, got {options!r}")
    if thresholds is None:
        raise ConfigError(f"{rs_flag} {options!r} needs {thr_flag}")
    parts = [name.strip() for name in options.split(",") if name.strip()]
    if not parts:
        raise ConfigError(f"{rs_flag} {options!r} names no option; choose from {', '.join(RS_OPTIONS)}")
    unique: list[str] = []
    for name in parts:
        if name not in RS_OPTIONS:
            raise ConfigError(f"{rs_flag}: invalid option {name!r}; choose from {', '.join(RS_OPTIONS)}")
        if name not in unique:
            unique.append(name)

    # bool is an int subclass: str(True) then fails to parse as a number, as in verl.
    if isinstance(thresholds, (int, float)):
        specs = [str(thresholds)]
    elif isinstance(thresholds, str):
        specs = [part.strip() for part in thresholds.split(",") if part.strip()]
    else:
        raise ConfigError(f"{thr_flag} must be a number or a string, got {type(thresholds).__name__}")
    if not specs:
        raise ConfigError(f"{thr_flag} {thresholds!r} holds no threshold")
    if len(specs) not in (1, len(unique)):
        raise ConfigError(
            f"{thr_flag} {thresholds!r} has {len(specs)} entries; give 1 (shared) or {len(unique)}, "
            f"one per option of {','.join(unique)}"
        )
    if len(specs) == 1:
        specs = specs * len(unique)
    return tuple(_rule(name, spec, thr_flag) for name, spec in zip(unique, specs))


def _rule(option: str, spec: str, thr_flag: str = _RS_NAMES[1]) -> RejectionRule:
    """One option and its threshold entry → ``RejectionRule`` (k1 bounds in log space)."""
    agg = "token" if option.startswith("token") else option.split("_")[1]
    stat = option[-2:]
    if stat == "k1":
        if "_" in spec:
            lo_text, hi_text = spec.split("_", 1)
            lo = _positive(lo_text, thr_flag, spec, option)
            hi = _positive(hi_text, thr_flag, spec, option)
        else:
            hi = _positive(spec, thr_flag, spec, option)
            lo = 1.0 / hi
            if not lo > 0:  # hi = inf
                raise ConfigError(f"{thr_flag} {spec!r} for {option}: the implied lower bound 1/{hi} is not positive")
        if lo > hi:
            raise ConfigError(f"{thr_flag} {spec!r} for {option}: lower bound {lo} exceeds upper bound {hi}")
        return RejectionRule(option, stat, agg, math.log(lo), math.log(hi))
    if "_" in spec:
        raise ConfigError(f"{thr_flag} {spec!r} for {option}: give a single upper bound, without '_'")
    return RejectionRule(option, stat, agg, None, _positive(spec, thr_flag, spec, option))


def parse_rollout_is(level: str, threshold: str | float = 2.0, batch_normalize: bool = False, *,
                     names: tuple[str, str] = _IS_NAMES) -> ImportanceSampling:
    """``--rollout-is`` level and ``--rollout-is-threshold`` (§5.2, [P]): a number → TIS, ``"lo_hi"`` → IcePop."""
    is_flag, thr_flag = names
    if level not in ("token", "sequence"):
        raise ConfigError(f"{is_flag} {level!r}: must be 'token' or 'sequence'")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float, str)):
        raise ConfigError(f"{thr_flag} must be a number or a 'lo_hi' string, got {threshold!r}")
    text = str(threshold).strip()
    if not text:
        raise ConfigError(f"{thr_flag} is empty")
    if "_" in text:  # str(number) never holds "_", so only strings reach IcePop
        lo_text, hi_text = text.split("_", 1)
        lo = _positive(lo_text, thr_flag, text, None)
        hi = _positive(hi_text, thr_flag, text, None)
        if lo > hi:
            raise ConfigError(f"{thr_flag} {text!r}: lower bound {lo} exceeds upper bound {hi}")
        return ImportanceSampling(level, None, (lo, hi), bool(batch_normalize))
    return ImportanceSampling(level, _positive(text, thr_flag, text, None), None, bool(batch_normalize))
