"""``compare_runs``: several runs' configurations over one read of a dataset, compared chunk by chunk.

What the runs share, and what memory it takes:

- **One read.** The dataset is opened once; a dataset whose decoded columns fit ``cache_mib`` is decoded and
  checked once, on a thread, as the runs start (``Dataset.read_once``, as ``rladv compute`` does), and every
  pass of every run, and the comparison, takes its chunks from memory (``_Shared``: no run's last pass drops
  them). A larger dataset is read from its files by each pass, as compute reads it.
- **One run at a time.** Each run is a whole ``rladv compute`` pipeline (every pass, its report), one after the
  other, so only one run's per-row state is alive at once. Its write pass appends each chunk's advantages to a
  spill file instead of encoding an output: float32 per position, NaN where that run's ``response_mask`` is 0,
  4 bytes per token per run in a temporary folder (``TMPDIR``), held by the page cache, not by the process
  (a tmpfs holds them in memory).
- **One comparison pass.** The dataset's chunks again with every run's slice of its spill file: the pairwise
  figures (``metrics``) are accumulated as they go, and with ``-o`` each chunk is written with one
  ``advantages__<slug>`` column per run. Resident meanwhile: one chunk of every run, per pair the accumulators
  per uid group and the scatter's sample.

Outputs appear together or not at all: ``-o`` through an ``AtomicParquetWriter``, the page as a side file, both
renamed after the comparison; the spill files are removed whatever happens.
"""
from __future__ import annotations

import contextlib
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from itertools import combinations
from typing import Callable, Iterator, Mapping, Optional, Sequence

import numpy as np
import pyarrow as pa

from .. import __version__
from ..api import SWITCH_INTERVAL_S, PathLike, _pipeline_imported
from ..config import flags
from ..config.flags import command_flags
from ..config.settings import Config
from ..contract import validation
from ..contract.columns import array_of, arrow_of, flat_values, list_offsets
from ..contract.labels import Labels
from ..errors import ConfigError, OutputError, RladvError
from ..io import frames
from ..io.read import Chunk, Dataset, RowSource, Shard
from ..io.write import (
    AtomicParquetWriter,
    SideFiles,
    check_output_path,
    check_side_outputs,
    marked,
    signals_deferred,
)
from ..report.model import Inputs, Report, example_command
from .metrics import Block, PairTally, RunChunk
from .model import Comparison, GroupDifference, PairSummary, RunSummary
from .runs import RunSpec, distinct

TOP_GROUPS = 10  # groups per pair that differ most
Progress = Callable[[str, int, int], None]


class _Shared(RowSource):
    """``source``'s rows for several runs: the same chunks, but the chunks a ``Dataset`` keeps in memory
    (``read_once``) stay there after a run's last pass, for the next run and the comparison."""

    def __init__(self, source: RowSource):
        self._source = source
        self.paths, self.schema, self.file_rows = source.paths, source.schema, source.file_rows
        self.num_rows, self.shards = source.num_rows, source.shards
        self.names, self.filter = source.names, source.filter

    def chunks(self, columns: Optional[Sequence[str]], chunk_rows: int) -> Iterator[Chunk]:
        for shard in self.shards:
            yield from self.shard_chunks(shard, columns, chunk_rows)

    def shard_chunks(self, shard: Shard, columns: Optional[Sequence[str]], chunk_rows: int,
                     last: bool = False) -> Iterator[Chunk]:
        return self._source.shard_chunks(shard, columns, chunk_rows, last=False)

    def locate(self, row: int) -> tuple[str, int]:
        return self._source.locate(row)

    def row_origins(self) -> tuple[np.ndarray, np.ndarray]:
        return self._source.row_origins()


class _Spill:
    """One run's compared values (``advantages``, or ``token_weight``), appended chunk by chunk to a file: float32
    per position, NaN where the run's ``response_mask`` is 0 (they are finite wherever it is 1: the pipeline
    checks)."""

    def __init__(self, path: str, compared: str):
        self.path, self.tokens, self.compared = path, 0, compared
        self._file = open(path, "wb")

    def write(self, table: pa.Table) -> None:
        """The write pass's output table of one chunk (the contract's column names)."""
        values = flat_values(table, self.compared, np.float32)
        valid = flat_values(table, "response_mask", np.int8) > 0
        np.where(valid, values, np.float32(np.nan)).tofile(self._file)
        self.tokens += values.size

    def close(self) -> None:
        self._file.close()


class _Unspill:
    """A spill file read back in order, chunk by chunk, into one buffer reused from chunk to chunk (fresh
    pages for every chunk would cost the kernel's zeroing of them each time)."""

    def __init__(self, path: str):
        self._file = open(path, "rb")
        self._buffer = np.empty(0, dtype=np.float32)

    def read(self, tokens: int) -> np.ndarray:
        """The next ``tokens`` values (valid until the next call)."""
        if self._buffer.size < tokens:
            self._buffer = np.empty(tokens, dtype=np.float32)
        values = self._buffer[:tokens]
        if self._file.readinto(memoryview(values).cast("B")) != values.nbytes:
            raise RuntimeError("a run's spill file ends before the dataset's tokens do")
        return values

    def close(self) -> None:
        self._file.close()


def _with_execution(cfg: Config, execution: dict) -> Config:
    """``cfg`` with compare's own execution settings (chunk rows, cache, device, threads), validated."""
    return Config(**{**cfg.model_dump(), **execution})


def compared(named: Sequence[tuple[str, Config]]) -> str:
    """What the runs are compared on: ``token_weight`` when every run weighs its tokens (``--loss-agg-mode``),
    ``advantages`` when none does; a mix is a ``ConfigError``."""
    weighed = [name for name, cfg in named if cfg.loss_mode is not None]
    if weighed and len(weighed) < len(named):
        plain = next(name for name, cfg in named if cfg.loss_mode is None)
        mode = flags.named("loss_agg_mode")
        raise ConfigError(f"run {weighed[0]!r} weighs its tokens ({mode}) and run {plain!r} does not; give every run a "
                          f"{mode} to compare token weights, or none to compare advantages")
    return "token_weight" if weighed else "advantages"


def _check_same_rows(named: Sequence[tuple[RunSpec, Config]]) -> None:
    """Every run reads the same rows under the same names: ``--where`` and ``--column`` choose the batch."""
    (first, a), rest = named[0], named[1:]
    for spec, cfg in rest:
        for field in ("where", "columns"):
            if getattr(cfg, field) != getattr(a, field):
                flag = flags.named(field)
                raise ConfigError(f"runs {first.name!r} and {spec.name!r} read different rows ({flag}); a comparison "
                                  f"is over one batch: give every run the same {flag}")


def _check_outputs(source: RowSource, specs: Sequence[RunSpec], output: Optional[str],
                   html_path: Optional[PathLike]) -> None:
    """The outputs can be written and none is an input; no run's column is already one of the input's."""
    if output is not None:
        check_output_path(output, source.paths)
        taken = set(source.names.written(source.columns))
        clash = next((s for s in specs if s.column in taken or s.column in source.columns), None)
        if clash is not None:
            raise OutputError(f"{flags.named('output')}: the input already has a column {clash.column}; give run "
                              f"{clash.name!r} another name")
    check_side_outputs(output, source.paths, {"html_path": html_path})


def _named(progress: Optional[Progress], name: str) -> Optional[Progress]:
    return None if progress is None else (lambda stage, done, total: progress(f"{name}: {stage}", done, total))


def _run_summary(spec: RunSpec, cfg: Config, report: Report, seconds: float) -> RunSummary:
    v = report.verdict
    changed = cfg.changed()
    return RunSummary(
        name=spec.name, column=spec.column, estimator=cfg.estimator,
        options=" ".join(shlex.quote(a) for a in ["--estimator", cfg.estimator, *command_flags(changed)]),
        settings=changed, level=v.level, headline=v.headline, signal_share=v.signal_share, signal_rows=v.signal_rows,
        rows=v.rows, causes=v.causes, dead_signal=report.dead_signal, advantages=report.advantages,
        warnings=report.warning_codes(), seconds=round(seconds, 6))


def _group_key(configs: Sequence[Config], columns: Sequence[str]) -> tuple[bool, Optional[str]]:
    """Whether rows form uid groups, and the ``--batch-key`` they form within (the runs' one, when they agree)."""
    keys = {cfg.batch_column for cfg in configs}
    return "uid" in columns, (keys.pop() if len(keys) == 1 else None)


def _with_runs(chunk: pa.Table, schema: pa.Schema, offsets: np.ndarray, values: Sequence[np.ndarray]) -> pa.Table:
    """The chunk's rows with one list column per run (``schema``'s last ones), 0 where a run's mask is 0."""
    off = arrow_of(offsets.astype(np.int32), pa.int32())
    added = [pa.ListArray.from_arrays(off, arrow_of(np.where(np.isnan(v), np.float32(0), v), pa.float32()))
             for v in values]
    carried = [array_of(chunk[name]) for name in schema.names[:len(schema) - len(values)]]
    return pa.Table.from_arrays(carried + added, schema=schema)


class _Comparing:
    """The comparison pass: the dataset's chunks with every run's spilled advantages, each pair's tally."""

    def __init__(self, source: RowSource, spills: Sequence[str], row_means: Sequence[np.ndarray], has_uid: bool,
                 batch_key: Optional[str]):
        self.source, self.spills, self.row_means = source, spills, row_means
        self.has_uid, self.labels = has_uid, Labels(batch_key if has_uid else None)
        self.batch_key = batch_key
        self.tallies = {pair: PairTally() for pair in combinations(range(len(spills)), 2)}
        self.tokens = 0
        self.group_keys: dict[int, tuple[int, object]] = {}  # dense group id -> (batch id, uid), after ``run``

    def columns(self, everything: bool) -> Optional[list[str]]:
        """What the pass reads: every column to write them, else the mask and the labels of the groups."""
        if everything:
            return None
        return ["response_mask", *(["uid"] if self.has_uid else []),
                *([self.batch_key] if self.has_uid and self.batch_key else [])]

    def run(self, chunk_rows: int, sink: Optional[AtomicParquetWriter], progress: Optional[Progress]) -> None:
        with contextlib.ExitStack() as stack:
            readers = [stack.enter_context(contextlib.closing(_Unspill(p))) for p in self.spills]
            for chunk in self.source.chunks(self.columns(sink is not None), chunk_rows):
                table = chunk.table
                offsets = list_offsets(array_of(table["response_mask"]))
                n = int(offsets[-1])
                group = None
                if self.has_uid:
                    batch = self.labels.batch_ids(table, chunk.path, chunk.start)
                    group = self.labels.group_ids(table, batch, chunk.path, chunk.start)
                block = Block(np.diff(offsets), chunk.first_row, self.tokens, group)
                values = [r.read(n) for r in readers]
                rows = slice(chunk.first_row, chunk.first_row + table.num_rows)
                runs = [RunChunk.of(v, block, means[rows]) for v, means in zip(values, self.row_means)]
                for (i, j), tally in self.tallies.items():
                    tally.add(runs[i], runs[j], block)
                if sink is not None:
                    sink.write(_with_runs(table, sink.schema, offsets, values))
                self.tokens += n
                if progress is not None:
                    progress("compare", chunk.first_row + table.num_rows, self.source.num_rows)
        self.group_keys = {g: key for key, g in self.labels.groups.items()}

    def group_label(self, group: int) -> tuple[object, Optional[str]]:
        """(uid, batch name or None) of dense group id ``group``."""
        batch, uid = self.group_keys[group]
        return uid, self.labels.batch_name(batch) if self.batch_key else None


def _pair_summary(comparing: _Comparing, i: int, j: int, named: Sequence[tuple[RunSpec, Config]]) -> PairSummary:
    (spec_a, cfg_a), (spec_b, cfg_b) = named[i], named[j]
    t = comparing.tallies[(i, j)]
    paths = list(comparing.source.paths)
    groups = []
    for g in t.groups.top(TOP_GROUPS):
        uid, batch = comparing.group_label(g.group)
        path, file_row = comparing.source.locate(g.row)
        groups.append(GroupDifference(
            uid=uid, batch=batch, rows=g.rows, tokens=g.tokens, mean_abs_diff=g.mean_abs_diff, row=g.row,
            where=f"{path}:{file_row}",
            explain=[example_command(paths, cfg_a, row=g.row), example_command(paths, cfg_b, row=g.row)]))
    return PairSummary(
        a=spec_a.name, b=spec_b.name, tokens=t.tokens, tokens_only_a=t.tokens_only_a, tokens_only_b=t.tokens_only_b,
        correlation=t.moments.correlation, scale=t.moments.scale, rows=t.rows, sign_flips=t.flips, sign_flip_share=t.flip_share,
        weight_changed=t.changed, weight_changed_share=t.changed_share, mean_abs_diff=t.mean_abs_diff,
        max_abs_diff=t.max_abs_diff, groups=groups).with_sample(*t.sample.points())


@dataclass(frozen=True)
class _Done:
    """A finished run: its summary, its spill file, the per-row means of its advantages (``(B,)``, NaN for a
    row without valid tokens: its report's row table's ``advantage_mean``) and what its report says was read.
    The report itself, and its tables, are not kept."""

    summary: RunSummary
    spill: _Spill
    row_means: np.ndarray
    inputs: Inputs


def _one_run(stages, source: RowSource, spec: RunSpec, cfg: Config, folder: str,
             progress: Optional[Progress]) -> _Done:
    """Every pass of one run over ``source``, its advantages spilled into ``folder``; an error names the run."""
    spill = _Spill(os.path.join(folder, f"{spec.slug}.f32"), spec.compared)
    started = time.perf_counter()
    try:
        report = stages.Pipeline(source, cfg, _named(progress, spec.name)).run(spill.write)
    except RladvError as err:
        err.args = (f"run {spec.name!r}: {err}",)
        raise
    finally:
        spill.close()
    rows = report.arrow_tables()[1]
    if spec.compared == "token_weight":  # the row's mean weight over its valid tokens, NaN without any
        valid = (rows["actor_tokens"].to_numpy() - rows["rejected_tokens"].to_numpy()).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(valid > 0, rows["weight_net"].to_numpy() / valid, np.nan)
    else:
        means = rows["advantage_mean"].to_numpy(zero_copy_only=False)
    return _Done(_run_summary(spec, cfg, report, time.perf_counter() - started), spill, means, report.inputs)


def _output_schema(source: RowSource, specs: Sequence[RunSpec]) -> tuple[pa.Schema, list[str]]:
    """``-o``'s columns: the input's own (not the one-position mask made for sequence-level data), then one
    list of float32 per run; and the names of the input's."""
    carried = [f for f in source.schema if not (source.names.one_position and f.name == "response_mask")]
    schema = pa.schema(carried + [pa.field(s.column, pa.list_(pa.float32())) for s in specs],
                       metadata=marked(source.schema.metadata, "compare"))
    return schema, [f.name for f in carried]


def compare_runs(inputs: "Sequence[PathLike] | PathLike", runs: "Mapping[str, Config] | Sequence[tuple[str, Config]]",
                 *, output: Optional[PathLike] = None, html_path: Optional[PathLike] = None, chunk_rows: int = 512,
                 cache_mib: int = 512, device: str = "auto", threads: int = 1,
                 progress: Optional[Progress] = None) -> Comparison:
    """Run every named configuration over the same rows of ``inputs`` (files, or a frame as ``compute`` takes)
    and compare their advantages, or their token weights when every run gives ``loss_agg_mode`` (docs/compare.md);
    optionally write ``output`` (the input rows with one ``advantages__<slug>`` or ``token_weight__<slug>`` column
    per run) and ``html_path`` (the page), atomically and together.

    ``runs``: ``{name: Config}`` or ``(name, Config)`` pairs, at least two, in the order the pairs are formed;
    their ``chunk_rows``, ``cache_mib``, ``device`` and ``threads`` are replaced by the arguments here. Every
    run must read the same rows (the same ``where`` and ``columns``)."""
    items = list(runs.items()) if isinstance(runs, Mapping) else list(runs)
    quantity = compared(items)
    specs = distinct([RunSpec(name, (), quantity) for name, _ in items])
    execution = {"chunk_rows": chunk_rows, "cache_mib": cache_mib, "device": device, "threads": threads}
    named = [(spec, _with_execution(cfg, execution)) for spec, (_, cfg) in zip(specs, items)]
    _check_same_rows(named)
    source = frames.open_rows(inputs, named[0][1].columns, named[0][1].where)
    named = [(spec, cfg.for_columns(source.columns)) for spec, cfg in named]  # the data's step column, unless given
    out = None if output is None else os.fspath(output)
    _check_outputs(source, specs, out, html_path)
    # a dataset that fits the cache is decoded and checked once, on a thread, as the runs start (as compute does)
    once = None if not isinstance(source, Dataset) else source.read_once(chunk_rows, cache_mib << 20,
                                                                        validation.check_chunk)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)  # the reading thread gets the GIL back between its calls (api)
    t0 = time.perf_counter()
    try:
        shared = _Shared(source)
        with tempfile.TemporaryDirectory(prefix="rladv-compare-") as folder, _pipeline_imported(device) as stages:
            done = [_one_run(stages, shared, spec, cfg, folder, progress) for spec, cfg in named]
            has_uid, batch_key = _group_key([cfg for _, cfg in named], source.columns)
            comparing = _Comparing(shared, [d.spill.path for d in done], [d.row_means for d in done], has_uid,
                                   batch_key)
            schema, carried = _output_schema(source, specs)
            with contextlib.ExitStack() as stack:
                sink = None if out is None else stack.enter_context(
                    AtomicParquetWriter(out, schema, carried, source.names.written(schema.names)))
                side = stack.enter_context(SideFiles())
                comparing.run(chunk_rows, sink, progress)
                result = Comparison(
                    rladv_version=__version__, inputs=done[0].inputs, output=out, compared=quantity,
                    groups_by=None if not has_uid else f"{batch_key} and uid" if batch_key else "uid",
                    runs=[d.summary for d in done],
                    pairs=[_pair_summary(comparing, i, j, named) for i, j in comparing.tallies],
                    seconds=round(time.perf_counter() - t0, 6), spill_bytes=4 * sum(d.spill.tokens for d in done))
                if html_path is not None:
                    from .html import render_html

                    side.write(html_path, render_html(result))
                if sink is not None:
                    sink.finish()
                with signals_deferred():
                    if sink is not None:
                        sink.commit()
                    side.commit()
    finally:
        sys.setswitchinterval(switch)
        if once is not None:
            once.close()
    return result
