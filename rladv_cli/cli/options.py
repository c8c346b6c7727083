"""The options the commands share: the pipeline's settings, built from ``Config``'s fields and their ``Flag``s
(in --help's panels), the dataset argument, and the choices. Every option that takes a value names it
(``--gamma FLOAT``); a flag names none."""
from __future__ import annotations

from enum import Enum
from inspect import Parameter
from inspect import signature as pysignature
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Optional, Union, get_args, get_origin

import typer

from ..config.flags import RUN, Flag, flag_word, flags, option_name
from ..config.settings import Config
from ..estimators.conventions import CONVENTIONS
from ..estimators.registry import ESTIMATORS


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class LogFormat(str, Enum):  # io.importers.FORMATS
    verl_jsonl = "verl-jsonl"
    nemo_rl = "nemo-rl"
    trl = "trl"
    slime = "slime"
    prime_rl = "prime-rl"
    areal = "areal"


class FailOn(str, Enum):
    never = "never"
    warn = "warn"
    fail = "fail"


def choices(kind: type[Enum]) -> str:
    """``a|b|c``: the values an enum option takes, as its value's name in the help."""
    return "|".join(member.value for member in kind)


def path(value: str) -> Path:
    """A path option's or argument's value; an empty one is refused (``Path("")`` is the current folder)."""
    if isinstance(value, Path):
        return value
    if not value:
        raise typer.BadParameter("an empty path names no file")
    return Path(value)


Datasets = Annotated[list[Path], typer.Argument(
    parser=path, metavar="DATASET", help="Parquet file(s), folder(s) of *.parquet or quoted glob(s), read as one dataset.")]

FailOnOption = Annotated[FailOn, typer.Option(
    metavar="warn|fail", help="Exit 1 when the verdict is this or worse (the outputs are written either way); "
    "default: never.", rich_help_panel=RUN)]

GroupsOut = Annotated[Optional[Path], typer.Option(
    parser=path, metavar="PATH", help="Also write the verdict's table of groups (uid, size, score mean/std, signal "
    "share, cause) as Parquet here (docs/debugging.md).")]
RowsOut = Annotated[Optional[Path], typer.Option(
    parser=path, metavar="PATH", help="Also write the verdict's table of rows (file, row, uid, totals, tokens, "
    "advantage mean/min/max, cause) as Parquet here.")]


def _names(of: Callable[[], list[str]]) -> Callable[[str], list[str]]:
    """Shell completion (``rladv --install-completion``) of an option's value among the names ``of()`` gives."""
    return lambda incomplete: sorted(n for n in dict.fromkeys(of()) if n.startswith(incomplete))


def _estimator_names() -> list[str]:
    return [*ESTIMATORS, *(n for c in CONVENTIONS.values() for n in c.estimators)]


Estimator = Annotated[Optional[str], typer.Option(
    autocompletion=_names(_estimator_names), metavar="NAME",
    help=f"Advantage estimator, by its trainer's name; verl's and rladv's: {', '.join(ESTIMATORS)} "
    "(rladv estimators [--convention NAME] describes them; or from --config, whose default is gae).")]
VerlConfig = Annotated[Optional[Path], typer.Option(
    "--config", parser=path, metavar="YAML", help="A verl trainer YAML (or its algorithm: section); flags given "
    "here win.")]


def _help(description: str) -> str:
    """A ``Config`` field's description as an option's help (a sentence; it may start with the estimators it
    applies to, in their own lower case)."""
    return description + ("" if description.endswith(".") else ".")


def _metavar(flag: Flag, annotation: Any) -> Optional[str]:
    """The value's name in --help: the ``Flag``'s, else N, FLOAT or the choices ``a|b|c``; None for a flag."""
    if flag.metavar:
        return flag.metavar
    args = get_args(annotation)
    kind = next((a for a in args if a is not type(None)), annotation) if get_origin(annotation) is Union else annotation
    if get_origin(kind) is Literal:
        return "|".join(get_args(kind))
    return {int: "N", float: "FLOAT", str: "TEXT"}.get(kind)


def setting_option(name: str) -> tuple[Any, Any]:
    """The typer annotation and default of setting ``name``, built from its ``Config`` field: the ``Flag``
    (panel, value name, flag), the type (a boolean is an ``--x/--no-x`` pair, a ``Literal`` the choices), the
    default and the description (the help)."""
    field = Config.model_fields[name]
    flag = flags()[name]
    annotation = flag.typed_as or field.annotation
    decls = [f"{option_name(name)}/{flag_word(name, False)}"] if annotation is bool else [option_name(name)]
    option = typer.Option(*decls, metavar=_metavar(flag, annotation), help=_help(field.description),
                          rich_help_panel=flag.panel, autocompletion=flag.choices and _names(flag.choices))
    return Annotated[annotation, option], field.default


def takes_settings(*, run: bool = False, shared: bool = True, after: str = "config") -> Callable[[Callable], Callable]:
    """Give a typer command the options of ``Config``'s fields (typer reads the signature) right after its
    parameter ``after``: the settings every computing command shares (``shared``) and compute's own run options
    (``run``: chunk_rows, cache_mib, device, threads). The command receives them in ``**settings`` (and
    ``ctx.params``)."""
    names = [name for name, flag in flags().items() if (flag.shared and shared) or (not flag.shared and run)]

    def decorate(command: Callable) -> Callable:
        signature = pysignature(command, eval_str=True)
        params = [p for p in signature.parameters.values() if p.kind is not Parameter.VAR_KEYWORD]
        at = [p.name for p in params].index(after) + 1
        added = [Parameter(name, Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation, default=default)
                 for name in names for annotation, default in [setting_option(name)]]
        command.__signature__ = signature.replace(parameters=params[:at] + added + params[at:])
        return command

    return decorate


SHARED_SETTINGS = tuple(name for name, flag in flags().items() if flag.shared)  # every computing command's
Columns = setting_option("columns")[0]  # --column, for the commands that take no other setting
