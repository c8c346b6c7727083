"""``io.prefetch``: the executable decodes ``compute``'s one input file while its command line loads; the run takes
those chunks only where they are what it would read itself, and writes the same output either way. (Every CLI
test's ``rladv`` helper starts the prefetch as the executable does, so the hostile-input and output tests run
with it too.)"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer.main

import rladv_cli
from conftest import ragged_rollouts, rladv
from rladv_cli.cli import app
from rladv_cli.config.settings import Config
from rladv_cli.io import prefetch

ROWS = 100


def rollouts(seed: int) -> pa.Table:
    table = ragged_rollouts(ROWS, seed, max_len=30, uid="p{group}")
    return table.append_column("note", pa.array([f"row {i}" for i in range(ROWS)]))


def write(table: pa.Table, path: Path) -> Path:
    pq.write_table(table, path, row_group_size=16)  # chunks of 7 rows cross the row groups
    return path


@pytest.fixture
def data(tmp_path) -> Path:
    return write(rollouts(1), tmp_path / "data.parquet")


@pytest.fixture
def handed(monkeypatch) -> list:
    """What every ``Prefetch.batches`` call handed the run (None: nothing)."""
    calls: list = []
    original = prefetch.Prefetch.batches

    def spy(self, *args):
        batches = original(self, *args)
        calls.append(None if batches is None else list(batches))
        return None if batches is None else iter(calls[-1])

    monkeypatch.setattr(prefetch.Prefetch, "batches", spy)
    return calls


def test_the_input_is_found_where_the_run_reads_one_file_here(tmp_path, data):
    other = write(rollouts(2), tmp_path / "other.parquet")
    out = shutil.copyfile(data, tmp_path / "out.parquet")  # an output that exists already is not an input
    (tmp_path / "folder").mkdir()
    f = str(data)
    default = (f, prefetch.CHUNK_ROWS, prefetch.CACHE_MIB)
    cases = [
        (["compute", f, "--estimator", "grpo"], default),
        (["compute", "--estimator", "grpo", "-o", out, f, "-q"], default),
        (["compute", "--output", out, "--groups-out", out, "--rows-out", out, f], default),
        (["compute", f, "--chunk-rows", "7", "--cache-mib=64"], (f, 7, 64)),
        (["compute", f, "--engine", "local"], default),
        (["compute", f, "--engine", "ray"], None),
        (["compute", f, "--engine=ray"], None),
        (["compute", f, "--where", "note != 'row 3'"], None),
        (["compute", f, "--help"], None),
        (["compute", "-h", f], None),
        (["compute", f, "--cache-mib", "0"], None),
        (["compute", f, "--chunk-rows", "-3"], None),
        (["compute", f, "--chunk-rows", str(1 << 31)], None),
        (["compute", f, "--chunk-rows"], None),
        (["compute", f, str(other)], None),
        (["compute", str(tmp_path / "folder")], None),
        (["compute", str(tmp_path / "missing.parquet")], None),
        (["inspect", f], None),
        ([], None),
    ]
    for argv, want in cases:
        assert prefetch.input_file([str(a) for a in argv]) == want, argv


def test_its_defaults_and_options_are_computes():
    """The executable looks for the input before the settings load: the defaults and option names it knows are
    ``Config``'s and the ``compute`` command's."""
    assert Config.model_fields["chunk_rows"].default == prefetch.CHUNK_ROWS
    assert Config.model_fields["cache_mib"].default == prefetch.CACHE_MIB
    compute = typer.main.get_command(app).commands["compute"]
    writes = {o for p in compute.params if "Parquet" in (p.help or "") and p.name != "dataset" for o in p.opts}
    assert writes == prefetch.OUTPUT_OPTIONS
    assert {"--where", "--engine", "--chunk-rows", "--cache-mib"} <= {o for p in compute.params for o in p.opts}


def test_the_run_reads_the_prefetched_chunks(tmp_path, data, monkeypatch):
    """What the prefetch hands over is what the run reads: chunks marked here show in the output."""
    original = prefetch.Prefetch.batches

    def marked(self, *args):
        batches = list(original(self, *args))
        note = batches[0].schema.get_field_index("note")
        return [b.set_column(note, "note", pa.array(["prefetched"] * b.num_rows)) for b in batches]

    monkeypatch.setattr(prefetch.Prefetch, "batches", marked)
    result = rladv("compute", data, "--estimator", "grpo", "-q", "-o", tmp_path / "a.parquet")
    assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "a.parquet")["note"].to_pylist() == ["prefetched"] * ROWS


def test_the_run_takes_the_prefetched_chunks_and_writes_the_same(tmp_path, data, handed):
    result = rladv("compute", data, "--estimator", "gae", "--chunk-rows", "7", "-q", "-o", tmp_path / "a.parquet")
    assert result.exit_code == 0, result.output
    [batches] = handed
    assert batches is not None and [b.num_rows for b in batches] == [7] * (ROWS // 7) + [ROWS % 7]
    rladv_cli.compute_file(data, estimator="gae", chunk_rows=7, output=tmp_path / "b.parquet")
    assert len(handed) == 1  # the library reads as always
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_a_run_that_reads_otherwise_leaves_them(tmp_path, data, handed):
    """Two files: the prefetch (of neither) is dropped; the output is the two files' as always."""
    other = write(rollouts(2), tmp_path / "other.parquet")
    prefetch.start(["compute", str(data)])  # as if the arguments had named only the first
    rladv_cli.compute_file([data, other], estimator="grpo", output=tmp_path / "a.parquet")
    assert handed == [] and prefetch.claim([str(data)]) is None
    rladv_cli.compute_file([data, other], estimator="grpo", output=tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def decoded(path: Path, chunk_rows: int = 7, budget: int = 1 << 30) -> prefetch.Prefetch:
    p = prefetch.Prefetch(str(path), chunk_rows, budget)
    p._thread.join()
    return p


def test_batches_are_handed_out_once_and_only_as_the_file_is_now(tmp_path, data):
    p = decoded(data)
    held = p._batches
    batches = p.batches(str(data), 7)
    assert pa.Table.from_batches(batches).equals(pq.read_table(data))
    assert held == []  # none kept once taken
    assert p.batches(str(data), 7) is None  # handed out once
    assert decoded(data).batches(str(data), 8) is None  # another chunk size
    assert decoded(data, budget=1000).batches(str(data), 7) is None  # decodes larger than the cache: not read
    prompts = write(rollouts(2).append_column("prompt", pa.array(["x" * 40_000 + str(i // 4) for i in range(ROWS)])),
                    tmp_path / "prompts.parquet")  # small on disk (dictionary-encoded), 4 MB decoded
    assert prefetch.decoded_bytes(pq.ParquetFile(prompts)) < 1 << 20
    assert decoded(prompts, budget=1 << 20).batches(str(prompts), 7) is None
    assert decoded(prompts, budget=8 << 20).batches(str(prompts), 7) is not None

    p = decoded(data)
    os.replace(write(rollouts(2), tmp_path / "new.parquet"), data)  # another file at the path
    assert p.batches(str(data), 7) is None
    p = decoded(data)
    data.write_bytes(write(rollouts(3), tmp_path / "newer.parquet").read_bytes())  # rewritten in place
    assert p.batches(str(data), 7) is None
    p = decoded(data)
    data.unlink()
    assert p.batches(str(data), 7) is None


def test_a_file_it_cannot_decode_is_left_to_the_run(tmp_path, data):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    assert decoded(bad).batches(str(bad), 7) is None
    result = rladv("compute", bad, "--estimator", "grpo", "-o", tmp_path / "out.parquet")
    assert result.exit_code == 2 and result.stderr.startswith("Error:") and str(bad) in result.stderr
    assert not (tmp_path / "out.parquet").exists()


def test_claim_takes_the_prefetch_of_that_one_file(tmp_path, data):
    other = write(rollouts(2), tmp_path / "other.parquet")
    prefetch.start(["compute", str(data)])
    assert prefetch.claim([str(tmp_path / ".." / tmp_path.name / "data.parquet")]) is not None  # the same file
    assert prefetch.claim([str(data)]) is None  # taken
    prefetch.start(["compute", str(data)])
    assert prefetch.claim([str(other)]) is None and prefetch.claim([str(data)]) is None  # dropped either way
    prefetch.start(["compute", str(data)])
    assert prefetch.claim([str(data), str(other)]) is None
