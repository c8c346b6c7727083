"""The catalogue of checks (report/checks.py): docs/debugging.md's tables are its rendering, and ``rladv compute``'s
report and ``rladv inspect``'s checklist word a code they share alike on the same file."""
from __future__ import annotations

import ast

import numpy as np
import pyarrow as pa
import pytest

import rladv_cli
from conftest import ROOT, write
from rladv_cli.diagnose.checklist import inspect
from rladv_cli.report.checks import CHECKS, MEASURES, checks_table, with_tables
from rladv_cli.report.facts import ROW_FACTS
from rladv_cli.report.verdict import THRESHOLDS

DEBUGGING = ROOT / "docs" / "debugging.md"


def test_the_tables_of_debugging_md_are_the_catalogues():
    doc = DEBUGGING.read_text(encoding="utf-8")
    assert with_tables(doc) == doc, "run: python -m rladv_cli.report.checks docs/debugging.md"


def test_every_check_has_a_row_and_every_level_is_the_verdicts():
    table = checks_table()
    assert all(f"| `{code}` |" in table for code in CHECKS)
    assert dict(THRESHOLDS) == {code: m.limits for code, m in MEASURES.items()}


def test_report_md_explains_every_code_compute_warns_with():
    """docs/report.md's table of warnings (what each means, what to do) has one row per code of the catalogue that
    compute raises, and no other."""
    import re

    text = (ROOT / "docs" / "report.md").read_text().split("## Warnings")[1].split("\n## ")[0]
    documented = re.findall(r"^\| `(\w+)` \|", text, re.M)
    assert sorted(documented) == sorted(code for code, check in CHECKS.items() if "compute" in check.by)


def test_the_hazards_do_not_import_the_checklist():
    """checklist -> hazards -> findings, one way."""
    tree = ast.parse((ROOT / "rladv_cli" / "diagnose" / "hazards.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "checklist" not in imported


# each case: the columns (or several files' columns), compute's settings, inspect's, the codes both raise
CASES = {
    "groups and masks": (
        {"uid": ["a"] * 4 + ["b"] * 4 + ["c"] * 3 + ["d"],
         "response_mask": [[1, 1, 0]] * 3 + [[0, 0, 0]] + [[1, 1, 1]] * 8,
         "rm_scores": [[0, 1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]] + [[0, 0, 1]] * 4
         + [[0, 0, 1], [0, 0, 0], [0, 0, 0.5], [0, 0, 1]]},
        {"estimator": "grpo"}, {},
        ("singleton_group", "all_equal_group", "group_size_mismatch", "score_on_masked_position",
         "row_without_actor_tokens")),
    "KL shaping": (
        {"uid": ["a", "a", "b", "b"], "response_mask": [[1, 1]] * 4, "score": [1.0, 0.0, -0.001, 0.5],
         "old_log_probs": [[-0.5, -0.5], [-0.5, -0.5], [-1.0, -1.0], [-0.5, -0.5]],
         "ref_log_prob": [[-0.6, -0.6], [-0.6, -0.6], [-0.5, -0.5], [-0.6, -0.6]]},
        {"estimator": "grpo", "kl_coef": 0.1}, {"kl_coef": 0.1}, ("kl_raises_reward", "kl_flips_sign")),
    "rejection and tool rewards": (
        {"uid": ["a", "a", "b", "b"], "response_mask": [[0, 0], [1, 1], [1, 1], [1, 1]], "loss_mask": [[1, 1]] * 4,
         "score": [1.0, 0.0, 1.0, 1.0], "tool_rewards": [[0.5], [0.0], [0.2], [0.1]]},
        {"estimator": "grpo"}, {}, ("row_fully_rejected", "tool_rewards_not_in_score", "all_equal_group")),
    "uids across files": (
        [{"uid": ["a", "b"], "response_mask": [[1]] * 2, "score": [1.0, 0.0]},
         {"uid": ["a", "b"], "response_mask": [[1]] * 2, "score": [0.0, 1.0]}],
        {"estimator": "grpo"}, {}, ("uid_spans_files",)),
    "uids verl merges": (
        {"uid": ["1", "1", "01", "01", "2", "2"], "response_mask": [[1]] * 6, "score": [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]},
        {"estimator": "grpo_vectorized"}, {}, ("uid_merge_grpo_vectorized",)),
    "credit across a mask": (
        {"response_mask": [[1, 0, 1], [1, 1, 1]], "rm_scores": [[0, 0, 1], [0, 0, 1]]},
        {"estimator": "reinforce_plus_plus"}, {}, ("credit_reset_at_mask",)),
    "session keys": (
        {"uid": ["a_b", "a_b", "a", "a", "z", "z"], "session_id": ["c", "d", "b_c", "e", "b_c", "x"],
         "output_index": [0, 0, 1, 0, 0, 0], "response_mask": [[1, 1]] * 6, "score": [1.0, 0.0, 0.5, 0.25, 1.0, 1.0]},
        {"estimator": "grpo"}, {}, ("session_key_collision",)),
}


@pytest.mark.parametrize("case", CASES)
def test_compute_and_inspect_word_a_code_alike(tmp_path, case):
    columns, settings, inspect_settings, codes = CASES[case]
    parts = columns if isinstance(columns, list) else [columns]
    paths = [write(tmp_path / f"part{i}.parquet", part, types={"output_index": pa.int64()})
             for i, part in enumerate(parts)]
    report = rladv_cli.compute_file(paths, output=tmp_path / "out.parquet", device="cpu", **settings)
    checklist = inspect(paths, estimator=settings["estimator"], **inspect_settings)
    warned = {w.code: w.message for w in report.warnings}
    listed = {c.code: c.message for c in checklist.checks if c.status != "pass"}
    for code in codes:
        assert code in warned and warned[code] == listed.get(code), code


def test_compute_and_inspect_hold_the_declared_row_facts_alike(tmp_path, monkeypatch):
    """Every fact of ``ROW_FACTS``, by its name and of its kind, in compute's row table and in inspect's row
    scalars of compute's output (whose loss_mask, advantages and token_weight are compute's): equal per row."""
    from rladv_cli.diagnose import checklist
    from rladv_cli.pipeline import driver

    held, build, summarise = {}, driver.build_report, checklist._summarise

    def build_report(run):
        held["compute"] = run.rows
        return build(run)

    def summary(ds, plan, est, rows, *rest):
        held["inspect"] = rows
        return summarise(ds, plan, est, rows, *rest)

    monkeypatch.setattr(driver, "build_report", build_report)
    monkeypatch.setattr(checklist, "_summarise", summary)
    path = write(tmp_path / "rows.parquet", {
        "uid": ["a", "a", "b", "b"], "response_mask": [[1, 0, 1], [1, 1, 1], [0, 0, 0], [1, 1, 0]],
        "loss_mask": [[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 1, 0]], "attention_mask": [[1, 1, 1]] * 3 + [[1, 1, 0]],
        "rm_scores": [[0, 0, 1], [0, 0, 0.5], [1, 0, 0], [0, 2, 0]],
        "old_log_probs": [[-0.5] * 3, [-0.7] * 3, [-1.0] * 3, [-0.2] * 3], "ref_log_prob": [[-0.6] * 3, [-0.6] * 3, [-0.5] * 3, [-0.6] * 3],
        "tool_rewards": [[0.5], [], [0.2, 0.1], [0.1]]})
    out = tmp_path / "rows.adv.parquet"
    rladv_cli.compute_file(path, output=out, device="cpu", estimator="reinforce_plus_plus", kl_coef=0.1, gamma=0.9,
                           loss_agg_mode="token-mean")
    inspect(out, estimator="reinforce_plus_plus", kl_coef=0.1)
    computed, scanned = held["compute"], held["inspect"]
    for name, fact in ROW_FACTS.items():
        a, b = np.asarray(computed[name], dtype=np.float64), scanned[name]
        assert np.allclose(a, b.astype(np.float64), rtol=1e-6, atol=0), name
        for values in (np.asarray(computed[name]), b):
            kind = {"bool": values.dtype == bool, "id": values.dtype.kind == "i", "float": values.dtype.kind == "f",
                    "count": np.array_equal(values, np.round(values))}[fact.kind]
            assert kind, (name, values.dtype)
