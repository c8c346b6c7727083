"""``rladv compare`` on real Parquet files: each run's advantages are ``rladv compute``'s, every figure is
recomputed here from the written columns, the page is self-contained and stable, and bad input stops with one
line and writes nothing."""
from __future__ import annotations

import json
import re
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rladv_cli
from conftest import DATA, SAMPLES, TESTS, assert_one_line_error, assert_untouched, copy_sample, listing, rladv

sys.path.insert(0, str(TESTS / "report"))
from test_html_report import Page, assert_offline  # noqa: E402 - the run report's checks of a page

RUNS = ["--run", "verl grpo: --estimator grpo", "--run", "dr grpo: --estimator grpo --no-norm-adv-by-std",
        "--run", "rloo: --estimator rloo"]
SETTINGS = {"verl grpo": dict(estimator="grpo"), "dr grpo": dict(estimator="grpo", norm_adv_by_std=False),
            "rloo": dict(estimator="rloo")}


def flat(column: pa.ChunkedArray) -> np.ndarray:
    return np.concatenate([np.asarray(r, dtype=np.float64) for r in column.to_pylist()])


@pytest.fixture(scope="module")
def multiturn(tmp_path_factory):
    """``compare`` of three runs over sample_data/multiturn.parquet: (JSON, the -o table, the page's path)."""
    tmp = tmp_path_factory.mktemp("compare")
    out, page = tmp / "cmp.parquet", tmp / "cmp.html"
    res = rladv("compare", SAMPLES / "multiturn.parquet", *RUNS, "--json", "-o", out, "--html", page)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), pq.read_table(out), page


def test_each_runs_column_holds_computes_advantages_and_its_verdict(multiturn, tmp_path):
    result, table, _ = multiturn
    source = pq.read_table(SAMPLES / "multiturn.parquet")
    assert table.column_names == source.column_names + [f"advantages__{s}" for s in ("verl_grpo", "dr_grpo", "rloo")]
    assert table.select(source.column_names).equals(source)
    for run in result["runs"]:
        out = tmp_path / "computed.parquet"
        report = rladv_cli.compute_file(SAMPLES / "multiturn.parquet", output=out, **SETTINGS[run["name"]])
        assert table[run["column"]].equals(pq.read_table(out)["advantages"]), run["name"]
        assert run["signal_share"] == report.verdict.signal_share
        assert run["causes"] == [c.model_dump() for c in report.verdict.causes]
        assert run["dead_signal"] == report.dead_signal


def test_every_figure_is_recomputed_from_the_written_columns(multiturn):
    result, table, _ = multiturn
    mask = flat(table["response_mask"]) > 0  # no rejection: every run's valid tokens are the input's
    lengths = np.array([len(r) for r in table["response_mask"].to_pylist()])
    row = np.repeat(np.arange(len(lengths)), lengths)
    uid = np.array(table["uid"].to_pylist())
    names = [r["name"] for r in result["runs"]]
    assert [(p["a"], p["b"]) for p in result["pairs"]] == [(names[0], names[1]), (names[0], names[2]),
                                                          (names[1], names[2])]
    for p in result["pairs"]:
        a = flat(table["advantages__" + p["a"].replace(" ", "_")])
        b = flat(table["advantages__" + p["b"].replace(" ", "_")])
        x, y = a[mask], b[mask]
        assert p["tokens"] == mask.sum() and p["tokens_only_a"] == p["tokens_only_b"] == 0
        assert p["correlation"] == pytest.approx(np.corrcoef(x, y)[0, 1], abs=1e-12)
        assert p["weight_changed"] == int(((np.abs(y) > 2 * np.abs(x)) | (np.abs(x) > 2 * np.abs(y))).sum())
        ma = np.bincount(row[mask], weights=x, minlength=len(lengths)) / np.bincount(row[mask], minlength=len(lengths))
        mb = np.bincount(row[mask], weights=y, minlength=len(lengths)) / np.bincount(row[mask], minlength=len(lengths))
        compared = ~np.isnan(ma)
        assert p["rows"] == compared.sum()
        assert p["sign_flips"] == int((compared & (ma * mb < 0)).sum())
        assert p["mean_abs_diff"] == pytest.approx(np.abs(x - y).mean(), rel=1e-12)
        per_group = {u: np.abs(x - y)[uid[row[mask]] == u].mean() for u in np.unique(uid)}
        ranked = sorted(per_group, key=lambda u: -per_group[u])[:10]
        assert [g["uid"] for g in p["groups"]] == ranked
        for g in p["groups"]:
            assert g["mean_abs_diff"] == pytest.approx(per_group[g["uid"]], rel=1e-12)
            assert uid[g["row"]] == g["uid"] and g["where"] == f"{SAMPLES / 'multiturn.parquet'}:{g['row']}"
            assert g["explain"][0].startswith(f"rladv explain {SAMPLES / 'multiturn.parquet'} --estimator ")
            assert f"--row {g['row']}" in g["explain"][1]


def test_dr_grpo_and_rloo_differ_by_a_factor_only(multiturn):
    """On groups of 4 rloo is 4/3 times Dr.GRPO's R - mean: correlation 1, no flip, no weight change past 2x."""
    result, _, _ = multiturn
    p = next(p for p in result["pairs"] if (p["a"], p["b"]) == ("dr grpo", "rloo"))
    assert p["correlation"] == pytest.approx(1.0, abs=1e-6)
    assert (p["sign_flips"], p["weight_changed"]) == (0, 0)
    grpo = next(p for p in result["pairs"] if (p["a"], p["b"]) == ("verl grpo", "dr grpo"))
    assert grpo["weight_changed"] > 0


def test_the_page_is_self_contained_and_the_same_twice(multiturn, tmp_path):
    result, _, page = multiturn
    text = page.read_text()
    parsed = Page(text)
    assert_offline(text, parsed)
    assert len(parsed.svgs) == len(result["pairs"])
    for k, p in enumerate(result["pairs"]):
        assert f'id="pair-{k}"' in text and f"{p['a']} vs {p['b']}" in text
    assert "rladv explain" in text and "task-" in text
    again = tmp_path / "again.html"
    res = rladv("compare", SAMPLES / "multiturn.parquet", *RUNS, "-q", "--html", again)
    assert res.exit_code == 0 and res.output == ""
    assert again.read_bytes() == page.read_bytes()


def test_the_terminal_shows_the_runs_the_pairs_and_an_explain_command():
    res = rladv("compare", SAMPLES / "multiturn.parquet", *RUNS, env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "3 runs over 48 rows" in out and "pairs, over the tokens valid in both" in out
    assert all(name in out for name in SETTINGS)
    explain = r"^ +rladv explain \S+multiturn.parquet --estimator grpo --row \d+ --no-norm-adv-by-std$"
    assert re.search(explain, out, re.M)


def test_rejection_in_one_run_compares_over_the_tokens_valid_in_both(tmp_path):
    """Rollout rejection in B removes tokens: they are B's "valid in A only", 0 in its column, and every figure
    is over the tokens both runs kept (the masks from rladv compute's own outputs)."""
    data = SAMPLES / "multiturn.parquet"
    reject = "--rollout-rs token_k1 --rollout-rs-threshold 1.5"
    res = rladv("compare", data, "--run", "all: --estimator grpo", "--run", f"kept: --estimator grpo {reject}",
                "--json", "-o", tmp_path / "cmp.parquet")
    assert res.exit_code == 0, res.output
    p = json.loads(res.stdout)["pairs"][0]
    masks, columns = [], []
    for k, extra in enumerate(([], ["rollout_rs", "rollout_rs_threshold"])):
        settings = {"rollout_rs": "token_k1", "rollout_rs_threshold": "1.5"} if extra else {}
        out = tmp_path / f"c{k}.parquet"
        rladv_cli.compute_file(data, output=out, estimator="grpo", device="cpu", **settings)
        masks.append(flat(pq.read_table(out)["response_mask"]) > 0)
        columns.append(flat(pq.read_table(out)["advantages"]))
    both = masks[0] & masks[1]
    assert (p["tokens"], p["tokens_only_a"], p["tokens_only_b"]) == (both.sum(), (masks[0] & ~masks[1]).sum(), 0)
    assert p["tokens_only_a"] > 0
    assert p["correlation"] == pytest.approx(np.corrcoef(columns[0][both], columns[1][both])[0, 1], abs=1e-12)
    written = pq.read_table(tmp_path / "cmp.parquet")
    assert np.array_equal(flat(written["advantages__kept"]), columns[1])
    assert np.all(flat(written["advantages__kept"])[masks[0] & ~masks[1]] == 0)


def test_the_figures_do_not_depend_on_chunks_or_the_cache():
    args = ("compare", SAMPLES / "multiturn.parquet", *RUNS, "--json")
    runs = [json.loads(rladv(*args, *extra).stdout) for extra in ([], ["--chunk-rows", "7"], ["--cache-mib", "0"])]
    for other in runs[1:]:
        for p, q in zip(runs[0]["pairs"], other["pairs"]):
            for key in ("tokens", "rows", "sign_flips", "weight_changed"):
                assert p[key] == q[key], key
            assert p["correlation"] == pytest.approx(q["correlation"], abs=1e-12)
            assert [g["uid"] for g in p["groups"]] == [g["uid"] for g in q["groups"]]
        assert [r["signal_share"] for r in runs[0]["runs"]] == [r["signal_share"] for r in other["runs"]]


def test_sequence_level_data_is_written_without_a_made_up_mask(tmp_path):
    data = tmp_path / "seq.parquet"
    pq.write_table(pa.table({"uid": ["a", "a", "b", "b"], "score": pa.array([1.0, 0.0, 1.0, 0.5], pa.float32())}),
                   data)
    res = rladv("compare", data, "--run", "a: --estimator grpo", "--run", "b: --estimator rloo", "-q",
                "-o", tmp_path / "out.parquet")
    assert res.exit_code == 0, res.output
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.column_names == ["uid", "score", "advantages__a", "advantages__b"]
    assert out["advantages__b"].to_pylist() == [[1.0], [-1.0], [0.5], [-0.5]]


def test_a_run_from_a_verl_config_is_computes_run_of_the_same_settings():
    """algorithm_only.yaml is reinforce_plus_plus with gamma 0.99: the flags for the same give the same numbers."""
    res = rladv("compare", SAMPLES / "multiturn.parquet", "--run", f"yaml: --config {DATA / 'algorithm_only.yaml'}",
                "--run", "flags: --estimator reinforce_plus_plus --gamma 0.99", "--run", "gamma 1: --estimator "
                "reinforce_plus_plus", "--json")
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)
    same, other = result["pairs"][0], result["pairs"][1]
    assert (same["mean_abs_diff"], same["max_abs_diff"], same["correlation"]) == (0.0, 0.0, pytest.approx(1.0))
    assert result["runs"][0]["settings"] == result["runs"][1]["settings"] == {"gamma": 0.99}
    assert other["max_abs_diff"] > 0


def test_each_runs_notes_name_the_run(tmp_path):
    config = tmp_path / "no_estimator.yaml"
    config.write_text("algorithm:\n  gamma: 0.99\n")
    res = rladv("compare", SAMPLES / "multiturn.parquet", "--run", f"yaml: --config {config}",
                "--run", "negative kl: --estimator gae --kl-coef -0.1", "-q")
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == [
        "Note: run 'yaml': --config: algorithm.adv_estimator is not set: verl's default gae",
        "Note: run 'negative kl': kl_coef -0.1 is negative (verl accepts it): KL shaping then adds 0.1 * KL to the "
        "rewards, so diverging from the reference policy raises them"]


def test_groups_within_a_shared_batch_key_and_rows_a_shared_where_keeps(tmp_path):
    data = SAMPLES / "groups.parquet"
    res = rladv("compare", data, "--run", "a: --estimator grpo --batch-key step --where 'step >= 1'",
                "--run", "b: --estimator rloo --batch-key step --where 'step >= 1'", "--json")
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)
    kept = pq.read_table(data).filter(pa.compute.greater_equal(pq.read_table(data)["step"], 1))
    assert result["inputs"]["rows"] == kept.num_rows and result["groups_by"] == "step and uid"
    g = result["pairs"][0]["groups"][0]
    assert g["batch"].startswith("step=") and "--where 'step >= 1'" in g["explain"][0]
    assert "--batch-key step" in g["explain"][1]


def test_without_uid_there_are_no_groups(tmp_path):
    table = pq.read_table(SAMPLES / "multiturn.parquet").drop_columns(["uid"])
    pq.write_table(table, tmp_path / "no_uid.parquet")
    res = rladv("compare", tmp_path / "no_uid.parquet", "--run", "gae: --estimator gae",
                "--run", "lam: --estimator gae --lam 0.9")
    assert res.exit_code == 0, res.output
    assert "no uid column: no groups to rank" in res.stdout


def test_the_library_takes_a_table_and_named_configs():
    source = pq.read_table(SAMPLES / "multiturn.parquet")
    result = rladv_cli.compare_runs(source, {"a": rladv_cli.Config(estimator="grpo"),
                                             "b": rladv_cli.Config(estimator="grpo", epsilon=1e-2)}, device="cpu")
    assert [r.name for r in result.runs] == ["a", "b"] and result.inputs.paths == ["<table>"]
    a, b = result.pairs[0].sample
    assert len(a) == len(b) == result.pairs[0].tokens  # fewer tokens than the sample's size: all of them
    assert 0.99 < result.pairs[0].correlation < 1


# ------------------------------------------------------------------------------------ errors
def refused(tmp_path, *args, data: str = "multiturn.parquet", says: tuple[str, ...] = ()):
    """``compare`` with ``args`` over a copy of ``data`` and -o/--html beside it: one line naming ``says``,
    nothing written, the input untouched."""
    path = copy_sample(tmp_path, data)
    before, inputs = listing(tmp_path), {path: path.read_bytes()}
    res = rladv("compare", path, *args, "-o", tmp_path / "out.parquet", "--html", tmp_path / "c.html")
    line = assert_one_line_error(res, *says)
    assert_untouched(tmp_path, before, inputs)
    return line


GOOD = "b: --estimator rloo"


@pytest.mark.parametrize("runs, says", [
    (["a: --estimator grpo"], ("at least two runs, got 1",)),
    (["a: --estimator grpo", "a: --estimator rloo"], ("run name 'a' is given twice",)),
    (["a b: --estimator grpo", "a-b: --estimator rloo"], ("would both write the column advantages__a_b",)),
    (["--estimator grpo", GOOD], ("write NAME: OPTIONS",)),
    (["a: --where 'step", GOOD], ("run 'a'", "do not split into words")),
    (["a: --estimator grpo --bogus", GOOD], ("run 'a'", "No such option: --bogus")),
    (["a: --estimator grpo --device cpu", GOOD], ("run 'a'", "--device changes how a run goes")),
    (["a: --estimator grpo --chunk-rows 8", GOOD], ("run 'a'", "--chunk-rows changes how a run goes")),
    (["a: --estimator grpo --html x.html", GOOD], ("run 'a'", "--html is not a setting")),
    (["a: --estimator grpo --lam 0.9", GOOD], ("run 'a'", "--lam has no effect with --estimator grpo")),
    (["a: --gamma 0.9", GOOD], ("run 'a'", "--estimator is required")),
    (["a: --estimator grpoo", GOOD], ("run 'a'", "grpoo")),
    (["a: --estimator grpo --gamma 2", GOOD], ("run 'a'", "--gamma")),
    (["a: --estimator grpo --where 'uid != \"x\"'", GOOD], ("runs 'a' and 'b' read different rows (--where)",)),
    (["a: --estimator grpo --column uid=responses", "b: --estimator rloo"], ("--column",)),
    (["a: --estimator gae", GOOD], ("run 'a'", "values")),
])
def test_bad_runs_stop_with_one_line_and_write_nothing(tmp_path, runs, says):
    data = "groups.parquet" if says == ("run 'a'", "values") else "multiturn.parquet"
    refused(tmp_path, *[w for r in runs for w in ("--run", r)], data=data, says=says)


def test_no_run_at_all_is_a_usage_error(tmp_path):
    refused(tmp_path, says=("Missing option '--run'",))


def test_an_output_onto_the_input_or_an_input_column_is_refused(tmp_path):
    path = copy_sample(tmp_path, "multiturn.parquet")
    res = rladv("compare", path, "--run", "a: --estimator grpo", "--run", GOOD, "-o", path)
    assert_one_line_error(res, "is one of the inputs")
    table = pq.read_table(path)
    clash = tmp_path / "clash.parquet"
    pq.write_table(table.append_column("advantages__b", table["rm_scores"]), clash)
    before = listing(tmp_path)
    res = rladv("compare", clash, "--run", "a: --estimator grpo", "--run", GOOD, "-o", tmp_path / "o.parquet")
    assert_one_line_error(res, "already has a column advantages__b", "run 'b'")
    assert listing(tmp_path) == before


def test_a_run_that_only_rescales_another_says_by_how_much():
    """multiturn.parquet: 12 uid groups of 4, so rloo = 4/3 (R - mean) and Dr. GRPO = R - mean: dr = 0.75 x rloo
    on every token; grpo divides each group by its own std, so no single k holds."""
    runs = ["--run", "rloo: --estimator rloo", "--run", "dr: --estimator grpo --no-norm-adv-by-std",
            "--run", "grpo: --estimator grpo"]
    res = rladv("compare", SAMPLES / "multiturn.parquet", *runs, env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output
    assert "dr = 0.75 x rloo on every token valid in both: B rescales A" in res.output.splitlines()
    assert " x grpo " not in res.output and "= 0.75 x grpo" not in res.output
    assert "(+1 more)" in res.output  # the causes after the largest, said as such
    pairs = json.loads(rladv("compare", SAMPLES / "multiturn.parquet", *runs, "--json").stdout)["pairs"]
    assert [p["scale"] for p in pairs] == [pytest.approx(0.75, rel=1e-6), None, None]
