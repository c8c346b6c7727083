"""Where ``rladv compute`` writes (docs/contract.md §3): beside a single input, ``-o`` for several inputs, a folder or a
glob, ``--report`` and ``--html``; what it never writes onto (an input, a FIFO, a missing folder, one path
twice); and a write that fails names its file and leaves nothing."""
from __future__ import annotations

import json
import os
import stat
import subprocess
from typing import Optional

import pytest

from conftest import (SAMPLES, assert_one_line_error, assert_untouched, check_output, copy_sample, good_columns,
                      listing, read, rladv, rladv_command, write)


def test_explicit_output(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    out = tmp_path / "sub" / "x.parquet"
    out.parent.mkdir()
    result = rladv("compute", inp, "--estimator", "grpo", "-o", out, "-q")
    assert result.exit_code == 0, result.output
    check_output(inp, out)
    assert not (tmp_path / "groups.adv.parquet").exists()
    assert not list(out.parent.glob(".rladv-*")) and not list(tmp_path.glob(".rladv-*"))


def test_several_inputs_need_output(tmp_path):
    a = write(tmp_path / "a.parquet", good_columns())
    b = write(tmp_path / "b.parquet", good_columns())
    before, data = listing(tmp_path), {a: a.read_bytes(), b: b.read_bytes()}
    result = rladv("compute", a, b, "--estimator", "grpo")
    assert_one_line_error(result, "-o")
    assert_untouched(tmp_path, before, data)


def test_folder_input_needs_output(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write(folder / "a.parquet", good_columns())
    before = listing(tmp_path)
    result = rladv("compute", folder, "--estimator", "grpo")
    assert_one_line_error(result, "-o")
    assert listing(tmp_path) == before and listing(folder) == ["a.parquet"]


@pytest.mark.parametrize("pattern", ["part-*.parquet", "part-0*.parquet"])
def test_a_glob_pattern_needs_output(tmp_path, pattern):
    """A quoted glob is a dataset like a folder, even when it matches one file: without -o there is no
    file name to write beside (it once wrote 'part-*.adv.parquet')."""
    folder = tmp_path / "shards"
    folder.mkdir()
    write(folder / "part-0.parquet", good_columns())
    write(folder / "part-1.parquet", good_columns())
    before = listing(folder)
    result = rladv("compute", str(folder / pattern), "--estimator", "grpo")
    assert_one_line_error(result, "-o OUT.parquet is required when the dataset is a folder, a glob pattern")
    assert listing(folder) == before


def test_folder_input_with_output(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    cols = good_columns(8)
    first = {k: v[:4] for k, v in cols.items()}
    second = {k: v[4:] for k, v in cols.items()}
    # written out of order: files are read in sorted path order
    write(folder / "b.parquet", second)
    write(folder / "a.parquet", first)
    (folder / "README.txt").write_text("not data")
    whole = write(tmp_path / "whole.parquet", cols)
    out = tmp_path / "out.parquet"
    result = rladv("compute", folder, "--estimator", "grpo", "-o", out, "-q")
    assert result.exit_code == 0, result.output
    ref = tmp_path / "ref.parquet"
    assert rladv("compute", whole, "--estimator", "grpo", "-o", ref, "-q").exit_code == 0
    got, want = read(out), read(ref)
    assert got.column_names == want.column_names
    assert got["note"].to_pylist() == [f"row-{i}" for i in range(8)]
    assert got.equals(want)
    assert listing(folder) == ["README.txt", "a.parquet", "b.parquet"]


@pytest.mark.parametrize("spelling", ["same", "dotdot"])
# ------------------------------------------------------------ never onto an input, a FIFO or into a missing folder
def test_output_onto_input_refused(tmp_path, spelling):
    inp = copy_sample(tmp_path, "groups.parquet")
    (tmp_path / "d").mkdir()
    out = inp if spelling == "same" else tmp_path / "d" / ".." / "groups.parquet"
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "-o", out)
    assert_one_line_error(result, "input")
    assert_untouched(tmp_path, before, data)


def test_output_into_missing_folder(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "-o", tmp_path / "nope" / "out.parquet")
    assert_one_line_error(result, "nope")
    assert_untouched(tmp_path, before, data)


def test_report_into_missing_folder(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "--report", tmp_path / "nope" / "r.json")
    assert_one_line_error(result, "nope")
    assert_untouched(tmp_path, before, data)


@pytest.mark.parametrize("option", ["-o", "--report", "--html"])
def test_output_onto_a_fifo_is_refused(tmp_path, option):
    # the atomic rename would replace the FIFO (or, as root, a device such as /dev/full) with a regular file
    inp = copy_sample(tmp_path, "groups.parquet")
    fifo = tmp_path / "target"
    os.mkfifo(fifo)
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    args = ["-o", tmp_path / "out.parquet"] if option != "-o" else []
    result = rladv("compute", inp, "--estimator", "grpo", "-q", option, fifo, *args)
    assert_one_line_error(result, option, "not a regular file")
    assert_untouched(tmp_path, before, data)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_report_onto_input_refused(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", "--report", inp)
    assert_one_line_error(result, "--report", "input")
    assert_untouched(tmp_path, before, data)


def test_report_same_path_as_output_refused(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    out = tmp_path / "same.parquet"
    result = rladv("compute", inp, "--estimator", "grpo", "-o", out, "--report", out, "-q")
    assert_one_line_error(result, "same.parquet")
    assert_untouched(tmp_path, before, data)


def test_output_files_respect_umask(tmp_path):
    inp = copy_sample(tmp_path, "groups.parquet")
    old = os.umask(0o022)
    try:
        result = rladv("compute", inp, "--estimator", "grpo", "--report", tmp_path / "r.json", "-q")
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "groups.adv.parquet").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "r.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("option", ["-o", "--report", "--html", "--config"])
def test_an_empty_output_or_config_path_is_refused(tmp_path, option):
    inp = copy_sample(tmp_path, "multiturn.parquet")
    before, data = listing(tmp_path), {inp: inp.read_bytes()}
    result = rladv("compute", inp, "--estimator", "grpo", *(["-o", tmp_path / "o.parquet"] if option != "-o" else []),
                   option, "")
    assert result.exit_code == 2
    assert "empty path" in assert_one_line_error(result, option)
    assert_untouched(tmp_path, before, data)


# ---------------------------------------------------------------- a full disk or a size limit, named; nothing left
def _run_limited(args: list, limit: Optional[int]) -> subprocess.CompletedProcess:
    import resource

    def cap():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([*rladv_command(), *map(str, args)], capture_output=True, text=True, timeout=300,
                          preexec_fn=cap)


@pytest.mark.slow  # rladv subprocesses under a file-size limit
def test_a_failed_write_names_the_file_and_leaves_nothing(tmp_path):
    """The report used to be written before the HTML page and before the output's rename: a page that could
    not be written left the report behind, and the message named no file (``Error: File too large``). Now the
    three appear together or not at all, and the error names the file that could not be written."""
    inp = copy_sample(tmp_path, "multiturn.parquet")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    args = ["compute", inp, "--estimator", "grpo", "-q", "-o", out_dir / "o.parquet", "--report", out_dir / "r.json",
            "--html", out_dir / "r.html"]
    full = _run_limited(args, None)
    assert full.returncode == 0, full.stderr
    sizes = {p.name: p.stat().st_size for p in out_dir.iterdir()}
    for p in list(out_dir.iterdir()):
        p.unlink()
    assert sizes["r.html"] > 2 * max(sizes["o.parquet"], sizes["r.json"])
    # the page does not fit under the limit, the output and the report do
    page = _run_limited(args, (sizes["r.html"] + max(sizes["o.parquet"], sizes["r.json"])) // 2)
    assert page.returncode == 2 and "Traceback" not in page.stderr
    assert page.stderr.strip() == f"Error: {out_dir / 'r.html'}: File too large"
    assert os.listdir(out_dir) == []
    # nothing fits: whichever file reaches the limit first is named (the output is buffered, the report staged)
    for limit, named in ((1024, ("o.parquet", "r.json")), (1024, ("o.parquet",))):
        run = _run_limited(args if len(named) > 1 else args[:7], limit)
        assert run.returncode == 2 and "Traceback" not in run.stderr
        assert run.stderr.strip() in [f"Error: {out_dir / name}: File too large" for name in named], run.stderr
        assert os.listdir(out_dir) == []
    assert inp.read_bytes() == (SAMPLES / "multiturn.parquet").read_bytes()


@pytest.mark.parametrize("args, message", [
    (["-o", "out.csv"], "-o out.csv: rladv writes Parquet here, not csv; give a .parquet name"),
    (["-o", "OUT.JSON"], "-o OUT.JSON: rladv writes Parquet here, not json"),
    (["-o", "-"], "-o -: this file is not written to stdout; give a file name"),
    (["-o", "o.parquet", "--groups-out", "g.csv"], "--groups-out g.csv: rladv writes Parquet here, not csv"),
    (["-o", "o.parquet", "--rows-out", "-"], "--rows-out -: this file is not written to stdout"),
    (["-o", "o.parquet", "--report", "-", "--html", "-"], "--report and --html both name stdout (-)"),
])
def test_outputs_named_as_another_format_or_stdout_are_refused(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    data = copy_sample(tmp_path, "groups.parquet")
    res = rladv("compute", data, "--estimator", "grpo", *args)
    assert_one_line_error(res)
    assert res.exit_code == 2 and res.output.startswith(f"Error: {message}"), res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups.parquet"]


def test_html_to_stdout(tmp_path, monkeypatch):
    """--html - writes the page to stdout and what would be there to stderr, in compute, inspect and compare;
    no file named '-' appears."""
    monkeypatch.chdir(tmp_path)
    data = copy_sample(tmp_path, "groups.parquet")
    runs = ["--run", "a: --estimator grpo", "--run", "b: --estimator rloo"]
    for args, summary in ((["compute", data, "--estimator", "grpo", "-o", "o.parquet"], "rladv 0.1.0  estimator grpo"),
                          (["inspect", data, "--estimator", "grpo"], "rladv inspect  65 rows"),
                          (["compare", data, *runs], "rladv compare  2 runs")):
        res = rladv(*args, "--html", "-")
        assert res.exit_code == 0, res.output
        assert res.stdout.startswith("<!DOCTYPE html>") and res.stdout.rstrip().endswith("</html>"), res.stdout[:80]
        assert res.stderr.startswith(summary), res.stderr[:80]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups.parquet", "o.parquet"]
    res = rladv("inspect", data, "--json", "--html", "-")
    assert res.exit_code == 2 and res.output == "Error: --json and --html both name stdout (-); give all but one of them a file name\n"


def test_an_earlier_output_beside_the_data_is_left_out_with_a_note(tmp_path):
    """The default output lands beside its input; the next run over the folder (compute, inspect, validate,
    compare) leaves it out, by the mark rladv writes in its outputs' metadata, and says so. A file named on its
    own is read, and a folder holding only outputs is read as the data."""
    folder = tmp_path / "steps"
    folder.mkdir()
    data = copy_sample(folder, "groups.parquet")
    assert rladv("compute", data, "--estimator", "grpo", "-q").exit_code == 0
    earlier = folder / "groups.adv.parquet"
    renamed = folder / "old-run.parquet"  # the mark, not the name, tells an output
    earlier.rename(renamed)
    note = (f"Note: left out 1 rladv output(s) found beside the data: {renamed} (name a file on its own to read "
            "it)\n")
    res = rladv("compute", folder, "--estimator", "grpo", "-o", tmp_path / "o.parquet", "--report", tmp_path / "r.json")
    assert res.exit_code == 0 and res.stderr == note, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["inputs"]["paths"] == [str(data)] and report["inputs"]["skipped"] == [str(renamed)]
    for args in (("inspect", folder), ("validate", folder), ("inspect", str(folder / "*.parquet"))):
        res = rladv(*args)
        assert res.exit_code == 0 and res.stderr == note, (args, res.output)
    alone = rladv("inspect", renamed, "--json")
    assert alone.exit_code == 0 and alone.stderr == "" and json.loads(alone.stdout)["paths"] == [str(renamed)]
    only = tmp_path / "outputs"
    only.mkdir()
    renamed.rename(only / "a.adv.parquet")
    res = rladv("inspect", only, "--json")
    assert res.exit_code == 0 and res.stderr == "" and json.loads(res.stdout)["paths"] == [str(only / "a.adv.parquet")]
