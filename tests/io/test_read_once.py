"""``io.ReadOnce``: a dataset that fits ``--cache-mib`` is decoded once for every pass; one that does not is
streamed as before. Either way the output and the errors are the same as with no cache at all."""
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rladv_cli
from conftest import ragged_rollouts
from rladv_cli import api
from rladv_cli.io import read as rio
from rladv_cli.io import write as wio
from rladv_cli.io.prefetch import decoded_bytes


def rollouts(rows: int, seed: int, prompt: int = 0) -> pa.Table:
    table = ragged_rollouts(rows, seed)
    if prompt:  # one long prompt per group: dictionary-encoded on disk, much larger decoded
        table = table.append_column("prompt", pa.array(["x" * prompt + str(i // 4) for i in range(rows)]))
    return table


def files(tmp_path: Path, *tables: pa.Table) -> list[Path]:
    paths = []
    for i, t in enumerate(tables):
        paths.append(tmp_path / f"part-{i}.parquet")
        pq.write_table(t, paths[-1], row_group_size=16)
    return paths


@pytest.fixture
def reads(monkeypatch):
    """Counts the chunks read from disk, per file."""
    counts: dict[str, int] = {}
    original = rio.Shard.chunks

    def counted(self, *args, **kwargs):
        for chunk in original(self, *args, **kwargs):
            counts[self.path] = counts.get(self.path, 0) + chunk.table.num_rows
            yield chunk

    monkeypatch.setattr(rio.Shard, "chunks", counted)
    return counts


def written(paths: list[Path], out: Path, estimator: str, cache_mib: int) -> bytes:
    """The bytes ``compute_file`` writes for ``paths`` (7-row chunks, on the CPU) with a read cache of ``cache_mib``."""
    rladv_cli.compute_file([str(p) for p in paths], estimator=estimator, output=out, chunk_rows=7, device="cpu",
                           cache_mib=cache_mib)
    return out.read_bytes()


@pytest.mark.parametrize("estimator", ["grpo", "gae", "reinforce_plus_plus_baseline"])
def test_a_dataset_that_fits_is_read_once_and_gives_the_same_bytes(tmp_path, reads, estimator):
    paths = files(tmp_path, rollouts(40, 0), rollouts(40, 1).slice(0, 0), rollouts(33, 2))  # an empty file between
    kept = written(paths, tmp_path / "kept.parquet", estimator, cache_mib=64)
    assert reads == {str(paths[0]): 40, str(paths[2]): 33}  # every row once, over every pass
    reads.clear()
    streamed = written(paths, tmp_path / "streamed.parquet", estimator, cache_mib=0)
    assert kept == streamed
    assert reads[str(paths[0])] > 40 * 2  # each pass reads again


@pytest.mark.parametrize("estimator", ["grpo", "gae"])
@pytest.mark.parametrize("as_read", [True, False], ids=["torch-to-import", "no-torch-import"])
def test_carried_columns_are_encoded_early_and_give_the_same_bytes(tmp_path, monkeypatch, estimator, as_read):
    """As the input is decoded (while torch imports, for a run that may use CUDA), or once it is (on the CPU,
    where no import leaves CPU idle), the input columns the output holds unchanged are encoded, row group by row
    group, across file boundaries; the write pass encodes only rladv's columns."""
    monkeypatch.setattr(api, "_torch_to_import", lambda device: as_read)
    monkeypatch.setattr(wio, "ROW_GROUP_ROWS", 16)
    used = []
    monkeypatch.setattr(wio._Carried, "part", lambda self, part=wio._Carried.part: (used.append(self.num_rows), part(self))[1])
    paths = files(tmp_path, rollouts(40, 0, prompt=20), rollouts(33, 2, prompt=20))
    kept = written(paths, tmp_path / "kept.parquet", estimator, cache_mib=64)
    assert sorted(used) == [9, 16, 16, 16, 16]  # every row group's (taken by encoder threads, in any order)
    used.clear()
    streamed = written(paths, tmp_path / "streamed.parquet", estimator, cache_mib=0)
    assert used == [] and kept == streamed


@pytest.mark.parametrize("with_nulls", [False, True])
def test_files_that_differ_in_nullability_give_a_nullable_column(tmp_path, monkeypatch, with_nulls):
    """A dataset's files must agree on column types, not on nullability: a column that may hold nulls in one
    file may in the output, whether the write pass or the early encoding writes it (a row group here spans
    both files). Before, the carried column took one file's fields and failed to join the other's, and with
    nulls the output's non-nullable column failed in the writer, with a traceback."""
    monkeypatch.setattr(wio, "ROW_GROUP_ROWS", 16)
    first, second = rollouts(40, 0), rollouts(33, 2)
    tags = [None if with_nulls and i % 5 == 0 else i for i in range(33)]
    first = first.append_column(pa.field("tag", pa.int64(), nullable=False), pa.array(np.arange(40)))
    second = second.append_column(pa.field("tag", pa.int64()), pa.array(tags, pa.int64()))
    paths = files(tmp_path, first, second)
    kept = written(paths, tmp_path / "kept.parquet", "grpo", cache_mib=64)
    assert kept == written(paths, tmp_path / "streamed.parquet", "grpo", cache_mib=0)
    out = pq.read_table(tmp_path / "kept.parquet")
    assert out.schema.field("tag").nullable
    assert out.column("tag").to_pylist() == list(range(40)) + tags


@pytest.mark.parametrize("as_read", [True, False], ids=["torch-to-import", "no-torch-import"])
def test_a_dataset_larger_than_its_footer_says_falls_back_to_streaming(tmp_path, reads, monkeypatch, as_read):
    """Long dictionary-encoded strings look small on disk; once the decoded chunks pass the budget they are
    dropped, the first pass goes on from the thread, and later passes read the file. What the writer took of
    them as they were read it drops (memory is short); a writer that would have taken them once all were read
    took nothing. Either way the output is written as usual."""
    monkeypatch.setattr(api, "_torch_to_import", lambda device: as_read)
    paths = files(tmp_path, rollouts(64, 3, prompt=40_000))
    assert decoded_bytes(rio.open_parquet(str(paths[0]))) < 1 << 20
    states, carried, used = [], [], []
    monkeypatch.setattr(rio.ReadOnce, "close", lambda self, close=rio.ReadOnce.close: (states.append(self.kept), close(self)))
    monkeypatch.setattr(wio, "ROW_GROUP_ROWS", 4)
    monkeypatch.setattr(wio._Carried, "__init__", lambda self, *a, init=wio._Carried.__init__: (carried.append(1), init(self, *a))[1])
    monkeypatch.setattr(wio._Carried, "part", lambda self, part=wio._Carried.part: (used.append(1), part(self))[1])
    fallback = written(paths, tmp_path / "a.parquet", "grpo", cache_mib=1)
    assert states == [False] and reads[str(paths[0])] > 64 * 2
    assert bool(carried) == as_read and not used
    assert fallback == written(paths, tmp_path / "b.parquet", "grpo", cache_mib=0)


@pytest.mark.parametrize("cut", [0.5, 0.97])
def test_a_read_error_names_the_same_file_and_row_with_and_without_the_cache(tmp_path, cut):
    paths = files(tmp_path, rollouts(40, 4), rollouts(48, 5))
    data = paths[1].read_bytes()
    paths[1].write_bytes(data[:int(len(data) * cut)] + data[-8:] if cut > 0.9 else data[:8] + data[int(len(data) * cut):])
    errors = []
    for cache_mib in (64, 0):
        with pytest.raises(rladv_cli.RladvError) as err:
            written(paths, tmp_path / "o.parquet", "grpo", cache_mib)
        errors.append(str(err.value))
        assert not (tmp_path / "o.parquet").exists()
    # the same file and row; pyarrow's detail in brackets depends on which columns were being read
    assert errors[0].split(" (")[0] == errors[1].split(" (")[0]
    assert "part-1.parquet: " in errors[0]


def test_rows_are_checked_once_on_the_thread_and_errors_stay_where_they_were(tmp_path, monkeypatch):
    """The thread checks every column of every chunk it decodes; the passes skip chunks that passed. A chunk
    that fails is checked again by the pass that always checked it, so the error is the same as without
    the cache: here the mask error of row 30 (layout pass) wins over the NaN of row 3 (write pass)."""
    from rladv_cli.contract import validation

    calls = []
    check = validation.check_chunk
    monkeypatch.setattr(validation, "check_chunk", lambda *a, **k: (calls.append(a[2]), check(*a, **k))[1])
    good = files(tmp_path, rollouts(40, 6))
    written(good, tmp_path / "o.parquet", "gae", cache_mib=64)
    on_thread = len(calls)
    assert on_thread == len(range(0, 40, 7))  # once per chunk, all on the thread: the passes checked nothing
    calls.clear()
    written(good, tmp_path / "o.parquet", "gae", cache_mib=0)
    assert len(calls) == 3 * on_thread  # without the cache each pass (layout, scan, write) checks its columns

    t = rollouts(40, 7)
    values = t["values"].to_pylist()
    values[3][0] = float("nan")
    mask = t["response_mask"].to_pylist()
    mask[30][0] = 2
    (tmp_path / "bad").mkdir()
    bad = files(tmp_path / "bad", t.set_column(3, "values", pa.array(values, pa.list_(pa.float32())))
                                   .set_column(1, "response_mask", pa.array(mask, pa.list_(pa.int8()))))
    errors = []
    for cache_mib in (64, 0):
        with pytest.raises(rladv_cli.InputError) as err:
            written(bad, tmp_path / "o.parquet", "gae", cache_mib)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and "row 30" in errors[0] and "response_mask" in errors[0]


def test_a_run_that_fails_early_stops_the_reading_thread(tmp_path):
    import threading

    paths = files(tmp_path, rollouts(40, 8).drop_columns(["values"]))  # gae needs values: a schema error
    with pytest.raises(rladv_cli.InputError, match="values"):
        written(paths, tmp_path / "o.parquet", "gae", cache_mib=64)
    assert not [t for t in threading.enumerate() if t.name == "rladv-read"]


@pytest.mark.parametrize("torch_here", [True, False], ids=["torch-to-import", "cpu"])
@pytest.mark.parametrize("collector", [True, False])
def test_compute_file_restores_the_switch_interval_and_the_collector(tmp_path, monkeypatch, collector, torch_here):
    """compute_file lowers the GIL switch interval while its threads run and, where the run imports torch (one
    that may use CUDA), freezes the objects that exist once it is imported out of the garbage collector's passes
    (on the CPU nothing is frozen); it gives the caller's interval and collector back, enabled or not, with
    nothing frozen, also when it fails."""
    import gc
    import sys

    monkeypatch.setattr(api, "_torch_to_import", lambda device: torch_here)
    before = sys.getswitchinterval()
    frozen = []
    (gc.enable if collector else gc.disable)()
    gc.unfreeze()  # (whatever the interpreter's start-up may have frozen)
    try:
        paths = files(tmp_path, rollouts(20, 9))
        rladv_cli.compute_file(paths, estimator="grpo", output=tmp_path / "o.parquet", chunk_rows=7, device="cpu",
                               progress=lambda *_: frozen.append(gc.get_freeze_count()))
        assert frozen and (min(frozen) > 10_000 if torch_here else max(frozen) == 0)
        assert sys.getswitchinterval() == before and gc.isenabled() == collector and gc.get_freeze_count() == 0
        (tmp_path / "bad").mkdir()
        no_values = files(tmp_path / "bad", rollouts(20, 9).drop_columns(["values"]))
        with pytest.raises(rladv_cli.InputError, match="values"):  # raised after the interval was lowered
            written(no_values, tmp_path / "x.parquet", "gae", cache_mib=64)
        assert sys.getswitchinterval() == before and gc.isenabled() == collector and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_callers_own_freeze_is_kept(tmp_path, monkeypatch):
    """A caller that froze objects (a pre-fork server, say) still has them frozen afterwards: compute_file
    then leaves the collector's permanent generation alone (``gc.unfreeze`` would empty it)."""
    import gc

    monkeypatch.setattr(api, "_torch_to_import", lambda device: True)  # where compute_file freezes objects
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        rladv_cli.compute_file(files(tmp_path, rollouts(20, 9)), estimator="grpo", output=tmp_path / "o.parquet",
                               device="cpu")
        assert gc.get_freeze_count() > frozen // 2  # (frozen objects can still be freed; unfreeze gives 0)
    finally:
        gc.unfreeze()


def test_a_failed_torch_import_leaves_the_collector_as_it_was(monkeypatch):
    """An import error of the stages (a broken torch install, say) propagates and nothing stays frozen."""
    import gc
    import sys

    monkeypatch.setattr(api, "_torch_to_import", lambda device: True)
    monkeypatch.setitem(sys.modules, "rladv_cli.pipeline.driver", None)  # `from . import pipeline` now fails
    import rladv_cli.pipeline

    monkeypatch.delattr(rladv_cli.pipeline, "driver", raising=False)  # (an earlier import left it on the package)
    gc.unfreeze()  # (whatever the interpreter's start-up may have frozen)
    with pytest.raises(ImportError):
        with api._pipeline_imported():
            pass
    assert gc.isenabled() and gc.get_freeze_count() == 0


@pytest.mark.slow  # a subprocess importing torch
def test_a_ctrl_c_during_the_torch_import_acts_once_torch_is_imported():
    """A SIGINT that arrives as torch begins to import is raised once the import is done: raised inside it,
    torch's initialisation may swallow it or, through pybind11, abort the process (seen with Ray loaded)."""
    import subprocess
    import sys

    code = """
import os, signal, sys
class Interrupting:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
from rladv_cli import api
assert "torch" not in sys.modules
sys.meta_path.insert(0, Interrupting())
try:
    with api._pipeline_imported("cuda"):
        print("not interrupted")
except KeyboardInterrupt:
    torch = sys.modules.get("torch")
    print("after the import" if torch is not None and torch.ones(2).sum().item() == 2 else "inside the import")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "after the import"), done.stderr[-2000:]
