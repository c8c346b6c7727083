"""The self-contained HTML report (issue 9): well-formed, complete, escaped, offline, deterministic, and its
SVG charts drawn to scale. Reports come from ``rladv_cli.compute`` on ``sample_data/``."""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rladv_cli
from rladv_cli.html_report import (
    SECTIONS, Figures, Histogram, ValueSketch, build_figures, histogram, render_html, write_html,
)
from rladv_cli.report import Report

SAMPLES = Path(__file__).resolve().parent.parent / "sample_data"
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
        self.svgs: list[dict] = []  # {"label": aria-label, "rects": [attrs], "polylines": [attrs]}
        self.text: list[str] = []
        self.feed(text)
        self.close()
        if self.stack:
            self.errors.append(f"unclosed at the end: {self.stack}")

    def _attrs(self, tag: str, attrs: list) -> dict:
        d = dict(attrs)
        self.tags.append((tag, d))
        if tag == "svg":
            self.svgs.append({"label": d.get("aria-label", ""), "rects": [], "polylines": []})
        elif tag == "rect" and "svg" in self.stack:
            self.svgs[-1]["rects"].append(d)
        elif tag == "polyline" and "svg" in self.stack:
            self.svgs[-1]["polylines"].append(d)
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

    def svg(self, label_start: str) -> dict:
        found = [s for s in self.svgs if s["label"].startswith(label_start)]
        assert len(found) == 1, (label_start, [s["label"] for s in self.svgs])
        return found[0]


def figures_of(table: pa.Table, out: pa.Table) -> Figures:
    """What the pipeline hands ``build_figures``, recomputed from compute()'s output table."""
    def rows(col, dtype=np.float64):
        return [np.asarray(x, dtype) for x in out[col].to_pylist()]

    valid = np.concatenate(rows("response_mask")) > 0
    advantages = np.concatenate(rows("advantages", np.float32))[valid]
    returns = np.concatenate(rows("returns", np.float32))[valid]
    if "rm_scores" in table.column_names:
        score = np.array([x.sum() for x in rows("rm_scores")])
    else:
        score = np.asarray(table["score"].to_pylist(), np.float64)
    sketch_a, sketch_r = ValueSketch(), ValueSketch()
    for lo in range(0, valid.size, 300):  # fed in chunks, as the write pass does
        sketch_a.add(advantages[lo:lo + 300])
        sketch_r.add(returns[lo:lo + 300])
    return build_figures(
        reward_total=np.array([x.sum() for x in rows("token_level_rewards")]),
        score_total=score,
        actor=np.array([x.sum() for x in rows("loss_mask")]),
        group_id=np.unique(np.asarray(table["uid"].to_pylist()), return_inverse=True)[1],
        advantages=sketch_a, returns=sketch_r,
    )


def with_steps(table: pa.Table, n_batches: int = 2) -> pa.Table:
    return table.append_column("step", pa.array(np.arange(table.num_rows) * n_batches // table.num_rows))


CASES = {
    "groups-grpo": ("groups", {}),
    "groups-adaptive-kl-per-step": ("groups", dict(kl_coef=0.05, kl_ctrl="adaptive", batch_key="step")),
    "multiturn-kl-rollout-rs": ("multiturn", dict(kl_coef=0.01, rollout_rs="token_k1,seq_max_k2",
                                                  rollout_rs_threshold="0.5_2.0,2.5")),
    "multiturn-gae": ("multiturn", dict(estimator="gae")),
    "multiturn-rollout-rs-per-batch": ("multiturn+steps", dict(rollout_rs="token_k1", rollout_rs_threshold="0.7_1.3",
                                                               batch_key="step")),
    "padded-rloo": ("padded", dict(estimator="rloo")),
    "groups-rpp-whitened-per-step": ("groups", dict(estimator="reinforce_plus_plus", batch_key="step")),
}


@pytest.fixture(scope="module")
def runs():
    done = {}
    for name, (sample, settings) in CASES.items():
        table = pq.read_table(SAMPLES / f"{sample.split('+')[0]}.parquet")
        if sample.endswith("+steps"):
            table = with_steps(table)
        out, report = rladv_cli.compute(table, **{"estimator": "grpo", "device": "cpu", **settings})
        done[name] = (report, figures_of(table, out))
    return done


def bars(svg: dict) -> list[dict]:
    return [r for r in svg["rects"] if "bar" in r.get("class", "").split()]


# ----------------------------------------------------------------- the page
@pytest.mark.parametrize("case", list(CASES))
def test_page_is_well_formed_complete_and_offline(runs, case):
    report, figures = runs[case]
    text = render_html(report, figures)
    page = Page(text)
    assert page.errors == []
    assert text.startswith("<!DOCTYPE html>") and text.isascii()
    headings = re.findall(r"<h2>(.*?)</h2>", text)
    assert headings == [title for _, title in SECTIONS]
    for _, title in SECTIONS:
        assert title in page.plain
    for warning in report.warnings:
        assert warning.code in page.plain and f"{warning.count:,}" in page.plain
        for where in warning.where:
            assert where in page.plain
    # nothing is loaded at view time: no scripts, no external resources, no stylesheet links
    assert "http://" not in text and "https://" not in text
    assert not any(tag in ("script", "link", "img", "iframe", "object", "embed") for tag, _ in page.tags)
    for tag, attrs in page.tags:
        for key in ("src", "href", "xlink:href", "action"):
            if key in attrs:
                assert attrs[key].startswith("#"), (tag, attrs)
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
    assert "url(" not in text and "@import" not in text


@pytest.mark.parametrize("case", list(CASES))
def test_same_report_same_bytes(runs, case):
    report, figures = runs[case]
    first = render_html(report, figures)
    assert render_html(report, figures) == first
    # the JSON report and the figures round-trip to the same page: the page holds nothing else
    again = render_html(Report.model_validate_json(report.to_json()),
                        Figures.model_validate_json(figures.model_dump_json()))
    assert again == first


def test_the_page_shows_the_reports_numbers(runs):
    report, _ = runs["multiturn-kl-rollout-rs"]
    page = Page(render_html(report))
    text = page.plain
    assert f"{report.tokens.actor:,}" in text and f"{report.tokens.rejected:,}" in text
    assert f"{report.advantages.mean:.6g}" in text and f"{report.kl.mean:.6g}" in text
    assert f"{report.rollout_rejection['rollout_rs_token_k1_masked_fraction']:.6g}" in text
    for key, value in report.config.items():
        assert key in text


def test_dead_signal_and_whitening_come_from_the_report(runs):
    report, figures = runs["groups-grpo"]
    page = Page(render_html(report, figures))
    dead = report.dead_signal
    assert dead["zero_advantage_tokens"] > 0
    assert f"{dead['zero_advantage_tokens']:,}" in page.plain
    causes = bars(page.svg("share of actor tokens whose advantage is exactly 0"))
    assert [float(r["data-value"]) for r in causes] == [v / dead["actor_tokens"] for v in dead["causes"].values()]

    report, figures = runs["groups-rpp-whitened-per-step"]
    text = Page(render_html(report, figures)).plain
    assert len(report.whitening) == 2
    for w in report.whitening:
        assert w["batch"] in text and f"{w['mean']:.6g}" in text and f"{w['var']:.6g}" in text


# ----------------------------------------------------------------- charts
def test_histograms_have_a_bar_per_bin_with_height_proportional_to_its_count(runs):
    report, figures = runs["multiturn-gae"]
    page = Page(render_html(report, figures))
    for label, hist in (
        ("histogram: tokens by advantage", figures.advantages),
        ("histogram: tokens by return", figures.returns),
        ("histogram: rows by total reward", figures.reward_total),
        ("histogram: rows by actor tokens", figures.actor_tokens),
        ("histogram: groups by max", figures.group_spread),
    ):
        rects = bars(page.svg(label))
        assert len(rects) == len(hist.counts)
        counts = [int(r["data-count"]) for r in rects]
        heights = [float(r["height"]) for r in rects]
        assert counts == hist.counts
        k = max(heights) / max(counts)
        for c, h in zip(counts, heights):
            assert h == pytest.approx(c * k, abs=0.006)
        # bars sit side by side in bin order and share the baseline
        xs = [float(r["x"]) for r in rects]
        assert xs == sorted(xs)
        bottoms = {round(float(r["y"]) + float(r["height"]), 1) for r in rects}
        assert len(bottoms) == 1


def test_group_size_and_rejection_and_kl_charts(runs):
    report, figures = runs["groups-adaptive-kl-per-step"]
    page = Page(render_html(report, figures))
    sizes = bars(page.svg("groups by rows per group"))
    assert {int(r["data-count"]) for r in sizes} == set(report.groups.sizes.values())
    assert len(sizes) == len(report.groups.sizes)
    coef = page.svg("coefficient")
    points = coef["polylines"][0]["points"].split()
    assert len(points) == len(report.kl.batches) == 2

    report, figures = runs["multiturn-kl-rollout-rs"]
    page = Page(render_html(report, figures))
    rejected = bars(page.svg("fraction rejected"))
    # tokens and rows for each of the two options, then for all options together
    assert len(rejected) == 6
    assert float(rejected[0]["data-value"]) == report.rollout_rejection["rollout_rs_token_k1_masked_fraction"]
    assert float(rejected[1]["data-value"]) == report.rollout_rejection["rollout_rs_token_k1_seq_masked_fraction"]
    assert not any(s["label"].startswith("coefficient") for s in page.svgs)  # one batch: no KL-per-batch chart

    report, figures = runs["multiturn-rollout-rs-per-batch"]
    text = render_html(report, figures)
    for name in report.rollout_rejection["batches"]:
        assert name in text
    assert len(bars(Page(text).svg("fraction rejected"))) == 4 * len(report.rollout_rejection["batches"])


def test_figures_count_what_the_report_counts(runs):
    for case, (report, figures) in runs.items():
        assert figures.advantages.total == report.advantages.count, case
        assert figures.reward_total.total == report.scores.reward_total.count == report.inputs.rows
        assert figures.actor_tokens.total == report.inputs.rows
        assert figures.advantages.edges[0] == pytest.approx(report.advantages.min, rel=1e-6, abs=1e-7)
        assert figures.advantages.edges[-1] == pytest.approx(report.advantages.max, rel=1e-6, abs=1e-7)
        groups_of_two_plus = sum(v for k, v in report.groups.sizes.items() if int(k) > 1)
        if report.config.get("batch_key") is None:  # figures_of groups by uid only
            assert figures.group_spread.total == groups_of_two_plus
    # returns equal to advantages (group estimators) are not drawn twice; score == reward without shaping
    assert runs["groups-grpo"][1].returns is None and runs["groups-grpo"][1].score_total is None
    assert runs["multiturn-gae"][1].returns is not None
    assert runs["multiturn-kl-rollout-rs"][1].score_total is not None


def test_render_without_figures_keeps_the_report_charts(runs):
    report, _ = runs["groups-adaptive-kl-per-step"]
    page = Page(render_html(report))
    assert page.errors == []
    labels = [s["label"] for s in page.svgs]
    assert not any(label.startswith("histogram") for label in labels)
    assert any(label.startswith("groups by rows per group") for label in labels)


# ----------------------------------------------------------------- escaping
def test_user_strings_are_escaped(runs):
    report, figures = runs["multiturn-kl-rollout-rs"]
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
    d["timing"]["seconds"][HOSTILE] = 1.0
    d["whitening"] = [{"batch": HOSTILE, "tokens": 3, "mean": 0.0, "var": 1.0}]
    d["dead_signal"]["causes"][HOSTILE] = 1
    hostile = Report.model_validate(d)
    text = render_html(hostile, figures)
    page = Page(text)
    assert page.errors == []
    assert "<script" not in text.lower()
    assert "&lt;script&gt;" in text
    assert not any(tag == "script" for tag, _ in page.tags)
    assert not any(k.startswith("on") for _, attrs in page.tags for k in attrs)
    assert page.plain.count(HOSTILE) >= 10  # shown, as text


def test_non_ascii_paths_become_character_references(runs):
    report, figures = runs["groups-grpo"]
    d = report.model_dump()
    d["inputs"]["files"][0]["path"] = "données/ロールアウト.parquet"
    text = render_html(Report.model_validate(d), figures)
    assert text.isascii() and "données/ロールアウト.parquet" in Page(text).plain


# ----------------------------------------------------------------- data
def test_value_sketch_does_not_depend_on_chunking():
    rng = np.random.default_rng(0)
    values = np.concatenate([rng.normal(0, 1, 5000), rng.normal(40, 3, 500), [0.0, -0.0, np.nan, np.inf]])
    values = values.astype(np.float32)
    whole = ValueSketch()
    whole.add(values)
    for cuts in ([1], [7, 3000], list(range(0, values.size, 97))):
        parts = ValueSketch()
        for chunk in np.split(values, cuts):
            parts.add(chunk)
        assert parts == whole and parts.histogram() == whole.histogram()
    h = whole.histogram()
    finite = values[np.isfinite(values)]
    assert h.nonfinite == 2 and h.total == finite.size
    assert h.edges[0] == float(finite.min()) and h.edges[-1] == float(finite.max())
    exact, _ = np.histogram(finite.astype(np.float64), bins=np.asarray(h.edges))
    # a bucket spans ~0.1% of its value: only values that close to a bin edge can land one bin off
    assert np.abs(exact - np.asarray(h.counts)).sum() <= 0.01 * finite.size


def test_value_sketch_mask_and_histogram_edge_cases():
    s = ValueSketch()
    s.add(np.array([1.0, 5.0, 2.0]), mask=np.array([1, 0, 1]))
    assert s.count == 2 and s.max == 2.0
    assert ValueSketch().histogram() is None
    one = ValueSketch()
    one.add(np.full(10, 0.25))
    h = one.histogram()
    assert h.counts == [10] and h.edges[0] < 0.25 < h.edges[1]
    ints = histogram(np.array([3, 3, 4, 9]), integer=True)
    assert ints.total == 4 and all(float(e) % 1 == 0.5 for e in ints.edges)
    assert histogram(np.array([np.nan])) is None
    with pytest.raises(ValueError):
        Histogram(edges=[0.0, 1.0], counts=[1, 2])


def test_build_figures_accepts_plain_lists_and_drops_duplicates():
    f = build_figures(reward_total=[1.0, 0.0, 1.0, 1.0], score_total=[1.0, 0.0, 1.0, 1.0], actor=[3, 4, 4, 5],
                      group_id=[0, 0, 1, 1], advantages=[0.5, -0.5], returns=[0.5, -0.5])
    assert f.score_total is None and f.returns is None
    assert f.group_spread.total == 2  # group 0 spread 1, group 1 spread 0
    assert f.advantages.total == 2 and f.actor_tokens.total == 4


# ----------------------------------------------------------------- files
def test_write_html_is_atomic(tmp_path, runs):
    report, figures = runs["groups-grpo"]
    path = tmp_path / "report.html"
    write_html(path, report, figures)
    assert path.read_text() == render_html(report, figures)
    assert sorted(os.listdir(tmp_path)) == ["report.html"]
    with pytest.raises(OSError):
        write_html(tmp_path / "missing" / "report.html", report, figures)
    assert sorted(os.listdir(tmp_path)) == ["report.html"]


# ----------------------------------------------------------------- a real browser
def _png_pixels(data: bytes) -> tuple[int, int, bytes]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, zlib.decompress(idat)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no chromium installed")
def test_headless_chromium_draws_the_page(tmp_path, runs):
    report, figures = runs["multiturn-kl-rollout-rs"]
    page, shot = tmp_path / "report.html", tmp_path / "shot.png"
    write_html(page, report, figures)
    run = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr",
         f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.exists(), run.stderr[-2000:]
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (1280, 1600)
    assert len(set(pixels)) > 50  # not a blank page: text, charts and colours
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Failed to load" in line]
    assert console == []
