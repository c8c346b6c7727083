"""Help that reads at 80 columns, the same with any typer: usage, what a command does and its examples, then
its arguments and options grouped in panels, each option with the name of its value (none for a flag) and its
default. ``reference`` renders every command's help as docs/cli.md (``python -m rladv_cli.cli docs/cli.md``
writes it; a test fails when the file and the help drift apart)."""
from __future__ import annotations

import enum
import inspect
import textwrap

import typer.core

WIDTH = 80
_OPTIONS = "Options"


def _paragraphs(text: str) -> list[str]:
    return [p.strip() for p in inspect.cleandoc(text or "").split("\n\n") if p.strip()]


def _first_sentence(text: str) -> str:
    """What a command does, for the list of commands: its docstring's first sentence."""
    first = " ".join((_paragraphs(text) or [""])[0].split())
    return first.split(". ", 1)[0].rstrip(".") + "."


def _write_description(formatter, text: str) -> None:
    """The command's docstring: prose paragraphs wrapped, an ``Examples:`` paragraph's lines kept as written."""
    for paragraph in _paragraphs(text):
        formatter.write_paragraph()
        lines = paragraph.splitlines()
        if lines[0].strip() == "Examples:":  # and its command lines, as written
            formatter.write_text(lines[0])
            with formatter.indentation():
                for line in lines[1:]:
                    formatter.write(" " * formatter.current_indent + line.strip() + "\n")
        else:
            _write_wrapped(formatter, " ".join(line.strip() for line in lines))


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken at spaces only (``--kl-penalty`` stays whole)."""
    return textwrap.wrap(text, max(width, 20), break_on_hyphens=False, break_long_words=False) or [""]


def _write_wrapped(formatter, text: str) -> None:
    indent = " " * formatter.current_indent
    for line in _wrap(text, formatter.width - formatter.current_indent):
        formatter.write(indent + line + "\n")


def _write_dl(formatter, rows: list[tuple[str, str]], col_max: int) -> None:
    """Name and help in two columns: a name wider than ``col_max`` gets a line of its own."""
    indent = " " * formatter.current_indent
    first = min(max((len(name) for name, _ in rows), default=0), col_max) + 2
    width = formatter.width - formatter.current_indent - first
    for name, help_text in rows:
        lines = _wrap(help_text, width) if help_text else [""]
        if len(name) + 2 > first:
            formatter.write(indent + name + "\n")
            head = " " * first
        else:
            head = f"{name:{first}}"
        formatter.write(indent + (head + lines[0]).rstrip() + "\n")
        for line in lines[1:]:
            formatter.write(indent + " " * first + line + "\n")


def _default(param) -> str:
    """``[default: ...]`` for what the option takes when not given; empty where that says nothing."""
    value = param.default
    if getattr(param, "is_flag", False) and getattr(param, "secondary_opts", None):
        return f"[default: {(param.opts if value else param.secondary_opts)[-1]}]"
    if value is None or value is False or value == () or not getattr(param, "show_default", True):
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    return f"[default: {value}]"


def _option_record(param) -> tuple[str, str]:
    names = sorted(param.opts, key=lambda o: (o.startswith("--"), o))
    name = ", ".join(names)
    if getattr(param, "secondary_opts", None):
        name += " / " + ", ".join(param.secondary_opts)
    if not getattr(param, "is_flag", False):
        name += f" {param.metavar or 'VALUE'}"
    extra = [_default(param)]
    if getattr(param, "envvar", None):
        extra.append(f"[env: {param.envvar}]")
    return name, " ".join(part for part in [param.help or "", *extra] if part)


def _argument_name(param) -> str:
    name = param.metavar or param.name.upper()
    return name + ("..." if param.nargs != 1 else "")


def _usage(command, ctx) -> str:
    pieces = ["[OPTIONS]"]
    for param in command.get_params(ctx):
        if param.param_type_name == "argument":
            name = _argument_name(param)
            pieces.append(name if param.required else f"[{name}]")
    if hasattr(command, "commands"):  # the group
        pieces.append("COMMAND [ARGS]...")
    return " ".join(pieces)


def format_help(command, ctx, formatter) -> None:
    """``command``'s help into ``formatter`` (click's, which wraps at its width). Only what every click (and
    typer's own copy of it) has is read: opts, metavar, help, default, the typer panel."""
    formatter.write_usage(ctx.command_path, _usage(command, ctx))
    _write_description(formatter, command.help or "")
    args = [(_argument_name(p), p.help or "") for p in command.get_params(ctx)
            if p.param_type_name == "argument"]
    if args:
        with formatter.section("Arguments"):
            _write_dl(formatter, args, col_max=24)
    panels: dict[str, list[tuple[str, str]]] = {_OPTIONS: []}
    for param in command.get_params(ctx):
        if param.param_type_name == "option" and not param.hidden:
            panels.setdefault(getattr(param, "rich_help_panel", None) or _OPTIONS, []).append(_option_record(param))
    for title, records in panels.items():
        if records:
            with formatter.section(title):
                _write_dl(formatter, records, col_max=30)
    if hasattr(command, "commands"):
        rows = [(name, sub.short_help or _first_sentence(sub.help or "")) for name, sub in command.commands.items()
                if not sub.hidden]
        with formatter.section("Commands"):
            _write_dl(formatter, rows, col_max=14)


class HelpCommand(typer.core.TyperCommand):
    """A command whose ``--help`` is ``format_help``'s."""

    def format_help(self, ctx, formatter) -> None:
        format_help(self, ctx, formatter)


class HelpGroup(typer.core.TyperGroup):
    """The command group whose ``--help`` is ``format_help``'s."""

    def format_help(self, ctx, formatter) -> None:
        format_help(self, ctx, formatter)


def command_help(group, name: str | None = None, width: int = WIDTH) -> str:
    """The help text of command ``name`` (the group's own without one), as ``rladv NAME --help`` prints it at
    ``width`` columns."""
    def context(command, info_name, parent=None):
        # click's own: a terminal of ``width`` columns or more gets help ``width - 2`` wide
        settings = {**(getattr(command, "context_settings", None) or {}), "terminal_width": width - 2,
                    "max_content_width": width}
        return command.context_class(command, info_name=info_name, parent=parent, **settings)

    parent = context(group, "rladv")
    command, ctx = group, parent
    if name is not None:
        command = group.commands[name]
        ctx = context(command, name, parent)
    formatter = ctx.make_formatter()
    command.format_help(ctx, formatter)
    return formatter.getvalue()


def reference(group) -> str:
    """docs/cli.md: every command's help, as printed at 80 columns."""
    parts = ["# Command-line reference\n",
             "Every command's `--help`, as `rladv` prints it at 80 columns. Generated from the code: "
             "`python -m rladv_cli.cli docs/cli.md` writes this file, and a test fails when the two "
             "drift apart.\n"]
    for name in (None, *group.commands):
        title = "rladv" if name is None else f"rladv {name}"
        parts.append(f"## `{title}`\n\n```\n{command_help(group, name).rstrip()}\n```\n")
    return "\n".join(parts)
