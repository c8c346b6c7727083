"""The self-contained HTML pages (issue 9): the run report and ``inspect --html`` are well-formed, complete,
escaped, offline and deterministic, and every plotted distribution is part of the JSON report, computed once
in the pipeline, with hand-checked splits and results that do not depend on ``--chunk-rows``."""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rladv_cli
from conftest import SAMPLES, runner
from rladv_cli.cli import app
from rladv_cli.diagnose.checklist import inspect
from rladv_cli.diagnose.html import SECTIONS as INSPECT_SECTIONS
from rladv_cli.diagnose.html import render_inspection_html
from rladv_cli.report.distributions import Sketch, bucket_mid, histogram
from rladv_cli.report.html import SECTIONS, render_html, write_html
from rladv_cli.report.model import Histogram, Report

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
HOSTILE = '<script>alert("x")</script>" onmouseover="alert(1)'


# ----------------------------------------------------------------- helpers
class Page(HTMLParser):
    """Parses the page and checks that every opened element is closed, in order; keeps what tests look at."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[tuple[str, dict]] = []
        self.svgs: list[str] = []  # aria-labels of the inline SVG charts
        self.text: list[str] = []
        self.feed(text)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed at the end: {self.stack}")

    def _attrs(self, tag: str, attrs: list) -> dict:
        d = dict(attrs)
        self.tags.append((tag, d))
        if tag == "svg":
            self.svgs.append(d.get("aria-label", ""))
        return d

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)
        if "svg" not in self.stack and tag not in VOID:
            self.errors.append(f"self-closing <{tag}/> outside SVG")

    def handle_endtag(self, tag):
        if tag in VOID:
            self.errors.append(f"end tag for void element {tag}")
        elif not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1] if self.stack else 'nothing'}")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)

    @property
    def plain(self) -> str:
        return "".join(self.text)


def assert_offline(text: str, page: Page) -> None:
    """Nothing is loaded at view time: no scripts, no external resources; references are to ids on the page
    or inline images (matplotlib embeds a colour bar as a PNG data URI)."""
    assert page.errors == []
    assert text.startswith("<!DOCTYPE html>") and text.isascii()
    assert "http://" not in text.replace("http://www.w3.org/", "") and "https://" not in text
    assert not any(tag in ("script", "link", "img", "iframe", "object", "embed") for tag, _ in page.tags)
    for tag, attrs in page.tags:
        for key in ("src", "href", "xlink:href", "action"):
            if key in attrs:
                assert attrs[key].startswith(("#", "data:image/png;base64,")), (tag, attrs)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
    assert re.findall(r"url\((?!#)", text) == [] and "@import" not in text


def with_steps(table: pa.Table, n_batches: int = 2) -> pa.Table:
    return table.append_column("step", pa.array(np.arange(table.num_rows) * n_batches // table.num_rows))


CASES = {
    "groups-grpo": ("groups", {}),
    "groups-adaptive-kl-per-step": ("groups", dict(kl_coef=0.05, kl_ctrl="adaptive", batch_key="step")),
    "multiturn-kl-rollout-rs": ("multiturn", dict(kl_coef=0.01, rollout_rs="token_k1,seq_max_k2",
                                                  rollout_rs_threshold="0.5_2.0,2.5")),
    "multiturn-gae": ("multiturn", dict(estimator="gae", lam=0.95, loss_agg_mode="seq-mean-token-sum-norm",
                                        mini_batch_size=16, micro_batch_size=4)),
    "multiturn-rollout-rs-per-batch": ("multiturn+steps", dict(rollout_rs="token_k1", rollout_rs_threshold="0.7_1.3",
                                                               batch_key="step")),
    "padded-rloo": ("padded", dict(estimator="rloo")),
    "groups-rpp-whitened-per-step": ("groups", dict(estimator="reinforce_plus_plus", batch_key="step")),
}


def sample(name: str) -> pa.Table:
    table = pq.read_table(SAMPLES / f"{name.split('+')[0]}.parquet")
    return with_steps(table) if name.endswith("+steps") else table


@pytest.fixture(scope="module")
def runs():
    done = {}
    for name, (data, settings) in CASES.items():
        table = sample(data)
        out, report = rladv_cli.compute(table, **{"estimator": "grpo", "device": "cpu", **settings})
        done[name] = (table, out, report)
    return done


@pytest.fixture(scope="module")
def pages(runs):
    return {name: render_html(report) for name, (_, _, report) in runs.items()}


def valid_tokens(out: pa.Table, column: str) -> np.ndarray:
    mask = np.concatenate([np.asarray(x) for x in out["response_mask"].to_pylist()]) > 0
    return np.concatenate([np.asarray(x, np.float32) for x in out[column].to_pylist()])[mask]


# ----------------------------------------------------------------- the page
@pytest.mark.slow  # renders every case's page (the pages fixture)
@pytest.mark.parametrize("case", list(CASES))
def test_page_is_well_formed_complete_and_offline(runs, pages, case):
    report, text = runs[case][2], pages[case]
    page = Page(text)
    assert_offline(text, page)
    # the replay section only when the input holds columns to replay (tests/report/test_replay.py)
    # the per-step verdict only with several steps (tests/report/test_html_verdict.py)
    # the gradient section only with --loss-agg-mode (tests/loss)
    shown = {"replay": bool(report.replay), "verdict-steps": bool(report.verdict.steps),
             "gradient": report.gradient is not None}
    assert re.findall(r"<h2>(.*?)</h2>", text) == [title for sid, title in SECTIONS if shown.get(sid, True)]
    for warning in report.warnings:
        assert warning.code in page.plain and f"{warning.count:,}" in page.plain
        for where in warning.where:
            assert where in page.plain
    # every chart is an inline SVG drawn by matplotlib, labelled for screen readers
    assert len(page.svgs) >= 8 and all(page.svgs)
    assert text.count("<svg") == len(page.svgs)
    ids = re.findall(r' id="([^"]+)"', text)
    assert len(ids) == len(set(ids)), "element ids repeat across charts"


@pytest.mark.slow  # renders every case's page (the pages fixture)
@pytest.mark.parametrize("case", list(CASES))
def test_same_report_same_bytes_and_the_json_is_the_only_source(runs, pages, case):
    report = runs[case][2]
    assert render_html(report) == pages[case]
    # the JSON report round-trips to the same page: the page holds nothing the JSON does not
    assert render_html(Report.model_validate_json(report.to_json())) == pages[case]


@pytest.mark.slow  # over 2 s: CLI runs with HTML pages
def test_two_cli_runs_write_the_same_html_bytes(tmp_path):
    texts = []
    for run in ("a", "b"):
        html = tmp_path / f"{run}.html"
        result = runner.invoke(app, ["compute", str(SAMPLES / "multiturn.parquet"), "--estimator", "gae", "-o",
                                     str(tmp_path / "out.parquet"), "--html", str(html), "-q"])
        assert result.exit_code == 0, result.output
        texts.append(html.read_bytes())
    assert texts[0] == texts[1]
    assert b"<dc:date>" not in texts[0] and b"Matplotlib v" not in texts[0]


@pytest.mark.slow  # renders every case's page (the pages fixture)
def test_the_page_shows_the_reports_numbers(runs, pages):
    report = runs["multiturn-kl-rollout-rs"][2]
    text = Page(pages["multiturn-kl-rollout-rs"]).plain
    assert f"{report.tokens.actor:,}" in text and f"{report.tokens.rejected:,}" in text
    assert f"{report.advantages.mean:.6g}" in text and f"{report.kl.mean:.6g}" in text
    assert f"{report.rollout_rejection['rollout_rs_token_k1_masked_fraction']:.6g}" in text
    for key in report.config:
        assert key in text
    splits = report.distributions.advantage_splits
    for part in splits.by_outcome + splits.by_length:
        assert part.label in text and f"{part.mean:.6g}" in text
    assert f"{splits.sign.mass_positive:.6g}" in text


@pytest.mark.slow  # renders every case's page (the pages fixture)
def test_the_gradient_section_shows_the_reports_figures(runs, pages):
    g = runs["multiturn-gae"][2].gradient
    text = Page(pages["multiturn-gae"]).plain
    assert "What each token weighs" in text and g.formula in text and f"{g.mass:.6g}" in text
    for part in g.by_cause + g.by_length + g.by_turn:
        assert part.part in text
    assert "F (the micro-batch's padded width)" in text
    assert "What each token weighs" not in Page(pages["multiturn-kl-rollout-rs"]).plain


@pytest.mark.slow  # renders every case's page (the pages fixture)
def test_sections_follow_the_estimator(runs, pages):
    gae = Page(pages["multiturn-gae"])
    assert "Returns vs values" in gae.plain and any(s.startswith("return (reward units) against") for s in gae.svgs)
    ev = runs["multiturn-gae"][2].distributions.returns_vs_values.explained_variance
    assert f"{ev:.6g}" in gae.plain
    grpo = Page(pages["groups-grpo"])
    assert "Returns vs values" not in grpo.plain
    assert not any(s.startswith("histogram: valid tokens by return") for s in grpo.svgs)  # returns = advantages
    report = runs["groups-rpp-whitened-per-step"][2]
    text = Page(pages["groups-rpp-whitened-per-step"]).plain
    assert len(report.whitening) == 2
    for w in report.whitening:
        assert w["batch"] in text and f"{w['mean']:.6g}" in text and f"{w['var']:.6g}" in text


# ----------------------------------------------------------------- the report's distributions
def test_distributions_count_what_the_report_counts(runs):
    for case, (table, out, report) in runs.items():
        d = report.distributions
        assert d.advantages.total == report.advantages.count, case
        assert d.reward_total.total == d.actor_tokens.total == report.inputs.rows
        assert d.advantages.edges[0] == pytest.approx(report.advantages.min, rel=1e-6, abs=1e-7)
        assert d.advantages.edges[-1] == pytest.approx(report.advantages.max, rel=1e-6, abs=1e-7)
        s = d.advantage_splits
        for parts in (s.by_outcome, s.by_length):
            assert sum(p.tokens for p in parts) == report.advantages.count
            for p in parts:
                assert sum(p.counts) == p.tokens and len(p.counts) == len(d.advantages.counts)
        assert sum(p.rows for p in s.by_outcome) == report.inputs.rows
        assert s.sign.tokens_positive + s.sign.tokens_negative + s.sign.tokens_zero == report.advantages.count
        assert s.sign.tokens_positive == round(report.advantages.fraction_positive * report.advantages.count)
        adv = valid_tokens(out, "advantages").astype(np.float64)
        assert s.sign.mass_positive == pytest.approx(adv[adv > 0].sum(), rel=1e-9)
        assert s.sign.mass_negative == pytest.approx(adv[adv < 0].sum(), rel=1e-9)
        if s.outcome == "group":
            all_equal = next((p for p in s.by_outcome if p.label == "all-equal group"), None)
            assert (all_equal.rows if all_equal else 0) >= 2 * report.groups.all_equal
    assert runs["groups-grpo"][2].distributions.returns is None
    assert runs["groups-grpo"][2].distributions.score_total is None
    assert runs["multiturn-kl-rollout-rs"][2].distributions.score_total is not None


def test_returns_vs_values_against_numpy(runs):
    _, out, report = runs["multiturn-gae"]
    rv = report.distributions.returns_vs_values
    r, v = valid_tokens(out, "returns").astype(np.float64), valid_tokens(out, "values").astype(np.float64)
    assert rv.explained_variance == pytest.approx(1 - np.var(r - v) / np.var(r), rel=1e-6)  # r - v in float32
    counts = np.asarray(rv.counts)
    assert counts.sum() == r.size and counts.shape == (len(rv.value_edges) - 1, len(rv.return_edges) - 1)
    assert rv.value_edges[0] == pytest.approx(v.min()) and rv.value_edges[-1] == pytest.approx(v.max())
    # the mean return per value bin, within the sketch's 0.1% buckets (a value that close to an edge may move)
    k = len(rv.value_edges) - 1
    bins = np.clip(np.floor((v - v.min()) / (v.max() - v.min()) * k), 0, k - 1).astype(int)
    for b, mean in enumerate(rv.mean_return):
        if mean is not None and (bins == b).sum() > 5:
            assert mean == pytest.approx(r[bins == b].mean(), abs=0.02 * max(1.0, abs(r).max()))
    assert report.distributions.advantage_splits.outcome == "reward sign"


def _grpo_case(lengths, rewards, uids):
    rm = [[0.0] * (n - 1) + [s] for n, s in zip(lengths, rewards)]
    return pa.table({"uid": uids, "response_mask": [[1] * n for n in lengths], "rm_scores": rm})


def test_splits_on_a_hand_checked_case():
    # group a: rewards 1 and 0 (mixed) -> +-1/sqrt(2) per token; group b: 1 and 1 (all-equal) -> 0
    lengths, rewards, uids = [3, 5, 2, 9], [1.0, 0.0, 1.0, 1.0], ["a", "a", "b", "b"]
    _, report = rladv_cli.compute(_grpo_case(lengths, rewards, uids), estimator="grpo", device="cpu")
    s = report.distributions.advantage_splits
    a = 1 / math.sqrt(2)
    assert s.outcome == "group"
    got = {p.label: (p.rows, p.tokens, p.mean, p.fraction_positive) for p in s.by_outcome}
    assert set(got) == {"above group mean", "below group mean", "all-equal group"}
    assert got["above group mean"][:2] == (1, 3) and got["above group mean"][2] == pytest.approx(a, rel=1e-5)
    assert got["below group mean"][:2] == (1, 5) and got["below group mean"][2] == pytest.approx(-a, rel=1e-5)
    assert got["all-equal group"] == (2, 11, 0.0, 0.0)
    assert [(p.label, p.rows, p.tokens) for p in s.by_length] == [
        ("2-3 tokens", 2, 5), ("4-7 tokens", 1, 5), ("8-15 tokens", 1, 9)]
    g = s.sign
    assert (g.tokens_positive, g.tokens_negative, g.tokens_zero) == (3, 5, 11)
    assert (g.rows_positive, g.rows_negative, g.rows_zero) == (1, 1, 2)
    assert g.mass_positive == pytest.approx(3 * a, rel=1e-5) and g.mass_negative == pytest.approx(-5 * a, rel=1e-5)
    # the advantage histogram: 5 tokens in the lowest bin, 3 in the highest, 11 at 0
    counts = report.distributions.advantages.counts
    assert counts[0] == 5 and counts[-1] == 3 and sum(counts) == 19
    # one outcome part per bin position: the split counts add up to the overall histogram
    assert np.sum([p.counts for p in s.by_outcome], axis=0).tolist() == counts
    assert np.sum([p.counts for p in s.by_length], axis=0).tolist() == counts
    spread = report.distributions.group_spread
    assert spread.total == 2 and spread.edges[0] == 0.0 and spread.edges[-1] == 1.0


def test_non_group_estimators_split_by_the_sign_of_the_reward():
    lengths, rewards = [2, 3, 4, 5], [1.0, 0.0, -1.0, 2.0]
    table = pa.table({"response_mask": [[1] * n for n in lengths],
                      "rm_scores": [[0.0] * (n - 1) + [s] for n, s in zip(lengths, rewards)]})
    _, report = rladv_cli.compute(table, estimator="reinforce_plus_plus", device="cpu")
    s = report.distributions.advantage_splits
    assert s.outcome == "reward sign"
    assert [(p.label, p.rows, p.tokens) for p in s.by_outcome] == [("R > 0", 2, 7), ("R = 0", 1, 3), ("R < 0", 1, 4)]
    assert report.distributions.group_spread is None


@pytest.mark.parametrize("settings", [dict(estimator="gae", lam=0.95), dict(estimator="grpo", kl_coef=0.05),
                                      dict(estimator="reinforce_plus_plus", batch_key="step")])
def test_distributions_do_not_depend_on_chunk_rows(settings):
    table = with_steps(pq.read_table(SAMPLES / "multiturn.parquet"))
    whole = rladv_cli.compute(table, device="cpu", **settings)[1].distributions
    for chunk_rows in (1, 7):
        assert rladv_cli.compute(table, device="cpu", chunk_rows=chunk_rows, **settings)[1].distributions == whole


def test_sketch_does_not_depend_on_chunking():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, 5000), rng.normal(40, 3, 500), [0.0, -0.0]]).astype(np.float32)
    labels = rng.integers(0, 5, values.size)
    whole = Sketch()
    whole.add(values, label=labels)
    for cuts in ([1], [7, 3000], list(range(0, values.size, 97))):
        parts = Sketch()
        for chunk, lab in zip(np.split(values, cuts), np.split(labels, cuts)):
            parts.add(chunk, label=lab)
        assert np.array_equal(parts.keys, whole.keys) and np.array_equal(parts.counts, whole.counts)
        assert parts.histogram() == whole.histogram()
    h = whole.histogram()
    assert h.total == values.size and h.edges[0] == float(values.min()) and h.edges[-1] == float(values.max())
    exact, _ = np.histogram(values.astype(np.float64), bins=np.asarray(h.edges))
    # a bucket spans ~0.1% of its value: only values that close to a bin edge can land one bin off
    assert np.abs(exact - np.asarray(h.counts)).sum() <= 0.01 * values.size
    # a bounded sketch drops mantissa bits as it fills, and still does not depend on the chunking
    for paired in (False, True):
        def fed(cuts):
            sk = Sketch(paired=paired, max_keys=300)
            for chunk, lab, y in zip(np.split(values, cuts), np.split(labels, cuts), np.split(values[::-1], cuts)):
                sk.add(chunk, label=None if paired else lab, y=y if paired else None)
            return sk
        small = fed([])
        assert small.level > 0 and small.keys.size <= 300 and small.counts.sum() == values.size
        for cuts in ([1], [7, 3000], list(range(0, values.size, 97))):
            other = fed(cuts)
            assert other.level == small.level and np.array_equal(other.keys, small.keys)
            assert np.array_equal(other.counts, small.counts)
    edges = whole.edges()
    for label in range(5):
        got = whole.label_counts(edges, lambda high: high == label)
        assert sum(got) == (labels == label).sum()
    # bucket midpoints sit within 0.1% of the values in them
    keys = np.unique(whole.keys & ((1 << 19) - 1))
    assert np.all(np.isfinite(bucket_mid(keys)))


@pytest.mark.skipif(__import__("rladv_cli.report.distributions").report.distributions._rows is None,
                    reason="the C key counter was not built (no compiler at install)")
@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("max_keys, labelled", [(2000, 300), (60, 5)])
def test_counting_rows_in_c_gives_the_sketch_numpy_gives(paired, max_keys, labelled):
    """``Sketch.add_rows``: the C pass over whole rows (labels per row, runs of equal keys, a hash table)
    against numpy's ``add`` of the valid tokens, including signed zeros, empty rows and coarsening (with few
    keys kept, often while runs wait in the C pass's buffer)."""
    from unittest import mock

    from rladv_cli.report import distributions

    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 60, 400)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n = int(offsets[-1])
    per_row = rng.normal(0, 2, lengths.size).astype(np.float32)
    x = np.where(rng.random(n) < 0.5, np.repeat(per_row, lengths), rng.normal(0, 1, n)).astype(np.float32)
    x[rng.random(n) < 0.05] = -0.0
    valid = rng.random(n) < 0.8
    y = rng.normal(3, 1, n).astype(np.float32)
    labels = rng.integers(0, labelled, lengths.size)
    sketches = []
    for native in (True, False):
        with mock.patch.object(distributions, "_rows", distributions._rows if native else None):
            sk = Sketch(paired=paired, max_keys=max_keys)
            for lo, hi in ((0, 150), (150, 151), (151, 400)):
                a, b = int(offsets[lo]), int(offsets[hi])
                sk.add_rows(x[a:b], valid[a:b], offsets[lo:hi + 1] - a, label=None if paired else labels[lo:hi],
                            y=y[a:b] if paired else None)
            sketches.append(sk)
    c, np_ = sketches
    assert c.level == np_.level > 0 and c.count == np_.count == int(valid.sum())
    assert np.array_equal(c.keys, np_.keys) and np.array_equal(c.counts, np_.counts)
    assert (c.lo, c.hi) == (np_.lo, np_.hi)
    with pytest.raises(ValueError, match="do not line up"):
        c.add_rows(x[:10], valid[:10], np.array([0, 5, 9]))


def test_histogram_edge_cases():
    ints = histogram(np.array([3, 3, 4, 9]), integer=True)
    assert ints.total == 4 and all(float(e) % 1 == 0.5 for e in ints.edges)
    one = histogram(np.full(10, 0.25))
    assert one.counts == [10] and one.edges[0] < 0.25 < one.edges[1]
    assert histogram(np.array([np.nan])) is None and Sketch().histogram() is None
    with pytest.raises(ValueError):
        Histogram(edges=[0.0, 1.0], counts=[1, 2])


# ----------------------------------------------------------------- escaping
def test_user_strings_are_escaped(runs):
    report = runs["multiturn-kl-rollout-rs"][2]
    d = report.model_dump()
    d["inputs"]["paths"] = [HOSTILE + ".parquet"]
    d["inputs"]["files"][0]["path"] = HOSTILE + ".parquet"
    d["output"] = HOSTILE + ".adv.parquet"
    d["config"]["estimator"] = HOSTILE
    d["config"][HOSTILE] = {"nested": HOSTILE}
    d["config"]["rollout_rs"] = HOSTILE
    d["warnings"][0]["where"] = [f"{HOSTILE}:3"]
    d["warnings"][0]["message"] = HOSTILE
    d["kl"]["batches"] = [{**d["kl"]["batches"][0], "batch": "uid=" + HOSTILE},
                          {**d["kl"]["batches"][0], "batch": "b"}]
    d["rollout_rejection"][HOSTILE] = HOSTILE
    d["sessions"] = {"note": HOSTILE}
    d["timing"]["device"] = HOSTILE
    d["whitening"] = [{"batch": HOSTILE, "tokens": 3, "mean": 0.0, "var": 1.0}]
    d["dead_signal"]["causes"][HOSTILE] = 1
    d["distributions"]["advantage_splits"]["by_length"][0]["label"] = HOSTILE
    text = render_html(Report.model_validate(d))
    page = Page(text)
    assert page.errors == []
    assert "<script" not in text.lower() and "&lt;script&gt;" in text
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert page.plain.count(HOSTILE) >= 10  # shown, as text


def test_non_ascii_paths_become_character_references(runs):
    d = runs["groups-grpo"][2].model_dump()
    d["inputs"]["files"][0]["path"] = "données/ロールアウト.parquet"
    text = render_html(Report.model_validate(d))
    assert text.isascii() and "données/ロールアウト.parquet" in Page(text).plain


# ----------------------------------------------------------------- files and imports
@pytest.mark.slow  # renders every case's page (the pages fixture)
def test_write_html_is_atomic(tmp_path, runs, pages):
    report = runs["groups-grpo"][2]
    path = tmp_path / "report.html"
    write_html(path, report)
    assert path.read_text() == pages["groups-grpo"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
    with pytest.raises(OSError):
        write_html(tmp_path / "missing" / "report.html", report)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]


@pytest.mark.slow  # a fresh interpreter
def test_matplotlib_is_imported_only_for_html(tmp_path):
    code = ("import sys, pyarrow.parquet as pq, rladv_cli\n"
            f"t = pq.read_table({str(SAMPLES / 'groups.parquet')!r})\n"
            "rladv_cli.compute(t, estimator='grpo', device='cpu')\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported by compute'\n"
            "from rladv_cli.report.html import render_html\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported by html_report'\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


# ----------------------------------------------------------------- inspect --html
@pytest.mark.slow  # over 2 s: CLI runs with HTML pages
def test_inspect_html_through_the_cli(tmp_path):
    data = tmp_path / "multiturn.parquet"
    data.write_bytes((SAMPLES / "multiturn.parquet").read_bytes())
    html = tmp_path / "inspect.html"
    result = runner.invoke(app, ["inspect", str(data), "--kl-coef", "0.05", "--html", str(html), "--json"])
    assert result.exit_code == 0, result.output
    ins = json.loads(result.stdout)
    text = html.read_text()
    page = Page(text)
    assert_offline(text, page)
    assert ins["verdict"]["steps"] is None  # one file, no --batch-key: no per-step section
    assert re.findall(r"<h2>(.*?)</h2>", text) == [title for sid, title in INSPECT_SECTIONS if sid != "verdict-steps"]
    for check in ins["checks"]:
        assert check["code"] in page.plain
        for where in check["where"]:
            assert where in page.plain
    assert len(page.svgs) >= 5 and all(page.svgs)
    assert sum(ins["distributions"]["length"]["counts"]) == ins["rows"] == 48
    assert ins["distributions"]["length"]["edges"][0] == ins["layout"]["length"]["min"] - 0.5
    # the page is a function of the inspection (the same object --json prints)
    assert render_inspection_html(inspect(str(data), kl_coef=0.05)) == text
    # never onto an input, never with --row/--uid; one line, exit 2, nothing written
    before = data.read_bytes()
    for extra in (["--html", str(data)], ["--html", str(tmp_path / "x.html"), "--row", "0"]):
        result = runner.invoke(app, ["inspect", str(data), *extra])
        assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
        assert result.output.startswith("Error: ")
    assert data.read_bytes() == before and not (tmp_path / "x.html").exists()


@pytest.mark.slow  # over 2 s: CLI runs with HTML pages
def test_inspect_html_of_an_output_names_the_mask_before_rejection(tmp_path):
    out = tmp_path / "o.parquet"
    rladv_cli.compute_file([SAMPLES / "multiturn.parquet"], output=out, estimator="grpo", kl_coef=0.05,
                           rollout_rs="token_k1", rollout_rs_threshold="1.5")
    ins = inspect(str(out), html_path=tmp_path / "o.html")
    plain = Page((tmp_path / "o.html").read_text()).plain
    assert ins.tokens.rejected == 9
    assert "actor, rejected: 9" in plain and "actor tokens per row (loss_mask 1)" in plain
    inspect(str(SAMPLES / "multiturn.parquet"), html_path=tmp_path / "i.html")
    plain = Page((tmp_path / "i.html").read_text()).plain
    assert "actor, rejected" not in plain and "actor tokens per row (response_mask 1)" in plain


def test_inspect_html_without_scores_or_groups(tmp_path):
    data = tmp_path / "bare.parquet"
    pq.write_table(pa.table({"response_mask": [[1, 1, 0], [1]]}), data)
    html = tmp_path / "bare.html"
    ins = inspect(str(data), html_path=html)
    text = html.read_text()
    assert_offline(text, Page(text))
    assert ins.distributions.score_total is None and "No uid column" in text and "No rm_scores or score" in text


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize("cuts", [[1], [7, 3000], list(range(0, 5502, 611))])
def test_sketches_of_consecutive_parts_merge_into_the_sketch_of_all(paired, cuts):
    """Shards are sketched apart and merged on the driver: with and without the memory bound (which makes
    each part stop at its own level), the merge equals one sketch fed every value."""
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(0, 1, 5000), rng.normal(40, 3, 500), [0.0, -0.0]]).astype(np.float32)
    labels = rng.integers(0, 5, values.size)
    ys = values[::-1].copy()
    for max_keys in (Sketch.MAX_KEYS, 300):
        def sketch(v, lab, y):
            sk = Sketch(paired=paired, max_keys=max_keys)
            sk.add(v, label=None if paired else lab, y=y if paired else None)
            return sk

        whole = sketch(values, labels, ys)
        merged = Sketch(paired=paired, max_keys=max_keys)
        for v, lab, y in zip(np.split(values, cuts), np.split(labels, cuts), np.split(ys, cuts)):
            merged.merge(sketch(v, lab, y))
        assert (merged.level, merged.count, merged.lo, merged.hi) == (whole.level, whole.count, whole.lo, whole.hi)
        assert np.array_equal(merged.keys, whole.keys) and np.array_equal(merged.counts, whole.counts)
        assert whole.level > 0 or max_keys == Sketch.MAX_KEYS  # the bound is exercised
