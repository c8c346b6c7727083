"""``rladv compute --engine ray``: the local engine's passes over the dataset's files (shards), run by Ray actors
that hold their shards for the whole run (``ray_worker.ShardWorker``), reduced on the driver in shard order, so
the numbers are the local engine's (docs/ray.md).

    start    one actor per worker, each given a fixed set of shards (balanced by rows); it decodes them on a
             thread while it imports the passes, as the driver does and builds the run (on the CPU, on numpy:
             no process imports torch, docs/arrays.md)
    layout, [kl], scan, [group stats]   per shard one actor call -> per-row arrays + partial statistics
             driver: merge in shard order, reduce batch-wide statistics (group sums, counts, whitening moments,
             KL means), ``ray.put`` them once for every actor
    write    per shard one call -> OUT_DIR/<stem>.adv.parquet under a staging folder, the file finished while
             the next call computes; then one ``settle`` call per actor (all its files there), after which the
             driver renames every shard to its final name and writes report.json

Errors that are the data's fault (``RladvError``) come back as values and are raised for the first shard in
dataset order, without retries; any other exception is retried by the actor, and a lost worker is restarted by
Ray, ``MAX_RETRIES`` times each. Ray is imported only here, and only when this engine runs.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence

from ..config.settings import Config
from ..errors import TERMINATION_SIGNALS, ComputeError, ConfigError, OutputError, RladvError
from ..io.read import Dataset, Shard
from ..io.write import SideFiles, computed_columns, named_os_errors, output_schema, signals_deferred
from . import ray_worker

if TYPE_CHECKING:  # the report's models are imported with the passes, while the workers start
    from ..report.model import Report

PathLike = str | os.PathLike
MAX_RETRIES = 3  # per shard call: exceptions other than the data's errors, and lost workers
REPORT_NAME = "report.json"
POOL_NAMESPACE = "rladv"  # kept workers' Ray namespace (--ray-keep-workers)
END_SECONDS = 5  # for kept workers to drop what a finished run held
PROBE_SECONDS = 5  # to connect to a cluster's address before ray.init, which retries one that never answers for minutes


def compute_ray(inputs: Sequence[PathLike] | PathLike, config: Config, *, output_dir: Optional[PathLike] = None,
                address: Optional[str] = None, workers: Optional[int] = None,
                progress: Optional[Callable[[str, int, int], None]] = None, report_path: Optional[PathLike] = None,
                html_path: Optional[PathLike] = None, config_source: Optional[dict] = None,
                groups_path: Optional[PathLike] = None, rows_path: Optional[PathLike] = None,
                keep_workers: float = 0.0) -> Report:
    """Compute a dataset on Ray: one ``<stem>.adv.parquet`` per input file in ``output_dir`` (default
    ``<inputs' folder>.adv`` beside it) plus ``report.json`` there, the report the local engine would give (and
    ``groups_path`` / ``rows_path``, the tables behind its verdict).

    Runs on the Ray instance this process already joined, else on the cluster at ``address``, else on a local
    one started for the run with every CPU of this machine. ``workers`` actors (default: one per free CPU), at
    most one per input file, each hold a share of the files and of the CPUs for the whole run. An ``address``
    that is malformed or where nothing answers is a ``ConfigError`` (``_check_address``). With ``keep_workers``
    seconds the workers outlive a run that finished, for that long, serving the next run of the same code and
    shape on the cluster (``KeptWorkers``; docs/ray.md, "Kept workers"). Output shards appear
    under their final names only once every shard succeeded. The actors run on CPU (``device`` ``auto`` means
    ``cpu`` here)."""
    started = time.perf_counter()
    if config.where is not None:  # its kept rows are held in memory, which the workers do not share
        raise ConfigError("--where needs --engine local (the rows it keeps are held in this process)")
    ray = _import_ray()
    if workers is not None and workers < 1:
        raise ConfigError(f"--ray-workers must be at least 1, got {workers}")
    if not keep_workers >= 0:
        raise ConfigError(f"--ray-keep-workers must be 0 or more seconds, got {keep_workers}")
    if config.device == "cuda":
        raise ConfigError("--engine ray computes on CPU workers; --device cuda needs --engine local")
    if keep_workers and not address and not ray.is_initialized():
        raise ConfigError("--ray-keep-workers needs a running cluster (--ray-address or $RAY_ADDRESS): the local "
                          "one rladv starts stops with the run")
    if address is not None and not ray.is_initialized():
        _check_address(address)
    dataset = Dataset(inputs, columns=config.columns)
    config = config.model_copy(update={"device": "cpu"}).for_columns(dataset.columns)
    out_dir = Path(output_dir) if output_dir is not None else default_output_dir(dataset.inputs, dataset)
    created = not out_dir.exists() and not out_dir.is_symlink()
    names = output_names(dataset, out_dir)
    try:
        for flag, path in (("--report", report_path), ("--html", html_path), ("--groups-out", groups_path),
                           ("--rows-out", rows_path)):
            if path is not None and Path(path).resolve().parent == out_dir.resolve() and Path(path).name in names:
                raise OutputError(f"{flag} {path} is one of the output shards")
        with _cluster(ray, address):
            staging, pool = None, None
            try:
                with named_os_errors(str(out_dir)), signals_deferred():  # the cleanup knows it as soon as it exists
                    staging = tempfile.mkdtemp(prefix=".rladv-", dir=out_dir)
                # the actors start (decoding their shards, importing the passes) while this process imports them
                pool = RayWorkers(ray, dataset, config, staging, names, workers, progress, keep_workers)
                from .driver import Pipeline
                from .summary import finish_report

                pipeline = Pipeline(dataset, config, progress)
                pool.wait_started()
                with SideFiles() as side:
                    report = pipeline.run(None, pool)
                    pool.settle()
                    report = finish_report(report, str(out_dir), config_source, report_path, html_path, side,
                                           (groups_path, rows_path), started)
                    side.write(out_dir / REPORT_NAME, report.to_json())
                    with signals_deferred():  # the shards, report.json, --report and --html: all or none
                        for name in names:
                            with named_os_errors(str(out_dir / name)):
                                os.replace(os.path.join(staging, name), out_dir / name)
                        side.commit()
                    pool.finished = True
            finally:
                if pool is not None:
                    pool.close()
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
    if str(out_dir) == "-":
        raise OutputError("-o -: --engine ray writes a folder, not stdout; give a folder name")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"-o {out_dir} is a file; --engine ray writes a folder")
    if not out_dir.parent.is_dir():
        raise OutputError(f"-o {out_dir}: folder {out_dir.parent} does not exist")
    if out_dir.is_dir() and any(Path(p).parent.resolve() == out_dir.resolve() for p in dataset.paths):
        raise OutputError(f"-o {out_dir} holds input files; --engine ray writes its shards and {REPORT_NAME} into a "
                          "folder of their own, where the next run over the inputs does not read them as input")
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
    except ImportError:
        raise ConfigError('--engine ray needs Ray: pip install "ray>=2.10" (rladv\'s [ray] extra)') from None
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
def _cluster(ray, address: Optional[str]) -> Iterator[None]:
    """The Ray instance for the run: the one already joined, the cluster at ``address``, or a local one with
    every CPU of this machine that is shut down afterwards. Quiet: no dashboard, no worker logs on this terminal.
    SIGTERM and SIGHUP keep the process's handlers throughout (``_init``, ``_interrupts_for_ray``)."""
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    started = not ray.is_initialized()
    with _interrupts_for_ray():
        if started:
            if address:
                _init(ray, address=address, **quiet)
            else:
                _init(ray, address="local", num_cpus=os.cpu_count(), **quiet)
        try:
            yield
        finally:
            if started:
                ray.shutdown()


@contextmanager
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
    the block ended with. Ray's blocking calls (``ray.get``, ``ray.wait``) stop for ``KeyboardInterrupt``, but
    keep any other exception pending, which surfaces later as a ``SystemError``.
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


class RayWorkers:
    """``Pipeline``'s ``MapShards`` on Ray actors (``ray_worker.ShardWorker``): ``workers`` of them (default: one
    per free CPU of the cluster), at most one per shard, each holding a fixed set of shards for the whole run
    (``balanced``), an equal share of the free CPUs (at most one node's; Ray sets its threads to match), and as
    much of ``--cache-mib`` for their decoded chunks. A pass is one actor call per shard, submitted at once (an
    actor runs its calls in order); each worker's ``RunPlan``, the run's ``ShardWork`` and each pass's
    established values are put in Ray's object store once. Results come back in shard order.

    With ``keep_s`` > 0 the workers are kept (``KeptWorkers``): named actors that outlive the run and serve the
    next run of the same rladv with the same shape, so that it pays neither their start nor their imports.
    Idle kept workers of other shapes are asked to stop when the run's workers do not fit the free CPUs."""

    def __init__(self, ray, dataset: Dataset, config: Config, staging: str, names: list[str],
                 workers: Optional[int], progress: Optional[Callable[[str, int, int], None]], keep_s: float = 0.0):
        self.ray, self.progress = ray, progress
        kept = KeptWorkers(ray)
        available = ray.available_resources().get("CPU", 0.0)
        free = max(1.0, available + kept.cpus)  # idle kept workers give theirs back when asked
        groups = balanced(dataset.shards, workers or int(free))
        node = max((n["Resources"].get("CPU", 0.0) for n in ray.nodes() if n.get("Alive")), default=1.0)
        share = min(free / len(groups), node)  # of the free CPUs, at most one node's; whole CPUs above one
        cpus = int(share) if share >= 1 else max(round(share, 4), 0.0001)
        self.prefix = kept.prefix(len(groups), cpus) if keep_s > 0 else None
        kept.make_room(self.prefix, cpus * len(groups), available)
        added = {"with_is_weights": bool(config.rollout_is), "with_token_weight": config.loss_mode is not None}
        schema = output_schema(dataset.schema, **added)
        carried = tuple(name for name in dataset.columns if name not in computed_columns(**added))
        written = tuple(dataset.names.written(schema.names))  # the files' own names (--column)
        budget = (config.cache_mib << 20) // len(groups)
        self.plans = [ray.put(ray_worker.RunPlan(tuple(group), staging, {s.index: names[s.index] for s in group},
                                                 schema, carried, written, config.chunk_rows, budget,
                                                 ray_worker.run_shard, MAX_RETRIES, keep_s))
                      for group in groups]
        self._class = ray.remote(ray_worker.ShardWorker)
        self._options = dict(num_cpus=cpus, max_restarts=MAX_RETRIES, max_task_retries=MAX_RETRIES)
        self.actors = [self._actor(i) for i in range(len(groups))]
        self._begun = [actor.begin.remote([plan]) for actor, plan in zip(self.actors, self.plans)]
        self.owner = {shard.index: i for i, group in enumerate(groups) for shard in group}
        self._work: tuple[object, object] | None = None  # (the ShardWork, its object reference)
        self.calls: list = []  # the latest pass's
        self._written: tuple[list, list] = ([], [])  # the write pass's call arguments, for ``settle``
        self.finished = False  # set once the run's output is in place: kept workers are kept only then

    def __call__(self, stage: str, work, items: list[tuple[Shard, dict]], known) -> list:
        ray = self.ray
        if self._work is None or self._work[0] is not work:
            self._work = work, ray.put(work.detached())
        known_ref = ray.put(known)
        if stage == "write":  # kept for ``settle``, which may write a shard again
            items = [(shard, ray.put(given)) for shard, given in items]
        refs = [[plan, self._work[1], known_ref] for plan in self.plans]
        self.calls = calls = [self.actors[self.owner[shard.index]].run.remote(stage, refs[self.owner[shard.index]],
                                                                             shard, given) for shard, given in items]
        results: list = []
        total, done = sum(shard.num_rows for shard, _ in items), 0
        for (shard, _), call in zip(items, calls):
            results.append(self._get(stage, call))
            done += shard.num_rows
            if self.progress:
                self.progress(stage.replace("_", " "), done, total)
        if stage == "write":
            self._written = refs, items
        failed = next((r for r in results if isinstance(r, RladvError)), None)
        if failed is not None:
            raise failed
        return results

    def settle(self) -> None:
        """After the write pass: return once every worker has each of its shards in its staged file (a worker
        finishes a shard's file while its next call computes, and writes again one whose file failed), as the
        local engine commits its output after the passes."""
        refs, items = self._written
        self.calls = [actor.settle.remote(refs[i], [(s, g) for s, g in items if self.owner[s.index] == i])
                      for i, actor in enumerate(self.actors)]
        failed = next((r for r in map(partial(self._get, "write"), self.calls) if r is not None), None)
        if failed is not None:
            raise failed

    def _get(self, stage: str, call):
        try:
            return ray_worker.unpack(self.ray.get(call))
        except self.ray.exceptions.RayError as err:  # a call that kept failing, or a worker that kept dying
            raise _failure(f"a {stage.replace('_', ' ')} task failed after {MAX_RETRIES} retries", err) from None

    def _actor(self, index: int):
        """Worker ``index``: with ``--ray-keep-workers``, the kept one of this run's shape, or a new one that
        will be kept (a detached named actor); else a new actor."""
        options = self._options
        if self.prefix:
            options = dict(options, name=f"{self.prefix}{index}", namespace=POOL_NAMESPACE, lifetime="detached",
                           get_if_exists=True)
        return self._class.options(**options).remote()

    def wait_started(self) -> None:
        """Wait until every worker began its run (a worker that cannot import rladv fails here, once), so that
        the passes' time, as the local engine's, counts from when every process has imported them. A kept worker
        that stopped itself just as it was asked (its wait ran out) is started again, once."""
        for i, begun in enumerate(self._begun):
            for again in (bool(self.prefix), False):
                try:
                    self.ray.get(begun)
                    break
                except self.ray.exceptions.ActorDiedError as err:
                    if not again:
                        raise _failure("a worker failed to start", err) from None
                    self.actors[i] = self._actor(i)
                    begun = self.actors[i].begin.remote([self.plans[i]])
                except self.ray.exceptions.RayError as err:
                    raise _failure("a worker failed to start", err) from None

    def close(self) -> None:
        """After a finished run, kept workers drop what the run held and wait for the next; otherwise the actors
        are stopped (their kept chunks and unused writers go with them), the calls of an unfinished pass
        cancelled first: Ray would otherwise retry them on the dead actors, and say so on this terminal."""
        if self.prefix and self.finished:
            ended = [actor.end.remote([plan]) for actor, plan in zip(self.actors, self.plans)]
            self.ray.wait(ended, num_returns=len(ended), timeout=END_SECONDS)
            return
        for call in self.calls:
            try:
                self.ray.cancel(call)
            except Exception:  # noqa: BLE001 - a call Ray cannot cancel goes with its actor below
                pass
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)


class KeptWorkers:
    """The workers ``--ray-keep-workers`` keeps on the cluster: detached actors named
    ``rladv-<code>-<count>x<cpus>-<index>`` in the ``rladv`` namespace, where ``<code>`` fingerprints this rladv
    and Python (``code_fingerprint``), so that a run is served only by workers of its own code and shape.
    ``cpus``: the CPUs they hold."""

    def __init__(self, ray):
        self.ray = ray
        self.names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                      if a["namespace"] == POOL_NAMESPACE and a["name"].startswith("rladv-")]
        self.cpus = sum(_held_cpus(name) for name in self.names)

    @staticmethod
    def prefix(count: int, cpus: float) -> str:
        """The name of the kept workers of ``count`` with ``cpus`` each, less their index."""
        return f"rladv-{code_fingerprint()}-{count}x{cpus}-"

    def make_room(self, prefix: Optional[str], cpus: float, available: float) -> None:
        """When the ``cpus`` a run needs (less what its own kept workers, named ``prefix...``, hold) exceed the
        ``available`` ones, ask every other kept worker to stop: at once when idle, else when its run ends."""
        others = [name for name in self.names if not (prefix and name.startswith(prefix))]
        if cpus - (self.cpus - sum(_held_cpus(name) for name in others)) <= available + 1e-9:
            return
        for name in others:
            try:
                self.ray.get_actor(name, namespace=POOL_NAMESPACE).retire.remote()
            except ValueError:  # gone meanwhile
                pass


def _held_cpus(name: str) -> float:
    """The CPUs a kept worker named ``rladv-<code>-<count>x<cpus>-<index>`` holds (0 for another name)."""
    try:
        return float(name.rsplit("-", 2)[1].split("x", 1)[1])
    except (IndexError, ValueError):
        return 0.0


def code_fingerprint() -> str:
    """12 hex digits that change with any of rladv's source files, the Python version and Ray's: kept workers
    run the code they were started with."""
    import ray

    digest = hashlib.sha1(f"{sys.version}|{ray.__version__}".encode())
    package = Path(__file__).resolve().parents[1]
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _failure(what: str, err: Exception) -> ComputeError:
    """One line for a Ray error: what failed, and the first line of its cause (Ray wraps the exception)."""
    cause = getattr(err, "cause", None) or err
    first = (str(cause).strip().splitlines() or [""])[0]
    return ComputeError(f"--engine ray: {what}: {type(cause).__name__}: {first}")


def balanced(shards: Sequence[Shard], count: int) -> list[list[Shard]]:
    """At most ``count`` non-empty sets of ``shards``, each in dataset order: the largest shard first to the set
    with the fewest rows so far."""
    sets: list[list[Shard]] = [[] for _ in range(min(count, len(shards)))]
    rows = [0] * len(sets)
    for shard in sorted(shards, key=lambda s: -s.num_rows):
        i = rows.index(min(rows))
        sets[i].append(shard)
        rows[i] += shard.num_rows
    return [sorted(s, key=lambda shard: shard.index) for s in sets]
