"""``rladv compute --engine ray``: the local engine's passes, each mapped over the dataset's files (shards)
with Ray Data and reduced on the driver in shard order, so the numbers are the local engine's.

    layout, [kl], scan, [group stats]  map: shard -> per-row arrays + partial statistics (pickled)
                                        driver: merge in shard order, reduce batch-wide statistics
                                        (group sums, counts, whitening moments, KL means), ray.put them
    write                               map: shard -> OUT_DIR/<stem>.adv.parquet, under a staging folder
                                        driver: rename every shard to its final name, then report.json

Errors that are the data's fault (``RladvError``) come back as values and are raised for the first shard in
dataset order, without retries; any other exception (an ``OSError`` on a flaky shared filesystem) and a lost
worker are retried by Ray, ``MAX_RETRIES`` times each. Ray is imported only here, and only when this engine
runs.
"""
from __future__ import annotations

import logging
import os
import pickle
import shutil
import signal
import socket
import tempfile
import threading
import warnings
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

from ..config.settings import Config
from ..errors import TERMINATION_SIGNALS, ComputeError, ConfigError, OutputError, RladvError
from ..io.read import Dataset, Shard
from ..io.write import AtomicParquetWriter, SideFiles, named_os_errors, signals_deferred
from ..report.model import Report

PathLike = str | os.PathLike
MAX_RETRIES = 3  # per shard task: exceptions other than the data's errors, and lost workers
REPORT_NAME = "report.json"
PROBE_SECONDS = 5  # to connect to a cluster's address before ray.init, which retries one that never answers for minutes
# Workers import torch and the passes when they start, not inside a task: Ray Data cancels a failed run's
# other tasks, and a cancellation that lands in the middle of `import torch` leaves a half-imported torch in
# that worker for every later task (seen in CI: "cannot import name 'nn' from partially initialized module").
WORKER_ENV = {"worker_process_setup_hook": "rladv_cli.pipeline.ray_engine.prepare_worker"}


def prepare_worker() -> None:
    """Ray's per-worker set-up hook (``WORKER_ENV``): the imports every shard task needs."""
    import torch  # noqa: F401

    from . import driver as pipeline  # noqa: F401


def compute_ray(inputs: Sequence[PathLike] | PathLike, config: Config, *, output_dir: Optional[PathLike] = None,
                address: Optional[str] = None, workers: Optional[int] = None,
                progress: Optional[Callable[[str, int, int], None]] = None, report_path: Optional[PathLike] = None,
                html_path: Optional[PathLike] = None, config_source: Optional[dict] = None,
                groups_path: Optional[PathLike] = None, rows_path: Optional[PathLike] = None) -> Report:
    """Compute a dataset on Ray: one ``<stem>.adv.parquet`` per input file in ``output_dir`` (default
    ``<inputs' folder>.adv`` beside it) plus ``report.json`` there, the report the local engine would give (and
    ``groups_path`` / ``rows_path``, the tables behind its verdict).

    Runs on the Ray instance this process already joined, else on the cluster at ``address``, else on a local
    one started for the run with ``workers`` CPUs (default: all); ``workers`` also caps the tasks in flight.
    An ``address`` that is malformed or where nothing answers is a ``ConfigError`` (``_check_address``).
    Output shards appear under their final names only once every shard succeeded. The tasks run on CPU
    (``device`` ``auto`` means ``cpu`` here)."""
    from .driver import Pipeline
    from .summary import finish_report

    if config.where is not None:  # its kept rows are held in memory, which the workers do not share
        raise ConfigError("--where needs --engine local (the rows it keeps are held in this process)")
    ray = _import_ray()
    if workers is not None and workers < 1:
        raise ConfigError(f"--ray-workers must be at least 1, got {workers}")
    if config.device == "cuda":
        raise ConfigError("--engine ray computes on CPU workers; --device cuda needs --engine local")
    if address is not None and not ray.is_initialized():
        _check_address(address)
    config = config.model_copy(update={"device": "cpu"})
    dataset = Dataset(inputs, columns=config.columns)
    pipeline = Pipeline(dataset, config, progress)
    out_dir = Path(output_dir) if output_dir is not None else default_output_dir(dataset.inputs, dataset)
    created = not out_dir.exists() and not out_dir.is_symlink()
    names = output_names(dataset, out_dir)
    try:
        for flag, path in (("--report", report_path), ("--html", html_path), ("--groups-out", groups_path),
                           ("--rows-out", rows_path)):
            if path is not None and Path(path).resolve().parent == out_dir.resolve() and Path(path).name in names:
                raise OutputError(f"{flag} {path} is one of the output shards")
        with _cluster(ray, address, workers):
            staging = None
            try:
                with named_os_errors(str(out_dir)), signals_deferred():  # the cleanup knows it as soon as it exists
                    staging = tempfile.mkdtemp(prefix=".rladv-", dir=out_dir)
                with SideFiles() as side:
                    report = pipeline.run(None, RayShards(ray, staging, names, workers, progress))
                    report = finish_report(report, str(out_dir), config_source, report_path, html_path, side,
                                           (groups_path, rows_path))
                    side.write(out_dir / REPORT_NAME, report.to_json())
                    with signals_deferred():  # the shards, report.json, --report and --html: all or none
                        for name in names:
                            with named_os_errors(str(out_dir / name)):
                                os.replace(os.path.join(staging, name), out_dir / name)
                        side.commit()
            finally:
                if staging is not None:
                    shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        if created:  # the folder this run made, left empty by the cleanups above: it goes too
            try:
                out_dir.rmdir()
            except OSError:
                pass
        raise
    return report


def default_output_dir(inputs: Sequence[PathLike], dataset: Dataset) -> Path:
    """``STEM.adv`` beside a file given alone, ``FOLDER.adv`` beside a folder given alone, else ``FOLDER.adv``
    beside the folder that holds every input file (as for a glob)."""
    if len(inputs) == 1 and Path(inputs[0]).is_file():
        path = Path(inputs[0]).resolve()
        return path.with_name(path.name.removesuffix(".parquet") + ".adv")
    if len(inputs) == 1 and Path(inputs[0]).is_dir():
        folder = Path(inputs[0]).resolve()
    else:
        folder = Path(os.path.commonpath([str(Path(p).resolve().parent) for p in dataset.paths]))
    if folder.parent == folder:
        raise OutputError("--engine ray: the inputs share no folder to name the output after; give -o OUT_DIR")
    return folder.with_name(folder.name + ".adv")


def output_names(dataset: Dataset, out_dir: Path) -> list[str]:
    """``<stem>.adv.parquet`` for each input file; creates ``out_dir`` (its parent must exist) and refuses
    names that repeat or that would overwrite an input."""
    names = [Path(p).name.removesuffix(".parquet") + ".adv.parquet" for p in dataset.paths]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise OutputError(f"two input files would both be written to {twice}; give files with distinct names")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"-o {out_dir} is a file; --engine ray writes a folder")
    if not out_dir.parent.is_dir():
        raise OutputError(f"-o {out_dir}: folder {out_dir.parent} does not exist")
    out_dir.mkdir(exist_ok=True)
    if not os.access(out_dir, os.W_OK):
        raise OutputError(f"-o {out_dir}: folder is not writable")
    inputs = {Path(p).resolve() for p in dataset.paths}
    clash = next((n for n in names if (out_dir / n).resolve() in inputs), None)
    if clash is not None:
        raise OutputError(f"-o {out_dir}: output {clash} is one of the inputs; rladv never writes onto its input")
    return names


def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise ConfigError('--engine ray needs Ray Data: pip install "ray[data]>=2.10" (rladv\'s [ray] extra)') from None
    return ray


def _check_address(address: str) -> None:
    """Refuses, in one line, a ``HOST:PORT`` or ``ray://HOST:PORT`` cluster address that is malformed or where
    nothing accepts a TCP connection within ``PROBE_SECONDS``: ``ray.init`` would retry it for minutes, printing
    Ray's C++ log lines. ``auto``, ``local`` and other schemes are Ray's to judge. IPv6 literals go in brackets
    (``[::1]:6379``), as Ray reads them."""
    if not address:
        raise ConfigError(f"{_address_source(address)} is empty; give HOST:PORT, or leave it out for a local cluster")
    target = address.removeprefix("ray://")
    if address in ("auto", "local") or "://" in target:
        return
    name = f"{_address_source(address)} {address}"
    if target.startswith("["):  # an IPv6 host
        host, _, rest = target[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = target.partition(":")
    if ":" in port:
        problem = "more than one colon (an IPv6 host goes in brackets)"
    elif not host or not port:
        problem = "no host" if not host else "no port"
    elif not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        problem = f"port {port} is not a number from 1 to 65535"
    else:
        problem = None
    if problem:
        raise ConfigError(f"{name}: {problem}; expected HOST:PORT (head:6379, [::1]:6379) or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_SECONDS).close()
    except OSError as err:
        if isinstance(err, socket.gaierror):
            why = f"cannot resolve host {host}"
        elif isinstance(err, TimeoutError):
            why = f"nothing answers there (no reply within {PROBE_SECONDS} s)"
        elif isinstance(err, ConnectionRefusedError):
            why = "nothing answers there (connection refused)"
        else:
            why = f"cannot connect ({err.strerror or err})"
        local = "unset RAY_ADDRESS" if name.startswith("$") else "omit --ray-address"
        hint = f'start a cluster with "ray start --head" or {local} for a local one'
        raise ConfigError(f"{name}: {why}; {hint}") from None


def _address_source(address: str) -> str:
    """Where ``address`` came from, for messages: ``$RAY_ADDRESS`` when it is that variable's value (the CLI's
    default for ``--ray-address``), else ``--ray-address``."""
    return "$RAY_ADDRESS" if address == os.environ.get("RAY_ADDRESS") else "--ray-address"


@contextmanager
def _cluster(ray, address: Optional[str], workers: Optional[int]) -> Iterator[None]:
    """The Ray instance for the run: the one already joined, the cluster at ``address``, or a local one with
    ``workers`` CPUs that is shut down afterwards. Quiet: no dashboard, no worker logs on this terminal. A
    session joined here gets ``WORKER_ENV``; one the caller started should pass it to ``ray.init`` too.
    SIGTERM and SIGHUP keep the process's handlers throughout (``_init``, ``_interrupts_for_ray``)."""
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR, runtime_env=WORKER_ENV)
    started = not ray.is_initialized()
    with _interrupts_for_ray():
        if started:
            if address:
                _init(ray, address=address, **quiet)
            else:
                _init(ray, address="local", num_cpus=workers or os.cpu_count(), **quiet)
        context = ray.data.DataContext.get_current()
        # retry any exception in the task (the data's errors never raise there), and let the task raise the
        # exception itself rather than Ray Data's wrapper, so that its message reaches the driver
        settings = {"enable_progress_bars": False, "retried_map_errors": True, "max_map_retries": MAX_RETRIES,
                    "raise_original_map_exception": True}
        saved = {name: getattr(context, name, None) for name in settings}
        for name, value in settings.items():
            setattr(context, name, value)
        data_log = logging.getLogger("ray.data")
        level = data_log.level
        data_log.setLevel(logging.CRITICAL)
        try:
            yield
        finally:
            if started:  # first: Ray Data's threads of an interrupted pass run (and log) until Ray is down
                ray.shutdown()
            for name, value in saved.items():
                setattr(context, name, value)
            data_log.setLevel(level)


def _init(ray, **options) -> None:
    """``ray.init``, keeping this process's SIGTERM handler: Ray replaces it with its own (``sys.exit(15)``,
    behind a C++ one that prints a stack trace), which would take the ``rladv`` executable's (exit 143, one
    quiet exit) away for the rest of the run. A SIGTERM that Ray's handler took while ``ray.init`` ran (the
    only ``SystemExit`` it raises) is raised again, to the handler put back."""
    main = threading.current_thread() is threading.main_thread()  # the only thread that sets handlers (Ray too)
    handler = signal.getsignal(signal.SIGTERM) if main else None
    try:
        try:
            ray.init(**options)
        except (ValueError, ConnectionError) as err:  # a ray:// address without ray[client]; a GCS that refused us
            address = options.get("address")
            hint = ""
            explicit = address not in (None, "auto", "local")
            if isinstance(err, ConnectionError) and explicit and os.environ.get("RAY_AUTH_MODE") != "token":
                hint = ("; a cluster that checks an auth token (as Ray 2.59+'s \"ray start --head\" does) needs "
                        "RAY_AUTH_MODE=token here too, with its token in ~/.ray/auth_token or RAY_AUTH_TOKEN")
            message = " ".join(str(err).split())  # Ray's messages run over several lines
            raise ConfigError(f"{_address_source(address)} {address}: {message}{hint}") from None
        finally:
            if handler is not None:  # None: set from outside Python, which Python cannot set back
                signal.signal(signal.SIGTERM, handler)
    except SystemExit:
        signal.raise_signal(signal.SIGTERM)
        raise


@contextmanager
def _interrupts_for_ray() -> Iterator[None]:
    """While Ray runs in this process, the exception of a SIGTERM or SIGHUP handler (the executable's
    ``Interrupted``) is raised as ``KeyboardInterrupt``, and again as itself once out of the block, whatever
    the block ended with. Ray's blocking calls (``ray.get``, ``ray.wait``) stop for ``KeyboardInterrupt``, as
    Ray Data's iterators do, but keep any other exception pending, which surfaces later as a ``SystemError``.
    Only in the main thread, for handlers that are Python functions."""
    main = threading.current_thread() is threading.main_thread()
    handlers = {sig: signal.getsignal(sig) for sig in TERMINATION_SIGNALS} if main else {}
    raised: list[BaseException] = []

    def relay(handler):
        def call(signum, frame):
            try:
                handler(signum, frame)
            except KeyboardInterrupt:
                raise
            except BaseException as err:
                raised.append(err)
                raise KeyboardInterrupt from None
        return call

    relays = {sig: relay(handler) for sig, handler in handlers.items() if callable(handler)}
    for sig, call in relays.items():
        signal.signal(sig, call)
    try:
        yield
    except BaseException:
        if not raised:
            raise
    finally:
        for sig, call in relays.items():
            if signal.getsignal(sig) is call:  # else the handler changed it (the executable's ignores a second one)
                signal.signal(sig, handlers[sig])
    if raised:
        raise raised[0] from None


class RayShards:
    """``Pipeline``'s ``MapShards`` on Ray Data: one task per shard, the pass's ``ShardWork`` and what the earlier
    passes established broadcast once with ``ray.put``; results come back in shard order."""

    def __init__(self, ray, staging: str, names: list[str], workers: Optional[int],
                 progress: Optional[Callable[[str, int, int], None]]):
        self.ray, self.staging, self.names, self.workers, self.progress = ray, staging, names, workers, progress

    def __call__(self, stage: str, work, items: list[tuple[Shard, dict]], known) -> list:
        ray = self.ray
        work_ref, known_ref = ray.put(work.detached()), ray.put(known)
        rows = [{"index": i, "name": self.names[shard.index], "task": _pack((shard, given))}
                for i, (shard, given) in enumerate(items)]
        # Ray Data deprecates max_retries but has no other bound on lost workers; a Dataset interrupted while it
        # is built complains from its __del__
        with warnings.catch_warnings(), signals_deferred():
            warnings.simplefilter("ignore", DeprecationWarning)
            ds = ray.data.from_items(rows, override_num_blocks=len(rows)).map(
                _run_task, fn_kwargs={"work": work_ref, "known": known_ref, "stage": stage, "staging": self.staging},
                # never more tasks at once than shards: Ray Data warns of a limit above its inputs
                num_cpus=1, concurrency=min(self.workers, len(rows)) if self.workers else None, max_retries=MAX_RETRIES,
            )
        results: list = [None] * len(rows)
        total, done = sum(shard.num_rows for shard, _ in items), 0
        try:
            for row in ds.iter_rows():
                results[row["index"]] = _unpack(row["result"])
                done += items[row["index"]][0].num_rows
                if self.progress:
                    self.progress(stage.replace("_", " "), done, total)
        except Exception as err:  # a task that kept failing after its retries (Ray wraps the cause)
            cause = getattr(err, "cause", None) or err
            first = (str(cause).strip().splitlines() or [""])[0]
            raise ComputeError(f"--engine ray: a {stage.replace('_', ' ')} task failed after {MAX_RETRIES} "
                               f"retries: {type(cause).__name__}: {first}") from None
        failed = next((r for r in results if isinstance(r, RladvError)), None)
        if failed is not None:
            raise failed
        return results


def _run_task(row: dict, work, known, stage: str, staging: str) -> dict:
    """One pass over one shard on a Ray worker; the write pass writes ``staging/<name>`` atomically. The
    data's errors return as values (no retry helps them); anything else raises for Ray to retry."""
    import ray
    import torch

    work, known = ray.get(work), ray.get(known)
    shard, given = _unpack(row["task"])
    torch.set_num_threads(work.plan.cfg.threads)
    try:
        if stage == "write":
            written = shard.names.written(work.plan.schema.names)  # the files' own names (--column)
            with AtomicParquetWriter(os.path.join(staging, row["name"]), work.plan.schema, written=written) as sink:
                result = work.run(stage, shard, given, known, sink.write)
                sink.commit()
        else:
            result = work.run(stage, shard, given, known)
    except RladvError as err:
        result = err
    return {"index": row["index"], "result": _pack(result)}


def _pack(value) -> bytes:
    """Pickled and compressed (fast): a result's value sketches are megabytes of mostly zero counts."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def _unpack(data: bytes):
    return pickle.loads(zlib.decompress(data))
