"""The commands: each parses its options, calls the library, prints, and turns an ``RladvError`` into one
``Error: ...`` line and exit code 2."""
from __future__ import annotations

import dataclasses
import functools
import io
import json
import math
import os
import signal
import sys
import textwrap
from contextlib import contextmanager, redirect_stderr
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from .. import __version__
from ..errors import RladvError, one_line, shown
from ..estimators.conventions import get_convention
from ..estimators.registry import DEFAULT_GROUP_ESTIMATOR, names_where
from .help import HelpCommand, HelpGroup
from ..config.flags import RUN, option_name, to_command_line
from .options import (SHARED_SETTINGS, Columns, Datasets, Engine, Estimator, FailOn, FailOnOption, GroupsOut,
                      LogFormat, RowsOut, VerlConfig, choices, path, takes_settings)
from .progress import may_be_terminal, progress


HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}


class _OneLineErrors(HelpGroup):
    """Usage errors (unknown option, bad choice, missing argument) as one ``Error: ...`` line, exit code 2; a
    reader of stdout that went away (``| head``) ends the command as SIGPIPE ends a process, exit 141, not
    click's 1, which is ``--fail-on``'s (docs/compute.md, "Errors and exit codes")."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            try:  # later writes and the final flush go nowhere instead of failing again
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError, io.UnsupportedOperation):
                pass
            raise SystemExit(128 + signal.SIGPIPE) from None

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        with to_command_line():  # messages name settings by their flags (config.flags.named)
            return self._main(*args, standalone_mode=standalone_mode, **kwargs)

    def _main(self, *args, standalone_mode: bool, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)
        except typer.Abort:
            typer.echo("Aborted.", err=True)
            sys.exit(1)
        except Exception as err:
            # click's (or typer's vendored click's) ClickException: duck-typed to stay version-proof
            if not (hasattr(err, "format_message") and hasattr(err, "exit_code")):
                raise
            if type(err).__name__ == "NoArgsIsHelpError":  # the help is the answer to no arguments
                typer.echo(err.format_message().rstrip("\n"))
                sys.exit(err.exit_code)
            message = " ".join(err.format_message().replace("Value error, ", "").split())
            if message:  # empty when the help text was the answer (no arguments given)
                typer.echo(f"Error: {one_line(message)}", err=True)
            sys.exit(err.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rladv {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version, help="Print rladv's version and exit.")] = False) -> None:
    """rladv: recompute verl's per-token advantages offline from rollout Parquet files, and find out why a batch
    does not teach the model.

    Examples:
      rladv compute sample_data/groups.parquet --estimator grpo --html r.html
      rladv inspect sample_data/groups.parquet --estimator grpo
      rladv explain sample_data/multiturn.parquet --row 3 --estimator gae
    """


@functools.cache
def _console_type():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich would exit 1; the command group exits as SIGPIPE does
            raise BrokenPipeError

    return _Console


def _console(stderr: bool = False):
    """A rich console on stdout (or stderr) for the commands' tables."""
    return _console_type()(stderr=stderr)


def _stderr_console():
    """``_console`` on stderr: the summary's, the notes' and the progress bar's."""
    return _console(stderr=True)


def _stdout(values: dict[str, Optional[Path]]) -> Optional[str]:
    """Which of ``values`` (option -> path) is ``-``, stdout; two of them is an error."""
    dashed = [option for option, value in values.items() if value is not None and str(value) == "-"]
    if len(dashed) > 1:
        _fail(f"{' and '.join(dashed)} both name stdout (-); give all but one of them a file name")
    return dashed[0] if dashed else None


def _skipped(paths: list[str]) -> None:
    """One ``Note:`` line on stderr naming the rladv outputs a folder or pattern held beside the data."""
    if paths:
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        typer.echo(one_line(f"Note: left out {len(paths)} rladv output(s) found beside the data: {shown} (name a "
                            "file on its own to read it)"), err=True)


def _fail(message: str) -> None:
    """``Error: message`` on one line (control characters escaped), exit code 2."""
    typer.echo(f"Error: {one_line(message)}", err=True)
    raise typer.Exit(code=2)


def _run(action: Callable[[], object]) -> object:
    """Run a library call; an ``RladvError`` or an OS-level failure becomes one line and exit code 2."""
    try:
        return action()
    except RladvError as err:
        _fail(str(err))
    except OSError as err:
        where = f"{shown(err.filename)}: " if err.filename is not None else ""
        _fail(f"{where}{err.strerror or err}")


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
@takes_settings(run=True)
def compute(
    ctx: typer.Context,
    dataset: Datasets,
    estimator: Estimator = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", parser=path, metavar="PATH", help="Output Parquet (default DATASET.adv.parquet); with --engine ray, the output folder (default DATASET.adv).")] = None,
    report: Annotated[Optional[Path], typer.Option(parser=path, metavar="PATH", help="Also write the report as JSON here (- writes it to stdout, and the summary to stderr).")] = None,
    html: Annotated[Optional[Path], typer.Option(parser=path, metavar="PATH", help="Also write a self-contained HTML report (plots inline) here (- writes it to stdout, and the summary to stderr).")] = None,
    groups_out: GroupsOut = None,
    rows_out: RowsOut = None,
    config: VerlConfig = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.", rich_help_panel=RUN)] = False,
    strict_replay: Annotated[bool, typer.Option("--strict-replay", help="Exit 1 unless the input's own token_level_rewards/advantages/returns (a trainer dump) agree with this run's (the output is written either way).")] = False,
    fail_on: FailOnOption = FailOn.never,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout (as --report -) and no summary.")] = False,
    engine: Annotated[Engine, typer.Option(metavar=choices(Engine), help="local: this process, one output file; ray: a Ray cluster, one output file per input file.", rich_help_panel=RUN)] = Engine.local,
    ray_address: Annotated[Optional[str], typer.Option(envvar="RAY_ADDRESS", metavar="HOST:PORT", help="--engine ray: the cluster to join (default: a local one for the run).", rich_help_panel=RUN)] = None,
    ray_workers: Annotated[Optional[int], typer.Option(metavar="N", help="--engine ray: workers, each holding a share of the input files and of the free CPUs for the whole run (default: one per free CPU, at most one per file).", rich_help_panel=RUN)] = None,
    ray_keep_workers: Annotated[float, typer.Option(metavar="SECONDS", help="--engine ray on a running cluster: keep the workers up this long after a run that finished, for the next run of this rladv with as many workers; it skips their start and imports (default 0: they stop with the run).", rich_help_panel=RUN)] = 0.0,
    **settings,
) -> None:
    """Compute advantages and returns, written beside every input column. The report says what shaped them:
    singleton and all-equal groups, scores on tool observations, KL terms, rejected tokens, ...

    Examples:
      rladv compute rollouts.parquet --estimator grpo
      rladv compute runs/ --config ppo_trainer.yaml --batch-key step -o out.parquet
      rladv compute rollouts.parquet --estimator gae --lam 0.95 --html report.html
      rladv compute rollouts.parquet --estimator grpo -q --report - > report.json
    """
    from ..api import compute_file

    cfg, source = _resolve_config(ctx, config, engine)
    to_stdout = _stdout({"--json": Path("-") if as_json else None, "--report": report, "--html": html})
    paths = [str(p) for p in dataset]
    report_path, html = (None if to_stdout == "--report" else report), (None if to_stdout == "--html" else html)
    # rich (but for a progress bar on a terminal) and the report's printing are imported after the run, not
    # before its input is being read (docs/performance.md, "Start-up")
    with progress(_stderr_console, enabled=not (quiet or as_json) and may_be_terminal()) as show:
        if engine is Engine.ray:
            from ..pipeline.ray_engine import compute_ray

            result = _run(lambda: compute_ray(paths, cfg, output_dir=output, address=ray_address, workers=ray_workers,
                                              keep_workers=ray_keep_workers,
                                              progress=show, report_path=report_path, html_path=html,
                                              config_source=source, groups_path=groups_out, rows_path=rows_out))
        else:
            result = _run(lambda: compute_file(paths, cfg, output=output, report_path=report_path, progress=show,
                                               config_source=source, html_path=html, groups_path=groups_out,
                                               rows_path=rows_out))
    from ..report.model import render

    # rich is imported to print, not for a quiet run (docs/performance.md, "Start-up")
    err = _stderr_console() if cfg.notes or not (quiet or as_json) else None
    for note in cfg.notes:  # after the run: an error stays the only line a failed run prints
        err.print(f"Note: {one_line(note)}", markup=False, highlight=False, soft_wrap=True)
    _skipped(result.inputs.skipped)
    if not (quiet or as_json):
        if source and (source["ignored"] or source["notes"]):
            for note in source["notes"]:
                err.print(f"[dim]--config: {note}[/dim]")
            if source["ignored"]:
                err.print(f"[dim]--config: keys rladv does not use: {', '.join(source['ignored'])}[/dim]")
        render(result, err if to_stdout else _console())
    if to_stdout in ("--report", "--json"):
        typer.echo(result.to_json(), nl=False)
    elif to_stdout == "--html":
        from ..report.html import render_html

        typer.echo(render_html(result), nl=False)
    if strict_replay and not (result.replay and result.replay["agree"]):
        replay = result.replay
        why = ("the input holds none of token_level_rewards, rollout_is_weights, advantages, returns to compare"
               if replay is None or not replay["compared"] else f"the input's {replay['first_difference']} differ from "
               f"this run's (the report's replay section says where)")
        typer.echo(f"--strict-replay: {why}", err=True)
        raise typer.Exit(code=1)
    _exit_on_verdict(result.verdict, fail_on)


def _resolve_config(ctx: typer.Context, config_path: Optional[Path], engine: Optional[Engine] = None):
    """The run's ``Config`` from the command's flags over ``--config`` (a verl YAML), and what the file gave."""
    from ..config.settings import Config

    settings, source = _merge_verl_config(ctx, config_path)
    if settings.get("estimator") is None:
        _fail("--estimator is required: no --estimator and no --config was given (rladv estimators lists them)")
    cfg = _run(lambda: Config(**settings))
    _refuse_inert(ctx, cfg, engine)
    return cfg, source


def _merge_verl_config(ctx: typer.Context, config_path: Optional[Path]) -> tuple[dict, Optional[dict]]:
    """The command's settings over ``--config`` (``config.resolve.merge_verl_config``): flags typed on the
    command line win over the file, flags left at their defaults do not."""
    from ..config.resolve import merge_verl_config, settings_from_flags

    return _run(lambda: merge_verl_config(settings_from_flags(ctx.params), set(_typed_values(ctx)), config_path))


def _refuse_inert(ctx: typer.Context, cfg, engine: Optional[Engine]) -> None:
    """Stop (exit code 2) at the first option typed on the command line that has no effect
    (``config.resolve.refused_inert``)."""
    from ..config.resolve import refused_inert

    message = refused_inert(cfg, _typed_values(ctx), engine is Engine.ray)
    if message is not None:
        _fail(message)


def _typed(ctx: typer.Context, name: str) -> bool:
    """Whether option ``name`` was given on the command line (not a default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and getattr(source, "name", "") == "COMMANDLINE"


def _typed_values(ctx: typer.Context) -> dict:
    """The options given on the command line (not defaults), with their values."""
    return {name: value for name, value in ctx.params.items() if _typed(ctx, name)}


def _exit_on_verdict(verdict, fail_on: FailOn) -> None:
    """Exit 1, after one line on stderr, when ``verdict`` reached ``--fail-on``."""
    if fail_on is not FailOn.never and verdict.at_least(fail_on.value):
        typer.echo(one_line(f"Verdict {verdict.level.upper()} reached --fail-on {fail_on.value}: {verdict.headline}"),
                   err=True)
        raise typer.Exit(code=1)


def _only_typed(ctx: typer.Context, allowed: tuple[str, ...], why: str) -> None:
    """Stop with ``--flag: why`` when a setting of ``SHARED_SETTINGS`` (or --config) other than ``allowed``
    was typed on the command line."""
    for name in ("config", *SHARED_SETTINGS):
        if name not in allowed and _typed(ctx, name):
            _fail(f"{option_name(name)}: {why}")


def _columns(given: Optional[list[str]]) -> Optional[dict]:
    """``--column`` values as ``Config.columns``; a malformed one stops the command."""
    from ..config.flags import column_names

    return _run(lambda: column_names(given))


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
def validate(
    dataset: Datasets,
    estimator: Annotated[Optional[str], typer.Option(metavar="NAME", help="Also check the columns this estimator needs (rladv estimators lists them).")] = None,
    kl: Annotated[bool, typer.Option("--kl", help="Also check the columns KL shaping needs.")] = False,
    column: Columns = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was checked and every problem as JSON (exit 2 when there are problems).")] = False,
) -> None:
    """Check a dataset against the data contract. Nothing is computed (no torch).

    Examples:
      rladv validate rollouts.parquet --estimator gae
      rladv validate rollouts/ --kl --column uid=prompt_id
    """
    from ..api import validate as run_validate

    columns = _columns(column)
    summary = _run(lambda: run_validate([str(p) for p in dataset], estimator, kl=kl, columns=columns))
    _skipped(summary.skipped)
    if as_json:
        typer.echo(json.dumps({"ok": summary.ok, **dataclasses.asdict(summary)}, indent=2))
        raise typer.Exit(code=0 if summary.ok else 2)
    if summary.ok:
        typer.echo(f"ok: {summary.rows} rows, {summary.tokens} tokens in {len(summary.paths)} file(s)")
        if "uid" not in summary.columns and estimator is None:
            typer.echo(f"note: no uid column: no groups, so {', '.join(names_where(lambda e: e.groups))} cannot run on "
                       "this dataset (--column uid=COLUMN names your prompt-id column)")
        return
    bad = sum(p.count for p in summary.problems)
    typer.echo(f"Error: {bad} of {summary.rows} rows break the data contract ({len(summary.problems)} kind(s)):", err=True)
    for p in summary.problems:
        more = f"; first rows {', '.join(p.rows)}" if p.count > 1 else ""
        where = f" in {p.column}" if p.column else ""
        typer.echo(one_line(f"  {p.count} row(s) with {p.kind}{where}, e.g. {p.example}{more}"), err=True)
    raise typer.Exit(code=2)


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
@takes_settings()
def inspect(
    ctx: typer.Context,
    dataset: Datasets,
    estimator: Annotated[Optional[str], typer.Option(metavar="NAME", help="Judge the checks for this estimator; with --row/--uid, compute its advantages (rladv estimators lists them).")] = None,
    row: Annotated[Optional[int], typer.Option(metavar="N", help="Show one trajectory token by token: N is 0-based across all the files given, in the order they are read (with one file, its row).")] = None,
    uid: Annotated[Optional[str], typer.Option(metavar="UID", help="Show one group: totals, baseline, each member's advantage and why.")] = None,
    expected_n: Annotated[Optional[int], typer.Option(metavar="N", help="Expected rows per group (verl's rollout.n).")] = None,
    export: Annotated[Optional[Path], typer.Option(parser=path, metavar="DIR", help="With --uid: write a minimal reproducer (group.parquet + command.txt) into this folder.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (docs/contract.md §5 for the checklist).")] = False,
    fail_on: FailOnOption = FailOn.never,
    show_all: Annotated[bool, typer.Option("--all", help="List the passing checks too (otherwise one line names them).")] = False,
    chunk_rows: Annotated[int, typer.Option(metavar="N", help="Rows held in memory at once.")] = 8192,
    html: Annotated[Optional[Path], typer.Option(parser=path, metavar="PATH", help="Also write the checklist and findings as a self-contained HTML page here (- writes it to stdout, and the checklist to stderr).")] = None,
    groups_out: GroupsOut = None,
    rows_out: RowsOut = None,
    config: VerlConfig = None,
    **settings,
) -> None:
    """Debug a dataset: layout, groups, scores, masks and a pass/warn/fail checklist. --row and --uid also
    compute advantages, with every setting of compute; the checklist takes only --kl-coef, --kl-penalty and
    --column.

    Examples:
      rladv inspect rollouts.parquet --estimator grpo --expected-n 8
      rladv inspect rollouts.parquet --uid prompt-7 --estimator grpo
      rladv inspect rollouts.parquet --row 12 --estimator gae --lam 0.95
    """
    from ..config.settings import RUN_ONLY, Config
    from ..diagnose import checklist
    from ..diagnose.findings import render_inspection

    paths = [str(p) for p in dataset]
    if chunk_rows < 1:
        _fail(f"--chunk-rows must be at least 1, got {chunk_rows}")
    if row is not None and uid is not None:
        _fail("--row shows one trajectory and --uid one group; give one of them")
    if export is not None and uid is None:
        _fail("--export needs --uid")
    merged, source = _merge_verl_config(ctx, config)
    for note in (source or {}).get("notes", ()):
        typer.echo(one_line(f"--config: {note}"), err=True)
    name = merged.pop("estimator", None)
    if name is not None:
        _run(lambda: get_convention(merged.get("convention", "verl")).estimator(name))
    convention = _run(lambda: get_convention(merged.get("convention", "verl")))
    if uid is not None and convention.grouping != "uid":
        _fail(f"--uid: --convention {convention.name} groups rows by {convention.grouping}, not by uid; show one row "
              "with --row N (or rladv explain), or write the run's groups with rladv compute --groups-out")
    if export is not None and convention.name != "verl":
        _fail(f"--export writes a reproducer for verl's rules; --convention {convention.name} computes a group "
              "over the whole batch, so export the batch (or its rows with rladv compute --where)")
    to_stdout = _stdout({"--json": Path("-") if as_json else None, "--html": html})
    console = _console(stderr=to_stdout == "--html")
    if row is None and uid is None:
        _only_typed(ctx, ("config", "kl_coef", "kl_penalty", "columns", "batch_key", "epsilon", "norm_adv_by_std",
                          "where", "thresholds"),
                    "the checklist takes only --kl-coef, --kl-penalty, --batch-key, --epsilon, --norm-adv-by-std, "
                    "--where, --threshold and --column of compute's settings; the others apply with --row or --uid")
        kl_coef, kl_penalty = merged.get("kl_coef", 0.0), merged.get("kl_penalty", "kl")
        if not math.isfinite(kl_coef):
            _fail(f"--kl-coef must be a finite number, got {kl_coef}")
        columns = merged.get("columns")
        result = _run(lambda: checklist.inspect(paths, expected_n=expected_n, kl_coef=kl_coef, kl_penalty=kl_penalty,
                                                estimator=name, chunk_rows=chunk_rows, columns=columns,
                                                html_path=None if to_stdout == "--html" else html,
                                                groups_path=groups_out, rows_path=rows_out, where=merged.get("where"),
                                                batch_key=merged.get("batch_key"),
                                                epsilon=merged.get("epsilon", Config.model_fields["epsilon"].default),
                                                norm_adv_by_std=merged.get("norm_adv_by_std", True),
                                                thresholds=merged.get("thresholds")))
        typer.echo(result.to_json(), nl=False) if as_json else render_inspection(result, console, show_all)
        _skipped(result.skipped)
        if to_stdout == "--html":
            from ..diagnose.html import render_inspection_html

            typer.echo(render_inspection_html(result), nl=False)
        if result.invalid_rows:  # after the checklist that lists them: compute refuses such a dataset
            where = result.paths[0] if len(result.paths) == 1 else f"{len(result.paths)} files"
            _fail(f"{result.invalid_rows} of {result.rows} rows of {where} break the data contract, "
                  "so rladv compute refuses the dataset (the invalid_rows check above; rladv validate lists them all)")
        _exit_on_verdict(result.verdict, fail_on)
        return
    if html is not None:
        _fail("--html writes the dataset's checklist; it does not combine with --row or --uid")
    from ..diagnose import views

    if name is None and row is not None:
        _only_typed(ctx, ("columns",), "without --estimator, --row shows the file's own columns; compute's settings "
                    "need --estimator")
        options = {"columns": merged["columns"]} if merged.get("columns") else {}
    else:

        name = name or DEFAULT_GROUP_ESTIMATOR
        cfg = _run(lambda: Config(estimator=name, **merged))
        _refuse_inert(ctx, cfg, None)
        options = cfg.model_dump(exclude={"estimator", *RUN_ONLY})
    if export is not None:
        from ..diagnose.export import export_group

        written = _run(lambda: export_group(paths, uid, export, estimator=name, **options))
        typer.echo("\n".join(written))
        return
    if row is not None:
        view = _run(lambda: views.row_view(paths, row, estimator=name, **options))
        render = views.render_row
    else:
        view = _run(lambda: views.group_view(paths, uid, estimator=name, **options))
        render = views.render_group
    typer.echo(view.model_dump_json(indent=2)) if as_json else render(view, console)
    if view.error:  # shown in the view; rladv compute would stop there too
        raise typer.Exit(code=2)


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
@takes_settings()
def explain(
    ctx: typer.Context,
    dataset: Datasets,
    row: Annotated[int, typer.Option(metavar="N", help="Row to explain (0-based across the files given; with one file, its row).")],
    estimator: Estimator = None,
    config: VerlConfig = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    **settings,
) -> None:
    """Show how one row's advantages are derived. With compute's settings: the recursion per token, or the
    row's group with its baseline and scale.

    Examples:
      rladv explain rollouts.parquet --row 3 --estimator gae --lam 0.95
      rladv explain rollouts.parquet --row 3 --config ppo_trainer.yaml --json
    """
    from ..config.settings import RUN_ONLY
    from ..diagnose.explain import explain as run_explain
    from ..diagnose.explain import render_explanation

    cfg, _ = _resolve_config(ctx, config)
    options = cfg.model_dump(exclude={"estimator", *RUN_ONLY})
    result = _run(lambda: run_explain([str(p) for p in dataset], row, cfg.estimator, **options))
    typer.echo(result.model_dump_json(indent=2)) if as_json else render_explanation(result, _console())


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
@takes_settings(run=True, shared=False, after="output")
def compare(
    ctx: typer.Context,
    dataset: Datasets,
    run: Annotated[list[str], typer.Option("--run", metavar='"NAME: OPTIONS"', help="One run: its name, a colon, then compute's settings for it (--estimator, --config, --gamma, ...), as one quoted argument. Give it once per run, at least twice.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as one JSON object instead of tables.")] = False,
    html: Annotated[Optional[Path], typer.Option(parser=path, metavar="PATH", help="Also write a self-contained HTML page here: per pair, the scatter of the token advantages and the groups that differ most (- writes it to stdout, and the tables to stderr).")] = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", parser=path, metavar="PATH", help="Also write the input rows with one advantages__NAME column per run (token_weight__NAME when every run gives --loss-agg-mode) as Parquet here.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no tables.", rich_help_panel=RUN)] = False,
    **run_options,
) -> None:
    """Compare several runs' advantages over one batch, side by side: each pair's correlation, rows whose sign
    flips, tokens whose weight changes more than 2x, the groups that differ most, and each run's signal.

    Examples:
      rladv compare runs/ --run "a: --estimator grpo" --run "b: --estimator rloo"
      rladv compare r/ --run "a: --config c.yaml" --run "b: --estimator rloo" --json
    """
    from ..compare.engine import compare_runs
    from ..compare.model import render
    from ..compare.runs import parse_specs, run_context

    specs = _run(lambda: parse_specs(run))
    parser = ctx.parent.command.get_command(ctx.parent, "compute")
    settings = {"estimator", "config", *SHARED_SETTINGS}
    runs, notes = [], []
    for spec in specs:
        run_ctx = _run(lambda: run_context(spec, parser, settings, ctx))
        with _in_run(spec.name):
            cfg, source = _resolve_config(run_ctx, run_ctx.params.get("config"))
        runs.append((spec.name, cfg))
        notes += [f"run {spec.name!r}: --config: {note}" for note in (source or {}).get("notes", ())]
        notes += [f"run {spec.name!r}: {note}" for note in cfg.notes]
    to_stdout = _stdout({"--json": Path("-") if as_json else None, "--html": html})
    with progress(_stderr_console, enabled=not (quiet or as_json) and may_be_terminal()) as show:
        result = _run(lambda: compare_runs([str(p) for p in dataset], runs, output=output,
                                           html_path=None if to_stdout == "--html" else html,
                                           progress=show, **run_options))
    err = _stderr_console()
    for note in notes:  # after the runs: an error stays the only line a failed comparison prints
        err.print(f"Note: {one_line(note)}", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(result.to_json(), nl=False)
    elif not quiet:
        render(result, err if to_stdout else _console())
    if to_stdout == "--html":
        from ..compare.html import render_html

        typer.echo(render_html(result), nl=False)


@contextmanager
def _in_run(name: str):
    """The one-line error the block stops on (``_fail``) names run ``name``: ``Error: run 'NAME': ...``."""
    caught = io.StringIO()
    try:
        with redirect_stderr(caught):
            yield
    except typer.Exit:
        _fail(f"run {name!r}: " + caught.getvalue().strip().removeprefix("Error: "))
    sys.stderr.write(caught.getvalue())


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
def offpolicy(
    dataset: Datasets,
    rollout_rs: Annotated[list[str], typer.Option(metavar="OPTIONS", help="Rejection option(s) to sweep, verl's names (repeat the flag; token_k1,seq_max_k2 combines).")],
    thresholds: Annotated[Optional[str], typer.Option(metavar="T1,T2,...", help="Thresholds to try for every option, comma-separated (e.g. 0.5_2.0,0.8_1.25,3.0).")] = None,
    threshold: Annotated[Optional[list[str]], typer.Option(metavar="SPEC", help="One threshold in verl's full form (repeatable; may hold commas for combined options).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    chunk_rows: Annotated[int, typer.Option(metavar="N", help="Rows held in memory at once.")] = 1024,
    column: Columns = None,
) -> None:
    """Sweep rollout rejection: the tokens, rows and groups each threshold would remove.

    Examples:
      rladv offpolicy r.parquet --rollout-rs token_k1 --thresholds 0.5_2.0,0.8_1.25
      rladv offpolicy r.parquet --rollout-rs seq_max_k2 --thresholds 2.0,4.0 --json
    """
    from ..diagnose.offpolicy import render, sweep

    specs = [t.strip() for t in (thresholds or "").split(",") if t.strip()] + list(threshold or [])
    if not specs:
        _fail("give --thresholds T1,T2,... or --threshold SPEC")
    if chunk_rows < 1:
        _fail(f"--chunk-rows must be at least 1, got {chunk_rows}")
    columns = _columns(column)
    with progress(_stderr_console, enabled=not as_json and may_be_terminal()) as show:
        result = _run(lambda: sweep([str(p) for p in dataset], rollout_rs, specs, chunk_rows=chunk_rows, progress=show,
                                    columns=columns))
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        render(result, _console())


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
def convert(
    saved: Annotated[list[Path], typer.Argument(parser=path, metavar="SRC...", help="A batch the trainer saved (verl's DataProto.save_to_disk pickle, or torch.save output .pt), or with --from the trainer's log files, folders or globs.")],
    out: Annotated[Optional[Path], typer.Option("-o", "--output", parser=path, metavar="PATH", help="Parquet file to write (default: SRC with .parquet; required with --from).")] = None,
    source_format: Annotated[Optional[LogFormat], typer.Option("--from", metavar=choices(LogFormat), help="Read a trainer's log in this format instead of a saved batch (docs/dumps.md).")] = None,
    step: Annotated[Optional[int], typer.Option(metavar="N", help="Add a step column with this value (for --batch-key step over a folder of dumps); default: the batch's meta_info global_steps, when it has one.")] = None,
    trust_pickle: Annotated[bool, typer.Option("--trust-pickle", help="Unpickle SRC fully, running code from it (needed for verl's DataProto pickles; only for files you trust). Without it only tensors, lists, dicts and numbers are read. Also for --from slime.")] = False,
    reward_key: Annotated[Optional[str], typer.Option("--reward-key", metavar="KEY", help="--from slime: the score is reward[KEY] where slime's rewards are dicts (slime's --reward-key).")] = None,
) -> None:
    """Write a trainer's saved batch, or its rollout log (--from), as a rollout dataset for rladv compute. A dump
    is data: without --trust-pickle nothing in it runs.

    Examples:
      rladv convert step_120.pt -o step_120.parquet
      rladv convert step_120.pkl --trust-pickle -o step_120.parquet
      rladv convert --from verl-jsonl rollout_data/ -o rollouts.parquet
      rladv convert --from slime dump_details/rollout_data/ -o slime.parquet
      rladv compute step_120.parquet --config ppo_trainer.yaml --strict-replay
    """
    from ..io.dump import dump_batch, load_saved
    from ..io.write import check_output_path

    if source_format is not None:
        if out is None:
            _fail("--from reads a trainer's log files; give -o OUT.parquet")
        if step is not None:
            _fail("--step is for a saved batch; a log has its own steps")
        if (trust_pickle or reward_key is not None) and source_format is not LogFormat.slime:
            _fail(f"--{'trust-pickle' if trust_pickle else 'reward-key'} is for a saved batch or --from slime; "
                  f"{source_format.value} logs are JSON or Parquet")
        from ..io.importers import convert_log

        done = _run(lambda: convert_log(source_format.value, saved, out, trust_pickle=trust_pickle,
                                        reward_key=reward_key))
        typer.echo(f"{shown(done.path)}: {done.rows} rows from {done.files} file(s); columns {', '.join(done.columns)}")
        score = done.sources.get("score", "score")
        typer.echo(one_line(f"  uid from {done.sources['uid']}; " + (f"score from {score}; " if score != "score" else "")
                            + done.absent))
        return
    if reward_key is not None:
        _fail("--reward-key is for --from slime")
    if len(saved) != 1:
        _fail(f"a saved batch is one file, got {len(saved)}; several files are a log: give --from FORMAT")
    saved = saved[0]
    target = out or saved.with_suffix(".parquet")
    if out is None and target.resolve() == saved.resolve():
        _fail(f"the default output {target} is the input itself; give -o OUT.parquet")
    _run(lambda: check_output_path(str(target), [saved]))
    batch = _run(lambda: load_saved(saved, trust_pickle=trust_pickle))
    if step is None:  # verl's trainer keeps the step in the batch's meta_info
        meta = getattr(batch, "meta_info", None) or {}
        step = meta.get("global_steps") if isinstance(meta.get("global_steps"), int) else None
    done = _run(lambda: dump_batch(batch, target, step=step, source=str(saved)))
    typer.echo(f"{shown(done.path)}: {done.rows} rows, {done.tokens} tokens; columns {', '.join(done.columns)}"
               + (f" (step {step})" if step is not None else ""))
    for name, why in done.skipped.items():
        typer.echo(one_line(f"  left out {name}: {why}"))


@app.command(cls=HelpCommand, context_settings=HELP_OPTIONS)
def estimators(
    name: Annotated[Optional[str], typer.Argument(metavar="NAME", help="One estimator: everything about it.")] = None,
    convention: Annotated[str, typer.Option(metavar="NAME", help="The estimators of this trainer convention "
                                            "(docs/conventions.md).")] = "verl",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the estimators. Their family and the columns each needs beyond response_mask and the score; with
    NAME, everything about one.

    Examples:
      rladv estimators
      rladv estimators gae
      rladv estimators --convention trl
      rladv estimators --json
    """
    conv = _run(lambda: get_convention(convention))
    chosen = list(conv.estimators.values()) if name is None else [_run(lambda: conv.estimator(name))]
    rows = [{**e.describe(), "needs": ["response_mask", "rm_scores|score", *conv.reads(e, ())]} for e in chosen]
    if as_json:
        typer.echo(json.dumps(rows if name is None else rows[0], indent=2))
        return
    if name is not None:
        r = rows[0]
        detail = [("family", r["family"]), ("summary", r["summary"]), ("baseline", r["baseline"]),
                  ("singleton group", r["singleton"] or "-"), ("tool observations", r["observation_credit"]),
                  ("needs", ", ".join(r["needs"])), ("settings it reads", ", ".join(r["settings"]) or "-"),
                  ("whitened", "yes" if r["whitened"] else "no")]
        if conv.name != "verl":
            detail.insert(0, ("convention", f"{conv.name}: {conv.trainer} {conv.version}, {conv.source}"))
        for label, text in detail:
            typer.echo(textwrap.fill(text, 80, initial_indent=f"{label + ':':19}", subsequent_indent=" " * 19))
        return
    width = max(len(e.name) for e in chosen)
    family = max(len(e.family) for e in chosen)
    typer.echo(f"{'estimator':{width}}  {'family':{family}}  needs")
    for e, r in zip(chosen, rows):
        typer.echo(f"{e.name:{width}}  {e.family:{family}}  {', '.join(r['needs'][2:]) or '-'}")
    typer.echo("\nneeds: beyond response_mask and a score. rladv estimators NAME describes one.")
