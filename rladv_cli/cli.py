"""The ``rladv`` command: a thin typer layer over ``rladv_cli.api``; the one place errors become exit codes."""
from __future__ import annotations

import atexit
import json
import math
import os
import signal
import sys
from enum import Enum
from inspect import Parameter
from inspect import signature as pysignature
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
import typer.core

from .errors import TERMINATION_SIGNALS, Interrupted, RladvError, one_line, shown
from .estimators.registry import DEFAULT_GROUP_ESTIMATOR, ESTIMATORS


class _OneLineErrors(typer.core.TyperGroup):
    """Usage errors (unknown option, bad choice, missing argument) as one ``Error: ...`` line, exit code 2."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
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
            message = " ".join(err.format_message().replace("Value error, ", "").split())
            if message:  # empty when the help text was the answer (no arguments given)
                typer.echo(f"Error: {one_line(message)}", err=True)
            sys.exit(err.exit_code)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    cls=_OneLineErrors,
    help="rladv: recompute verl's per-token advantages offline from rollout Parquet files.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

EstimatorName = Enum("EstimatorName", {name: name for name in ESTIMATORS}, type=str)


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class MaskMode(str, Enum):
    reset = "reset"
    carry = "carry"


class KLCtrl(str, Enum):
    fixed = "fixed"
    adaptive = "adaptive"


class Engine(str, Enum):
    local = "local"
    ray = "ray"


class ISLevel(str, Enum):
    token = "token"
    sequence = "sequence"


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


def _path(value: str) -> Path:
    """A path option's or argument's value; an empty one is refused (``Path("")`` is the current folder)."""
    if isinstance(value, Path):
        return value
    if not value:
        raise typer.BadParameter("an empty path names no file")
    return Path(value)


Datasets = Annotated[list[Path], typer.Argument(parser=_path, help="Parquet file(s), folder(s) of *.parquet or quoted glob(s), read as one dataset.")]


# The pipeline's settings (``Config`` fields), as compute, explain and inspect take them, in --help's panels.
_ESTIMATOR_PANEL = "Estimator settings"
_SHAPING_PANEL = "Reward shaping (before the estimator)"
_CORRECTION_PANEL = "Rollout correction (rejection and importance weights)"
_RUN_PANEL = "Execution"
Estimator = Annotated[Optional[EstimatorName], typer.Option(metavar="NAME", help=f"Advantage estimator, by verl's name: {', '.join(ESTIMATORS)} (rladv estimators describes them; or from --config).")]
VerlConfig = Annotated[Optional[Path], typer.Option("--config", parser=_path, help="A verl trainer YAML (or its algorithm: section); flags given here win.")]
Gamma = Annotated[float, typer.Option(help="Discount factor.", rich_help_panel=_ESTIMATOR_PANEL)]
Lam = Annotated[float, typer.Option(help="GAE lambda.", rich_help_panel=_ESTIMATOR_PANEL)]
NormAdvByStd = Annotated[bool, typer.Option("--norm-adv-by-std/--no-norm-adv-by-std", help="grpo: divide by the group std.", rich_help_panel=_ESTIMATOR_PANEL)]
Epsilon = Annotated[float, typer.Option(help="grpo: added to the group std.", rich_help_panel=_ESTIMATOR_PANEL)]
RppMaskMode = Annotated[MaskMode, typer.Option(help="reinforce_plus_plus at mask-0 positions: reset (chapter) or carry (verl 0.9.1).", rich_help_panel=_ESTIMATOR_PANEL)]
KLCoef = Annotated[float, typer.Option(help="KL-in-reward coefficient; 0 turns KL shaping off.", rich_help_panel=_SHAPING_PANEL)]
KLPenalty = Annotated[str, typer.Option(help="KL estimate: kl|k1, abs, mse|k2, low_var_kl|k3, or <mode>+.", rich_help_panel=_SHAPING_PANEL)]
KLCtrlOption = Annotated[KLCtrl, typer.Option(help="KL coefficient controller.", rich_help_panel=_SHAPING_PANEL)]
KLTarget = Annotated[float, typer.Option(help="Adaptive controller: target KL.", rich_help_panel=_SHAPING_PANEL)]
KLHorizon = Annotated[int, typer.Option(help="Adaptive controller: horizon.", rich_help_panel=_SHAPING_PANEL)]
RolloutRS = Annotated[Optional[str], typer.Option(help="Rollout rejection options, verl's string (e.g. token_k1,seq_max_k2).", rich_help_panel=_CORRECTION_PANEL)]
RolloutRSThreshold = Annotated[Optional[str], typer.Option(help="Rejection thresholds, verl's string (e.g. 0.5_2.0,2.5).", rich_help_panel=_CORRECTION_PANEL)]
RolloutIS = Annotated[Optional[ISLevel], typer.Option(help="Importance weights per token or per sequence.", rich_help_panel=_CORRECTION_PANEL)]
RolloutISThreshold = Annotated[str, typer.Option(help="IS truncation (a number) or IcePop band lo_hi.", rich_help_panel=_CORRECTION_PANEL)]
RolloutISBatchNormalize = Annotated[bool, typer.Option(help="Divide IS weights by their batch mean.", rich_help_panel=_CORRECTION_PANEL)]
OverlongBufferLen = Annotated[Optional[int], typer.Option(help="DAPO overlong shaping: buffer length (turns it on).", rich_help_panel=_SHAPING_PANEL)]
OverlongPenaltyFactor = Annotated[float, typer.Option(help="DAPO overlong shaping: penalty at --max-resp-len.", rich_help_panel=_SHAPING_PANEL)]
MaxRespLen = Annotated[Optional[int], typer.Option(help="DAPO overlong shaping: maximum response length.", rich_help_panel=_SHAPING_PANEL)]
ToolRewardCoef = Annotated[Optional[float], typer.Option(help="Add this times the sum of a row's tool_rewards to its score (verl never adds them).", rich_help_panel=_SHAPING_PANEL)]
RewardComponents = Annotated[Optional[str], typer.Option(help="gdpo: comma-separated float columns of reward components.", rich_help_panel=_ESTIMATOR_PANEL)]
RewardWeights = Annotated[Optional[str], typer.Option(help="gdpo: comma-separated weights, one per component.", rich_help_panel=_ESTIMATOR_PANEL)]
BatchKey = Annotated[Optional[str], typer.Option(help="Column whose values split the dataset into independent batches.", rich_help_panel=_ESTIMATOR_PANEL)]
PadWidth = Annotated[Optional[int], typer.Option(help="Sum row totals as verl does in a batch padded to at least N positions (inspect --export writes it for a group taken out of a larger batch).", rich_help_panel=_ESTIMATOR_PANEL)]

SETTINGS_OPTIONS = (  # (Config field, option, default) after --config, in this order, on every command that computes
    ("gamma", Gamma, 1.0), ("lam", Lam, 1.0), ("norm_adv_by_std", NormAdvByStd, True), ("epsilon", Epsilon, 1e-6),
    ("rpp_mask_mode", RppMaskMode, MaskMode.reset), ("kl_coef", KLCoef, 0.0), ("kl_penalty", KLPenalty, "kl"),
    ("kl_ctrl", KLCtrlOption, KLCtrl.fixed), ("kl_target", KLTarget, 0.1), ("kl_horizon", KLHorizon, 10000),
    ("rollout_rs", RolloutRS, None), ("rollout_rs_threshold", RolloutRSThreshold, None),
    ("rollout_is", RolloutIS, None), ("rollout_is_threshold", RolloutISThreshold, "2.0"),
    ("rollout_is_batch_normalize", RolloutISBatchNormalize, False), ("overlong_buffer_len", OverlongBufferLen, None),
    ("overlong_penalty_factor", OverlongPenaltyFactor, 1.0), ("max_resp_len", MaxRespLen, None),
    ("tool_reward_coef", ToolRewardCoef, None), ("reward_components", RewardComponents, None),
    ("reward_weights", RewardWeights, None), ("batch_key", BatchKey, None), ("pad_width", PadWidth, None),
)


def takes_settings(command: Callable) -> Callable:
    """Give a typer command every option of ``SETTINGS_OPTIONS`` right after its ``config`` parameter (typer
    reads the signature); the command receives them in ``**settings`` and reads them from ``ctx.params``."""
    signature = pysignature(command, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not Parameter.VAR_KEYWORD]
    at = [p.name for p in params].index("config") + 1
    added = [Parameter(name, Parameter.POSITIONAL_OR_KEYWORD, annotation=option, default=default)
             for name, option, default in SETTINGS_OPTIONS]
    command.__signature__ = signature.replace(parameters=params[:at] + added + params[at:])
    return command


@app.command()
@takes_settings
def compute(
    ctx: typer.Context,
    dataset: Datasets,
    estimator: Estimator = None,
    output: Annotated[Optional[Path], typer.Option("-o", "--output", parser=_path, help="Output Parquet (default DATASET.adv.parquet); with --engine ray, the output folder (default DATASET.adv).")] = None,
    report: Annotated[Optional[Path], typer.Option(parser=_path, help="Also write the report as JSON here.")] = None,
    html: Annotated[Optional[Path], typer.Option(parser=_path, help="Also write a self-contained HTML report (plots inline) here.")] = None,
    config: VerlConfig = None,
    chunk_rows: Annotated[int, typer.Option(help="Rows held in memory at once (results do not depend on it).", rich_help_panel=_RUN_PANEL)] = 512,
    cache_mib: Annotated[int, typer.Option(help="Keep the decoded dataset in memory between passes when it fits this many MiB (0: re-read each pass).", rich_help_panel=_RUN_PANEL)] = 512,
    device: Annotated[Device, typer.Option(help="Torch device; auto = cuda when available.", rich_help_panel=_RUN_PANEL)] = Device.auto,
    threads: Annotated[int, typer.Option(help="Torch CPU threads (default 1: the kernels are memory-bound).", rich_help_panel=_RUN_PANEL)] = 1,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar and no summary.", rich_help_panel=_RUN_PANEL)] = False,
    strict_replay: Annotated[bool, typer.Option("--strict-replay", help="Exit 1 unless the input's own token_level_rewards/advantages/returns (a trainer dump) agree with this run's (the output is written either way).")] = False,
    engine: Annotated[Engine, typer.Option(help="local: this process, one output file; ray: a Ray cluster, one output file per input file.", rich_help_panel=_RUN_PANEL)] = Engine.local,
    ray_address: Annotated[Optional[str], typer.Option(envvar="RAY_ADDRESS", help="--engine ray: the cluster to join (default: a local one for the run).", rich_help_panel=_RUN_PANEL)] = None,
    ray_workers: Annotated[Optional[int], typer.Option(help="--engine ray: CPUs of the local cluster, and at most this many tasks at once (default: all CPUs).", rich_help_panel=_RUN_PANEL)] = None,
    **settings,
) -> None:
    """Compute advantages and returns and write them beside every input column."""
    from rich.console import Console

    from .api import compute_file
    from .report.model import render

    cfg, source = _resolve_config(ctx, config, engine)
    err = Console(stderr=True)
    paths = [str(p) for p in dataset]
    with _progress(err, enabled=not quiet and err.is_terminal) as progress:
        if engine is Engine.ray:
            from .pipeline.ray_engine import compute_ray

            result = _run(lambda: compute_ray(paths, cfg, output_dir=output, address=ray_address, workers=ray_workers,
                                              progress=progress, report_path=report, html_path=html,
                                              config_source=source))
        else:
            result = _run(lambda: compute_file(paths, cfg, output=output, report_path=report, progress=progress,
                                               config_source=source, html_path=html))
    for note in cfg.notes:  # after the run: an error stays the only line a failed run prints
        err.print(f"Note: {one_line(note)}", markup=False, highlight=False, soft_wrap=True)
    if not quiet:
        if source and (source["ignored"] or source["notes"]):
            for note in source["notes"]:
                err.print(f"[dim]--config: {note}[/dim]")
            if source["ignored"]:
                err.print(f"[dim]--config: keys rladv does not use: {', '.join(source['ignored'])}[/dim]")
        render(result, Console())
    if strict_replay and not (result.replay and result.replay["agree"]):
        replay = result.replay
        why = ("the input holds none of token_level_rewards, rollout_is_weights, advantages, returns to compare"
               if replay is None or not replay["compared"] else f"the input's {replay['first_difference']} differ from "
               f"this run's (the report's replay section says where)")
        typer.echo(f"--strict-replay: {why}", err=True)
        raise typer.Exit(code=1)


def _resolve_config(ctx: typer.Context, path: Optional[Path], engine: Optional["Engine"] = None):
    """The run's ``Config`` from the command's flags over ``--config`` (a verl YAML), and what the file gave."""
    from .config.settings import Config

    settings, source = _merge_verl_config(ctx, path)
    if settings.get("estimator") is None:
        given = f"{shown(path)} sets no algorithm.adv_estimator and " if path is not None else ""
        _fail(f"--estimator is required: {given}no --estimator was given (rladv estimators lists them)")
    cfg = _run(lambda: Config(**settings))
    _refuse_inert(ctx, cfg, engine)
    return cfg, source


def _merge_verl_config(ctx: typer.Context, path: Optional[Path]) -> tuple[dict, Optional[dict]]:
    """The command's settings over ``--config`` (``config.resolve.merge_verl_config``): flags typed on the
    command line win over the file, flags left at their defaults do not."""
    from .config.resolve import merge_verl_config, settings_from_flags

    return _run(lambda: merge_verl_config(settings_from_flags(ctx.params), set(_typed_values(ctx)), path))


def _refuse_inert(ctx: typer.Context, cfg, engine: Optional["Engine"]) -> None:
    """Stop (exit code 2) at the first option typed on the command line that has no effect
    (``config.resolve.refused_inert``)."""
    from .config.resolve import refused_inert

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


def _only_typed(ctx: typer.Context, allowed: tuple[str, ...], why: str) -> None:
    """Stop with ``--flag: why`` when a setting of ``SETTINGS_OPTIONS`` (or --config) other than ``allowed``
    was typed on the command line."""
    for name in ("config", *(n for n, _, _ in SETTINGS_OPTIONS)):
        if name not in allowed and _typed(ctx, name):
            _fail(f"--{name.replace('_', '-')}: {why}")


def _row_rate_column():
    """A progress column: the pass's rows per second (blank until rich has measured it)."""
    from rich.progress import ProgressColumn
    from rich.text import Text

    class RowRate(ProgressColumn):
        def render(self, task) -> Text:
            return Text(f"{task.speed:,.0f} rows/s" if task.speed else "", style="progress.data.speed")

    return RowRate()


class _progress:
    """A rich progress bar per pass (rows, rate, ETA) on a terminal; a no-op callback otherwise."""

    def __init__(self, console, enabled: bool):
        self.console, self.enabled, self.bar, self.tasks = console, enabled, None, {}

    def __enter__(self):
        if not self.enabled:
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("rows"), _row_rate_column(), TimeRemainingColumn(), console=self.console, transient=True)
        self.bar.start()
        return self.update

    def update(self, stage: str, done: int, total: int) -> None:
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"{stage} pass", total=total)
        self.bar.update(self.tasks[stage], completed=done)

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command()
def validate(
    dataset: Datasets,
    estimator: Annotated[Optional[EstimatorName], typer.Option(metavar="NAME", help="Also check the columns this estimator needs (rladv estimators lists them).")] = None,
    kl: Annotated[bool, typer.Option("--kl", help="Also check the columns KL shaping needs.")] = False,
) -> None:
    """Check a dataset against the data contract without computing anything (no torch)."""
    from .api import validate as run_validate

    summary = _run(lambda: run_validate([str(p) for p in dataset], estimator.value if estimator else None, kl=kl))
    if summary.ok:
        typer.echo(f"ok: {summary.rows} rows, {summary.tokens} tokens in {len(summary.paths)} file(s)")
        return
    bad = sum(p.count for p in summary.problems)
    typer.echo(f"Error: {bad} of {summary.rows} rows break the data contract ({len(summary.problems)} kind(s)):", err=True)
    for p in summary.problems:
        more = f"; first rows {', '.join(p.rows)}" if p.count > 1 else ""
        column = f" in {p.column}" if p.column else ""
        typer.echo(one_line(f"  {p.count} row(s) with {p.kind}{column}, e.g. {p.example}{more}"), err=True)
    raise typer.Exit(code=2)


@app.command()
@takes_settings
def inspect(
    ctx: typer.Context,
    dataset: Datasets,
    estimator: Annotated[Optional[EstimatorName], typer.Option(metavar="NAME", help="Judge the checks for this estimator; with --row/--uid, compute its advantages (rladv estimators lists them).")] = None,
    row: Annotated[Optional[int], typer.Option(help="Show one trajectory token by token: N is 0-based across all the files given, in the order they are read (with one file, its row).")] = None,
    uid: Annotated[Optional[str], typer.Option(help="Show one group: totals, baseline, each member's advantage and why.")] = None,
    expected_n: Annotated[Optional[int], typer.Option(help="Expected rows per group (verl's rollout.n).")] = None,
    export: Annotated[Optional[Path], typer.Option(parser=_path, help="With --uid: write a minimal reproducer (group.parquet + command.txt) into this folder.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (CONTRACT §5 for the checklist).")] = False,
    strict: Annotated[bool, typer.Option(help="Exit 1 when any check fails.")] = False,
    chunk_rows: Annotated[int, typer.Option(help="Rows held in memory at once.")] = 8192,
    html: Annotated[Optional[Path], typer.Option(parser=_path, help="Also write the checklist and findings as a self-contained HTML page here.")] = None,
    config: VerlConfig = None,
    **settings,
) -> None:
    """Debug a dataset: layout, groups, scores, masks and a pass/warn/fail checklist (no torch unless --row/--uid).

    --row, --uid and --export compute with every setting of compute; the checklist takes --kl-coef/--kl-penalty."""
    from rich.console import Console

    from .diagnose import checklist
    from .diagnose.findings import render_inspection

    paths = [str(p) for p in dataset]
    if chunk_rows < 1:
        _fail(f"--chunk-rows must be at least 1, got {chunk_rows}")
    if row is not None and uid is not None:
        _fail("--row shows one trajectory and --uid one group; give one of them")
    if export is not None and uid is None:
        _fail("--export needs --uid")
    merged, _ = _merge_verl_config(ctx, config)
    name = merged.pop("estimator", None)
    console = Console()
    if row is None and uid is None:
        _only_typed(ctx, ("config", "kl_coef", "kl_penalty"), "the checklist takes only --kl-coef and --kl-penalty "
                    "of compute's settings; the others apply with --row or --uid")
        kl_coef, kl_penalty = merged.get("kl_coef", 0.0), merged.get("kl_penalty", "kl")
        if not math.isfinite(kl_coef):
            _fail(f"--kl-coef must be a finite number, got {kl_coef}")
        result = _run(lambda: checklist.inspect(paths, expected_n=expected_n, kl_coef=kl_coef, kl_penalty=kl_penalty,
                                                 estimator=name, chunk_rows=chunk_rows, html_path=html))
        typer.echo(result.to_json(), nl=False) if as_json else render_inspection(result, console)
        if strict and result.status == "fail":
            raise typer.Exit(code=1)
        return
    if html is not None:
        _fail("--html writes the dataset's checklist; it does not combine with --row or --uid")
    from .diagnose import views

    if name is None and row is not None:
        _only_typed(ctx, (), "without --estimator, --row shows the file's own columns; compute's settings need --estimator")
        options = {}
    else:
        from .config.settings import RUN_ONLY, Config

        name = name or DEFAULT_GROUP_ESTIMATOR
        cfg = _run(lambda: Config(estimator=name, **merged))
        _refuse_inert(ctx, cfg, None)
        options = cfg.model_dump(exclude={"estimator", *RUN_ONLY})
    if export is not None:
        from .diagnose.export import export_group

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


@app.command()
@takes_settings
def explain(
    ctx: typer.Context,
    dataset: Datasets,
    row: Annotated[int, typer.Option(help="Row to explain (0-based across the files given; with one file, its row).")],
    estimator: Estimator = None,
    config: VerlConfig = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    **settings,
) -> None:
    """Show how one row's advantages are derived, with compute's settings: the recursion per token, or its group's baseline and scale."""
    from rich.console import Console

    from .config.settings import RUN_ONLY
    from .diagnose.explain import explain as run_explain
    from .diagnose.explain import render_explanation

    cfg, _ = _resolve_config(ctx, config)
    settings = cfg.model_dump(exclude={"estimator", *RUN_ONLY})
    result = _run(lambda: run_explain([str(p) for p in dataset], row, cfg.estimator, **settings))
    typer.echo(result.model_dump_json(indent=2)) if as_json else render_explanation(result, Console())


@app.command()
def offpolicy(
    dataset: Datasets,
    rollout_rs: Annotated[list[str], typer.Option(help="Rejection option(s) to sweep, verl's names (repeat the flag; token_k1,seq_max_k2 combines).")],
    thresholds: Annotated[Optional[str], typer.Option(help="Thresholds to try for every option, comma-separated (e.g. 0.5_2.0,0.8_1.25,3.0).")] = None,
    threshold: Annotated[Optional[list[str]], typer.Option(help="One threshold in verl's full form (repeatable; may hold commas for combined options).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    chunk_rows: Annotated[int, typer.Option(help="Rows held in memory at once.")] = 1024,
) -> None:
    """What-if sweep of rollout rejection: tokens, rows and groups each threshold would remove."""
    from rich.console import Console

    from .diagnose.offpolicy import render, sweep

    specs = [t.strip() for t in (thresholds or "").split(",") if t.strip()] + list(threshold or [])
    if not specs:
        _fail("give --thresholds T1,T2,... or --threshold SPEC")
    if chunk_rows < 1:
        _fail(f"--chunk-rows must be at least 1, got {chunk_rows}")
    err = Console(stderr=True)
    with _progress(err, enabled=not as_json and err.is_terminal) as progress:
        result = _run(lambda: sweep([str(p) for p in dataset], rollout_rs, specs, chunk_rows=chunk_rows, progress=progress))
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        render(result, Console())


@app.command()
def convert(
    saved: Annotated[Path, typer.Argument(parser=_path, help="A batch the trainer saved: verl's DataProto.save_to_disk pickle, or torch.save output (.pt).")],
    out: Annotated[Optional[Path], typer.Option("-o", "--output", parser=_path, help="Parquet file to write (default: SAVED with .parquet).")] = None,
    step: Annotated[Optional[int], typer.Option(help="Add a step column with this value (for --batch-key step over a folder of dumps); default: the batch's meta_info global_steps, when it has one.")] = None,
) -> None:
    """Write a trainer's saved batch as a rollout dataset, ready for rladv compute to replay (loads pickles: trusted files only)."""
    from .io.dump import dump_batch, load_saved
    from .io.write import check_output_path

    target = out or saved.with_suffix(".parquet")
    if out is None and target.resolve() == saved.resolve():
        _fail(f"the default output {target} is the input itself; give -o OUT.parquet")
    _run(lambda: check_output_path(str(target), [saved]))
    batch = _run(lambda: load_saved(saved))
    if step is None:  # verl's trainer keeps the step in the batch's meta_info
        meta = getattr(batch, "meta_info", None) or {}
        step = meta.get("global_steps") if isinstance(meta.get("global_steps"), int) else None
    done = _run(lambda: dump_batch(batch, target, step=step, source=str(saved)))
    typer.echo(f"{shown(done.path)}: {done.rows} rows, {done.tokens} tokens; columns {', '.join(done.columns)}"
               + (f" (step {step})" if step is not None else ""))
    for name, why in done.skipped.items():
        typer.echo(one_line(f"  left out {name}: {why}"))


@app.command()
def estimators(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List the estimators: what each needs, its baseline, and how credit crosses a tool observation."""
    rows = [e.describe() for e in ESTIMATORS.values()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(header_style="bold", show_lines=True)
    table.add_column("estimator", no_wrap=True, min_width=max(len(n) for n in ESTIMATORS))
    for col in ("needs", "settings", "critic", "groups", "baseline", "credit across a tool observation"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], ", ".join(r["needs"]), ", ".join(r["settings"]) or "-", "yes" if r["critic"] else "no",
                      "yes" if r["groups"] else "no", r["baseline"], r["observation_credit"])
    Console().print(table)


def main() -> None:
    """The ``rladv`` executable. Once torch is imported, finalising the interpreter (tearing down every
    module the process is about to drop anyway) takes about 0.45 s; so after the command the exit handlers
    run, the output streams are flushed, and the process leaves with ``os._exit`` and the command's code.
    (``app`` itself, as tests and embedders call it, exits normally.)

    Two settings of the process, unless the environment gives its own (both are read once, when the library
    loads, so they are set before anything imports numpy or pyarrow):
    - ``OPENBLAS_NUM_THREADS=1``: rladv makes no BLAS calls through numpy, whose OpenBLAS otherwise starts a
      thread per core that spins for ~0.1 s of CPU at start-up, while the input is read and torch imported;
    - on Linux, ``ARROW_DEFAULT_MEMORY_POOL=jemalloc`` (pyarrow's Linux wheels ship it): with the default
      mimalloc, freed chunk buffers go back to the system and come back as fresh (zero-filled, often huge)
      pages, ~0.4 s of kernel time per 20M tokens; jemalloc reuses them (and peaks ~150 MB lower)."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if sys.platform.startswith("linux"):
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    _raise_on_termination()
    try:
        app(prog_name="rladv")
        code = 0
    except SystemExit as stop:
        code = stop.code
    except Interrupted as stop:  # SIGTERM / SIGHUP: every cleanup ran on the way out, as for SIGINT
        code = 128 + stop.signum
    if hasattr(signal, "pthread_sigmask"):  # the command is over: a late signal changes nothing (its files are
        signal.pthread_sigmask(signal.SIG_BLOCK, TERMINATION_SIGNALS)  # complete) and must not print from a handler
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (| head), or a closed stream
            pass
    os._exit(code or 0)


def _raise_on_termination() -> None:
    """SIGTERM and SIGHUP raise ``Interrupted`` in the main thread, as SIGINT raises ``KeyboardInterrupt``: the
    run unwinds through its cleanups (temporary output, report and page removed) and the executable exits
    with ``128 + signal``. A further SIGTERM/SIGHUP is ignored meanwhile, so the cleanup is not cut short.
    Signals the caller set to be ignored (``nohup``) stay ignored."""

    def handler(signum, frame):
        for sig in TERMINATION_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(signum)

    for sig in TERMINATION_SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, handler)

