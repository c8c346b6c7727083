"""The library entry points the CLI calls: ``compute`` (an Arrow table or a polars frame), ``compute_file`` (Parquet
paths, or a frame, to a Parquet file), ``validate``."""
from __future__ import annotations

import gc
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .config.settings import Config, batch_column
from .estimators.registry import ESTIMATORS, REFERENCE_DEFAULT
from .contract import validation
from .errors import InputError, OutputError
from .io import frames
from .io.read import SWITCH_INTERVAL_S, Dataset
from .io.write import (AtomicParquetWriter, SideFiles, check_output_path, check_side_outputs, computed_columns,
                       default_output, output_schema, signals_deferred)

if TYPE_CHECKING:
    import pandas as pd
    import polars as pl

    from .report.model import Report

PathLike = str | os.PathLike


def _torch_to_import(device: str) -> bool:
    """Whether a run on ``device`` (``Config.device``) imports torch, which this process has not: to use CUDA,
    or with ``auto`` to ask for it where a CUDA build of torch and an NVIDIA device are there
    (``tensors.batch.resolve_device``). A run on the CPU never does (docs/arrays.md)."""
    from .tensors.batch import may_have_cuda

    return "torch" not in sys.modules and (device == "cuda" or (device == "auto" and may_have_cuda()))


@contextmanager
def _pipeline_imported(device: str = "auto"):
    """``pipeline`` imported for a run on ``device``, and torch where the run imports it (``_torch_to_import``):
    then with the cyclic garbage collector paused, and until the block ends every object that exists then
    frozen out of its collections (``gc.freeze``; ``gc.unfreeze`` on exit). Importing torch creates ~120k
    objects: the collector would traverse them a dozen times (about 0.2 s, on the critical path of a run) and
    find nothing to free. A caller that froze objects itself keeps its freeze: ``gc.unfreeze`` cannot tell its
    objects from ours, so nothing is frozen or unfrozen then. A Ctrl-C (or SIGTERM, SIGHUP) during the import
    acts once it is done (``signals_deferred``): raised inside torch's initialisation it can be swallowed there,
    or abort the process from C++."""
    if not _torch_to_import(device):
        from .pipeline import driver as pipeline

        yield pipeline
        return
    enabled, ours = gc.isenabled(), gc.get_freeze_count() == 0
    gc.disable()
    try:
        with signals_deferred():
            import torch  # noqa: F401  (the run's arrays on CUDA; ``resolve_device`` asks it)

            from .pipeline import driver as pipeline

        if ours:
            gc.freeze()
    finally:
        if enabled:
            gc.enable()
    try:
        yield pipeline
    finally:
        if ours:
            gc.unfreeze()


def _config(config: Optional[Config], settings: dict) -> Config:
    """``settings`` (``Config`` fields) over ``config``, validated as one ``Config`` (a bad value or combination
    is a ``ConfigError`` whichever of the two gave it)."""
    if config is None:
        return Config(**settings)
    return Config(**{**config.model_dump(), **settings}) if settings else config


def compute(table: "pa.Table | pl.DataFrame | pl.LazyFrame | pd.DataFrame", config: Optional[Config] = None, *,
            progress: Optional[Callable] = None, pad_widths: Optional[Mapping[object, int]] = None,
            **settings) -> "tuple[pa.Table | pl.DataFrame | pd.DataFrame, Report]":
    """Advantages for an Arrow table or a polars or pandas frame: ``(its rows with rladv's columns added, report)``.

    A pyarrow ``Table`` gives a ``Table``; a polars ``DataFrame`` or ``LazyFrame`` gives a polars ``DataFrame``
    over the output's Arrow buffers; a pandas ``DataFrame`` (read through Arrow, its index dropped) gives a pandas
    ``DataFrame``. A ``LazyFrame`` is streamed: its query runs once per pass, ``chunk_rows`` rows
    at a time, as a file is read (docs/python-api.md, "Frames").

    ``settings`` are ``Config`` fields (``estimator="grpo", kl_coef=0.01, ...``) and override ``config``.
    ``pad_widths`` (batch key value, or None without ``batch_key`` -> length) are the longest responses of the
    batches of a larger dataset these rows were taken from: row totals are summed as verl sums them padded to
    their batch's longest response, so with it the rows' numbers are the larger run's, not only close to them.
    """
    from .pipeline.driver import run_in_memory

    cfg = _config(config, settings)
    source = frames.open_rows(table, cfg.columns, cfg.where)
    out, report = run_in_memory(source, cfg, progress, pad_widths)
    out = out.rename_columns(source.names.written(out.column_names))
    if frames.is_polars(table):
        return frames.to_polars(out), report
    return (out.to_pandas() if frames.is_pandas(table) else out), report


def compute_file(inputs: Sequence[PathLike] | PathLike, config: Optional[Config] = None, *,
                 output: Optional[PathLike] = None, report_path: Optional[PathLike] = None,
                 progress: Optional[Callable] = None, config_source: Optional[dict] = None,
                 html_path: Optional[PathLike] = None, groups_path: Optional[PathLike] = None,
                 rows_path: Optional[PathLike] = None, **settings) -> Report:
    """Read a dataset (file, files or folder, or a frame as ``compute`` takes: then ``output`` is required),
    write ``output`` (default ``DATASET.adv.parquet``) atomically,
    and optionally the JSON report and the self-contained HTML report. Nothing is left behind when it fails:
    the report and the page are written to temporary files beside their targets and renamed right after the
    output, all three renames shielded from SIGINT/SIGTERM/SIGHUP (``signals_deferred``), so the three files
    appear together or not at all; so do ``groups_path`` / ``rows_path``, the tables behind the verdict as
    Parquet (``report.tables``). ``config_source`` (what a verl YAML contributed) is recorded in the report's
    ``config``."""
    started = time.perf_counter()
    cfg = _config(config, settings)
    if frames.is_frame(inputs) and output is None:
        raise OutputError("a frame has no file name to derive the output's from; give output=PATH")
    dataset = frames.open_rows(inputs, cfg.columns, cfg.where)
    out = str(output) if output is not None else default_output(
        [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs))
    check_output_path(out, dataset.paths)
    check_side_outputs(out, dataset.paths, {"report_path": report_path, "html_path": html_path,
                                            "groups_path": groups_path, "rows_path": rows_path})
    switch = sys.getswitchinterval()
    # The reading and writing threads are in C most of the time, but each needs the GIL back between calls:
    # at Python's default 5 ms they queue behind the stages (and a torch import), at 0.5 ms they do not.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        added = {"with_is_weights": bool(cfg.rollout_is), "with_token_weight": cfg.loss_mode is not None}
        schema = output_schema(dataset.schema, **added)
        carried = [name for name in dataset.columns if name not in computed_columns(**added)]
        written = dataset.names.written(schema.names)  # the files' own names of mapped columns (--column)
        # every input row, in order, from files: the carried columns' chunks may be copied from them
        files = dataset.paths if isinstance(dataset, Dataset) else ()
        with AtomicParquetWriter(out, schema, carried, written, files) as sink, SideFiles() as side:
            # as the passes are imported and start: the input is decoded and checked, and its carried columns
            # encoded (as it is decoded where torch imports meanwhile, whose import leaves CPU idle)
            check = partial(validation.check_chunk, unscorable=cfg.conv.unscorable)
            once = dataset.read_once(cfg.chunk_rows, cfg.cache_mib << 20, check, sink, _torch_to_import(cfg.device)
                                     ) if isinstance(dataset, Dataset) else None  # a frame, or the rows --where kept
            try:
                with _pipeline_imported(cfg.device) as stages:
                    from .pipeline.summary import finish_report

                    pipeline = stages.Pipeline(dataset, cfg, progress)
                    report = finish_report(pipeline.run(sink.write), out, config_source, report_path, html_path,
                                           side, (groups_path, rows_path), started)
                    sink.finish()
                    with signals_deferred():
                        sink.commit()
                        side.commit()
            finally:
                if once is not None:
                    once.close()
    finally:
        sys.setswitchinterval(switch)
    return report


@dataclass(frozen=True)
class Problem:
    """One kind of row-level problem: where (column), what, how many rows, the first rows (``file:row``) and
    one full message."""

    column: Optional[str]
    kind: str
    count: int
    rows: list[str]
    example: str


@dataclass(frozen=True)
class ValidationSummary:
    """What ``validate`` checked: files, rows, tokens, and every row-level problem found (empty when valid)."""

    paths: list[str]
    rows: int
    tokens: int
    columns: list[str]
    problems: list[Problem]
    skipped: list[str] = field(default_factory=list)  # rladv outputs found beside the data, left out

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(inputs: Sequence[PathLike] | PathLike, estimator: Optional[str] = None, *, kl: bool = False,
             rollout_correction: bool = False, batch_key: Optional[str] = None,
             chunk_rows: int = 8192, columns: Optional[Mapping[str, str]] = None) -> ValidationSummary:
    """Check a dataset against the contract (and the columns ``estimator`` needs) without torch.

    Dataset-level problems (unreadable file, missing column, wrong type) raise ``InputError`` at once; every
    row-level problem is collected, grouped by kind with counts and first rows (``compute`` stops at the
    first one instead). ``columns``: the files' names of contract columns, as ``Config.columns``."""
    config = Config(estimator=estimator or REFERENCE_DEFAULT, columns=columns)  # a bad name or mapping: ConfigError
    dataset = Dataset(inputs, columns=columns)
    reads = {} if estimator is None else ESTIMATORS[config.estimator].reads
    required = validation.required_columns(dataset.columns, reads, kl=kl, rollout_correction=rollout_correction,
                                           batch_key=batch_column(batch_key))  # "none": no key column
    validation.check_schema(dataset.paths[0], dataset.schema, required)
    if dataset.num_rows == 0:
        raise InputError(dataset.paths[0], "holds no rows")
    tokens = 0
    found: dict[tuple, list] = {}
    for chunk in dataset.chunks(None, chunk_rows):
        for row, err in validation.invalid_rows(chunk.table, chunk.path, chunk.start):
            found.setdefault((err.column, err.kind), []).append((f"{chunk.path}:{chunk.start + row}", str(err)))
        tokens += pc.sum(pc.list_value_length(chunk.table["response_mask"])).as_py() or 0
    problems = [Problem(column=column, kind=kind, count=len(hits), rows=[h[0] for h in hits[:5]], example=hits[0][1])
                for (column, kind), hits in found.items()]
    return ValidationSummary(dataset.paths, dataset.num_rows, int(tokens), dataset.columns, problems,
                             list(dataset.skipped))
