"""The verdict on the HTML pages: a card at the top of ``compute --html`` and ``inspect --html`` (level,
headline, signal share, causes largest first with their example commands, hints, group outcomes), the
headline cards led by the signal share, and with several steps a "Verdict per step" section (a line chart per
series that has a value, and a table), all escaped. Every number is checked against the verdict object."""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import rladv_cli
from conftest import SAMPLES, copy_sample
from rladv_cli.diagnose.html import render_inspection_html
from rladv_cli.report.html import render_html
from rladv_cli.report.model import Report
from rladv_cli.report.verdict import Verdict, pct

HOSTILE = '<script>alert("x")</script>" onmouseover="alert(1)'


# ----------------------------------------------------------------- data
def zeroed(table: pa.Table, uids: set[str] | None = None) -> pa.Table:
    """``table`` with the score of every row (or of the rows of ``uids``) set to 0."""
    hit = np.ones(table.num_rows, bool) if uids is None else np.isin(table["uid"].to_numpy(zero_copy_only=False),
                                                                     list(uids))
    score = np.where(hit, 0.0, table["score"].to_numpy()).astype(np.float32)
    return table.set_column(table.schema.get_field_index("score"), "score", pa.array(score))


def verdict_batch(folder: Path, name: str = "rollouts.parquet") -> Path:
    """sample_data/groups.parquet with a failing verdict under grpo, written to ``folder/name``: prompts 1-10
    score 0 on every row (all-0 groups; prompt 0 is all-top already) and the first row of prompts 11-13 gets
    a uid of its own (singleton groups). The data of docs/report-verdict.png."""
    table = zeroed(pq.read_table(SAMPLES / "groups.parquet"), {f"prompt-{p:04d}" for p in range(1, 11)})
    uids = table["uid"].to_pylist()
    for p in (11, 12, 13):
        i = uids.index(f"prompt-{p:04d}")
        uids[i] = f"prompt-{p:04d}-alone"
    pq.write_table(table.set_column(table.schema.get_field_index("uid"), "uid", pa.array(uids)), folder / name)
    return folder / name


# ----------------------------------------------------------------- the page, taken apart
def plain(fragment: str) -> str:
    """The text of an HTML fragment, whitespace collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


class Tags(HTMLParser):
    """The page's element names and any event-handler attributes."""

    def __init__(self, text: str):
        super().__init__()
        self.names: set[str] = set()
        self.handlers: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.names.add(tag)
        self.handlers += [k for k, _ in attrs if k.startswith("on")]


def header(text: str) -> str:
    return text[text.index("<header>"):text.index("</header>")]


def card(text: str) -> str:
    """The verdict card's HTML: from its opening tag to the headline cards that follow it."""
    head = header(text)
    return head[head.index('<div class="verdict'):head.index('<div class="cards">')]


def section(text: str, sid: str) -> str:
    start = text.index(f'<section id="{sid}">')
    return text[start:text.index("</section>", start)]


def assert_card(text: str, v: Verdict) -> None:
    """The verdict card is the first thing under the page's title, shows ``v`` and is followed by the
    headline cards, the first of which is the signal share."""
    head = header(text)
    assert re.search(r'</p>\s*<div class="verdict lv-(\w+)" id="verdict">', head).group(1) == v.level
    assert text.index('id="verdict"') < text.index('<div class="cards">') < text.index("<section")
    c = card(text)
    assert f'<span class="badge">{v.level.upper()}</span>' in c
    assert f'<b class="big">{pct(v.signal_share)}</b>' in c
    words = plain(c)
    assert v.headline in words and f"carries signal {pct(v.signal_share)}" in words
    # the causes, largest share first, each with its share, tokens, code, message and example command
    rows = re.findall(r"<tr>(.*?)</tr>", c, flags=re.S)
    assert len(rows) == len(v.causes) + (1 if v.causes else 0)
    for row, cause in zip(rows[1:], sorted(v.causes, key=lambda x: -x.share)):
        cells = [plain(x) for x in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        assert cells[:4] == [pct(cause.share), f"{cause.tokens:,}", cause.code, cause.message]
        assert cells[4] == (cause.example or "–")
        if cause.example:
            assert f"<code>{html.escape(cause.example, quote=True)}</code>" in row
    for hint in v.hints:
        assert f"<li>{html.escape(hint, quote=True)}</li>" in c
    g = v.group_outcomes
    if g is None:
        assert "Groups of 2+ rows" not in c
    else:
        assert f"Groups of 2+ rows ({g.groups:,})" in words
        for label, x in (("all 0", g.all_zero), ("all top", g.all_top), ("other tied", g.all_equal_other),
                         ("mixed", g.mixed)):
            assert f"{label} {pct(x)}" in words
    first = re.search(r'<div class="cards"><div class="card"><b>(.*?)</b><span>(.*?)</span>', head)
    assert plain(first.group(1)) == pct(v.signal_share)
    assert first.group(2).startswith("actor tokens with learning signal")


# ----------------------------------------------------------------- (a) clean sample files
@pytest.mark.parametrize("sample, estimator, level", [("padded", "rloo", "ok"), ("groups", "grpo", "note")])
def test_the_card_on_a_clean_sample(tmp_path, sample, estimator, level):
    data = copy_sample(tmp_path, f"{sample}.parquet")
    report = rladv_cli.compute_file([data], output=tmp_path / "out.parquet", html_path=tmp_path / "r.html",
                                    estimator=estimator, device="cpu")
    v = report.verdict
    stepped = sample == "groups"  # its step column (100, 101) is the batch key: a verdict per step
    assert v.level == level and (v.steps is not None) == stepped
    assert v.actor_tokens == report.tokens.actor
    text = (tmp_path / "r.html").read_text()
    assert_card(text, v)
    assert ("Verdict per step" in text) == stepped
    if level == "ok":
        assert v.signal_share == 1 and v.causes == [] and '<b class="big">100%</b>' in text
    else:  # groups.parquet: prompt 0 is solved on every sample, prompt 16 has one row
        codes = [c.code for c in v.causes]
        assert {"all_equal_group", "singleton_group"} <= set(codes)
        assert f"{v.signal_share:.1%}" in card(text) and 0.5 < v.signal_share < 0.95
        assert "prompt-0016" in next(c.example for c in v.causes if c.code == "singleton_group")
    ins = rladv_cli.inspect([data], estimator=estimator, html_path=tmp_path / "i.html")
    assert_card((tmp_path / "i.html").read_text(), ins.verdict)
    assert ins.verdict.level == level


# ----------------------------------------------------------------- (b) every score 0
def test_the_card_fails_when_every_score_is_0(tmp_path):
    table = zeroed(pq.read_table(SAMPLES / "groups.parquet"))
    pq.write_table(table, tmp_path / "zero.parquet")
    _, report = rladv_cli.compute(table, estimator="grpo", device="cpu")
    v = report.verdict
    text = render_html(report)
    assert v.level == "fail" and v.signal_share == 0 and v.signal_tokens == 0
    assert v.headline.startswith("0% of actor tokens (0 of 65 rows, 0 of 17 groups)")
    assert_card(text, v)
    assert '<div class="verdict lv-fail" id="verdict">' in text and '<b class="big">0%</b>' in text
    # every group of 2+ rows is all 0; the one-row prompt is a singleton
    g = v.group_outcomes
    assert (g.groups, g.all_zero, g.mixed) == (16, 1.0, 0.0)
    assert "all 0 100%" in plain(card(text)) and "mixed 0%" in plain(card(text))
    by = {c.code: c for c in v.causes}
    lengths = pc.list_value_length(table["response_mask"]).to_numpy()
    alone = table["uid"].to_numpy(zero_copy_only=False) == "prompt-0016"
    assert by["all_equal_group"].tokens == lengths[~alone].sum() and by["all_equal_group"].groups == 16
    assert by["singleton_group"].tokens == lengths[alone].sum()
    assert any("every reward is 0" in h for h in v.hints)
    ins = rladv_cli.inspect(str(tmp_path / "zero.parquet"), estimator="grpo")
    assert ins.verdict.level == "fail" and ins.verdict.basis == "groups"
    page = render_inspection_html(ins)
    assert_card(page, ins.verdict)
    assert "Predicted from the groups and masks" in plain(card(page))


def test_the_screenshot_batch_fails_with_several_causes(tmp_path):
    """78% of the tokens without signal fail (docs/debugging.md, Levels: 75%); its causes warn on their own."""
    _, report = rladv_cli.compute(pq.read_table(verdict_batch(tmp_path)), estimator="grpo", device="cpu")
    v = report.verdict
    assert v.level == "fail" and v.signal_share < 0.25
    assert [c.level for c in v.causes][:2] == ["warn", "warn"]
    assert [c.code for c in v.causes][:2] == ["all_equal_group", "singleton_group"]
    assert v.group_outcomes.all_zero > 0.5 and v.group_outcomes.all_top > 0
    assert_card(render_html(report), v)


# ----------------------------------------------------------------- (c) several steps
STEP_CHARTS = {"signal share": "signal_share", "all-0 groups": "all_zero_share", "all-top groups": "all_top_share",
               "rejected share": "rejected_share", "KL mean": "kl_mean"}


def assert_steps(text: str, v: Verdict) -> None:
    """The per-step section comes first, holds a chart for each series with a value (every series in one chart
    only) and a table row per step with its numbers."""
    assert re.findall(r"<h2>(.*?)</h2>", text)[0] == "Verdict per step"
    body = section(text, "verdict-steps")
    labels = re.findall(r'<svg class="plot" role="img" aria-label="([^"]*)"', body)
    for series, field in STEP_CHARTS.items():
        with_value = any(getattr(s, field) is not None for s in v.steps)
        holding = [label for label in labels if series in label.split(" by ")[0].split(", ")]
        assert len(holding) == (1 if with_value else 0), (series, labels)
    assert len(labels) == len({label.split(" by ")[0] for label in labels})
    rows = re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)[1:]
    assert len(rows) == len(v.steps)
    for row, s in zip(rows, v.steps):
        cells = [plain(x) for x in re.findall(r"<td[^>]*>(.*?)</td>", row, flags=re.S)]
        share = lambda x: "–" if x is None else pct(x)  # noqa: E731
        assert cells[:5] == [s.step, f"{s.rows:,}", f"{s.actor_tokens:,}", pct(s.signal_share), s.level.upper()]
        assert cells[5:9] == [share(s.singleton_share), share(s.all_zero_share), share(s.all_top_share),
                              pct(s.rejected_share)]
        assert cells[9] == ("–" if s.kl_mean is None else f"{s.kl_mean:.6g}")


def test_steps_from_a_batch_key():
    """Step 101's prompts all score 0: its signal share drops to 0 and its groups are all all-0; no KL chart
    without KL shaping (its series is all None), one with it."""
    table = pq.read_table(SAMPLES / "groups.parquet").sort_by("step")
    late = set(pc.filter(table["uid"], pc.equal(table["step"], 101)).to_pylist())
    _, report = rladv_cli.compute(zeroed(table, late), estimator="grpo", device="cpu", batch_key="step")
    v = report.verdict
    assert [s.step for s in v.steps] == ["step=100", "step=101"]
    early, last = v.steps
    assert last.signal_share == 0 and last.all_zero_share == 1 and last.level == "fail"
    assert early.signal_share > 0.5 and all(s.kl_mean is None for s in v.steps)
    text = render_html(report)
    assert_card(text, v)
    assert_steps(text, v)
    assert len(re.findall(r"<svg ", section(text, "verdict-steps"))) == 3
    # the table shows each step's share in its level's colour
    assert '<span class="lvtext lv-fail">0%</span>' in section(text, "verdict-steps")
    _, report = rladv_cli.compute(table, estimator="grpo", device="cpu", batch_key="step", kl_coef=0.05)
    assert all(s.kl_mean is not None for s in report.verdict.steps)
    text = render_html(report)
    assert_steps(text, report.verdict)
    assert len(re.findall(r"<svg ", section(text, "verdict-steps"))) == 4


def test_steps_from_several_files(tmp_path):
    """inspect of two files, one per step, with --batch-key none: a step per file, in the order given."""
    table = pq.read_table(SAMPLES / "groups.parquet")
    paths = []
    for step in (101, 100):
        part = table.filter(pc.equal(table["step"], step))
        paths.append(tmp_path / f"step-{step}.parquet")
        pq.write_table(zeroed(part) if step == 100 else part, paths[-1])
    ins = rladv_cli.inspect([str(p) for p in paths], estimator="grpo", html_path=tmp_path / "i.html", batch_key="none")
    v = ins.verdict
    assert [Path(s.step).name for s in v.steps] == ["step-101.parquet", "step-100.parquet"]
    assert v.steps[1].signal_share == 0 and v.steps[1].all_zero_share == 1 and v.steps[0].signal_share > 0.5
    text = (tmp_path / "i.html").read_text()
    assert_card(text, v)
    assert_steps(text, v)
    # a file's step is named by the file's name on the charts' axes, by its whole path in the table
    signal = section(text, "verdict-steps").split("</svg>")[0]
    assert ">step-100.parquet</text>" in signal and str(tmp_path) not in signal
    assert f"<td>{html.escape(v.steps[1].step)}</td>" in text


def test_rejected_share_per_step():
    table = pq.read_table(SAMPLES / "multiturn.parquet")
    table = table.append_column("step", pa.array(np.arange(table.num_rows) * 2 // table.num_rows))
    _, report = rladv_cli.compute(table, estimator="grpo", device="cpu", batch_key="step", rollout_rs="token_k1",
                                  rollout_rs_threshold="0.7_1.3")
    v = report.verdict
    assert any(s.rejected_share > 0 for s in v.steps)
    text = render_html(report)
    assert_steps(text, v)
    rejected = next(c for c in v.causes if c.code == "rejected")
    assert rejected.tokens == report.tokens.rejected and f"{rejected.tokens:,}" in card(text)


# ----------------------------------------------------------------- escaping
def test_the_verdicts_strings_are_escaped():
    table = pq.read_table(SAMPLES / "groups.parquet")
    _, report = rladv_cli.compute(table, estimator="grpo", device="cpu", batch_key="step")
    d = report.model_dump()
    v = d["verdict"]
    v["headline"] = HOSTILE
    v["hints"] = [HOSTILE]
    v["causes"][0].update(code=HOSTILE, message=HOSTILE, example=HOSTILE)
    v["steps"][0]["step"] = HOSTILE
    text = render_html(Report.model_validate(d))
    assert "<script" not in text.lower()
    tags = Tags(text)
    assert tags.names.isdisjoint({"script", "img", "iframe"}) and not tags.handlers
    assert plain(card(text)).count(HOSTILE) == 6  # headline, hint, message, example, code (legend and table)
    assert HOSTILE in plain(section(text, "verdict-steps"))
