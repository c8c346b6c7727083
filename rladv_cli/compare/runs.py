"""Run specifications: ``--run "NAME: OPTIONS"`` as a name, the column its advantages are written under
(``advantages__<slug>``), and its options split as a shell splits them (``shlex``) and parsed by a command's own
option parameters (the CLI hands over ``rladv compute``'s), so that a run takes every setting compute takes,
through compute's parser and nothing else."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Collection, Sequence

from ..config.settings import RUN_ONLY
from ..errors import ConfigError

EXAMPLE = '--run "dr grpo: --estimator grpo --no-norm-adv-by-std"'
_NOT_SLUG = re.compile(r"[^0-9a-z]+")


@dataclass(frozen=True)
class RunSpec:
    """One ``--run``: its ``name`` (as typed, outer spaces removed) and its option words ``args``."""

    name: str
    args: tuple[str, ...]
    compared: str = "advantages"  # or token_weight, when every run gives --loss-agg-mode

    @property
    def slug(self) -> str:
        """The name in lower case, every run of characters other than ASCII letters and digits as one ``_``."""
        return _NOT_SLUG.sub("_", self.name.lower()).strip("_")

    @property
    def column(self) -> str:
        """The output column of this run's compared values (``-o``): ``advantages__<slug>`` or
        ``token_weight__<slug>``."""
        return f"{self.compared}__{self.slug}"


def parse_spec(text: str) -> RunSpec:
    """``"NAME: OPTIONS"`` -> ``RunSpec``: the name is everything before the first colon; the options are split
    as a POSIX shell splits words (quotes group, backslashes escape). A missing colon or name, or unbalanced
    quotes, are a ``ConfigError``."""
    name, colon, rest = text.partition(":")
    name = name.strip()
    if not colon or not name:
        raise ConfigError(f"--run {text!r}: write NAME: OPTIONS, e.g. {EXAMPLE}")
    try:
        args = tuple(shlex.split(rest))
    except ValueError as err:
        raise ConfigError(f"run {name!r}: its options do not split into words ({err}): {rest.strip()!r}") from None
    return RunSpec(name, args)


def parse_specs(texts: Sequence[str]) -> list[RunSpec]:
    """Every ``--run``, in order (``parse_spec``), checked by ``distinct``."""
    return distinct([parse_spec(t) for t in texts])


def distinct(specs: Sequence[RunSpec]) -> list[RunSpec]:
    """``specs`` when there are at least two, no name twice and no two names giving one output column."""
    if len(specs) < 2:
        raise ConfigError(f"compare needs at least two runs, got {len(specs)}; give --run once per run, e.g. "
                          f"{EXAMPLE}")
    seen: dict[str, RunSpec] = {}
    for spec in specs:
        if not spec.slug:
            raise ConfigError(f"run {spec.name!r}: a run's name needs an ASCII letter or digit (it names the output "
                              "column advantages__NAME)")
        if spec.slug in seen:
            other = seen[spec.slug]
            if other.name == spec.name:
                raise ConfigError(f"run name {spec.name!r} is given twice; each --run needs a name of its own")
            raise ConfigError(f"runs {other.name!r} and {spec.name!r} would both write the column {spec.column}; "
                              "give names that differ in their letters or digits")
        seen[spec.slug] = spec
    return list(specs)


def _flag(param: Any) -> str:
    """A parameter's long option name, as its help shows it first."""
    return next((o for o in param.opts if o.startswith("--")), param.opts[0])


def run_context(spec: RunSpec, command: Any, allowed: Collection[str], parent: Any = None) -> Any:
    """``spec``'s options parsed by ``command``'s option parameters (its arguments left out; no ``--help``),
    with click's parser: the context's ``params`` hold every option's value and its parameter sources say
    which ones were typed, as the command's own context would. ``command`` is a click (or typer) command.
    A parse error (unknown option, bad value, a stray word), or an option typed that is not in ``allowed``
    (the settings that decide the numbers), is a one-line ``ConfigError`` naming the run."""
    options = [p for p in command.params if p.param_type_name == "option"]
    parser = type(command)(name=command.name, params=options, add_help_option=False)
    try:
        ctx = parser.make_context(f"run {spec.name}", list(spec.args), parent=parent)
    except Exception as err:  # noqa: BLE001 - click's (or typer's vendored click's) usage errors, duck-typed
        if not hasattr(err, "format_message"):
            raise
        message = " ".join(err.format_message().split())
        raise ConfigError(f"run {spec.name!r}: {message}") from None
    for param in options:
        source = ctx.get_parameter_source(param.name)
        if param.name in allowed or getattr(source, "name", "") != "COMMANDLINE":
            continue
        if param.name in RUN_ONLY:
            raise ConfigError(f"run {spec.name!r}: {_flag(param)} changes how a run goes, never its numbers; give "
                              "it to rladv compare itself (it applies to every run)")
        raise ConfigError(f"run {spec.name!r}: {_flag(param)} is not a setting of the numbers; a run takes "
                          "--estimator, --config and compute's settings only")
    return ctx
