"""Trainers' logs in (docs/dumps.md "Trainers' logs"): verl's rollout JSONL, written by verl's own
``_write_generations`` (tests/data/make_verl_rollouts.py), converted and computed at sequence level; bad lines
are one-line errors naming file and line, and nothing is written."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rladv_cli
from conftest import DATA, rladv

ROLLOUTS = DATA / "verl_rollouts"


def test_a_verl_rollout_folder_converts_in_step_order_and_computes(tmp_path):
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "verl-jsonl", ROLLOUTS, "-o", out)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"{out}: 24 rows from 2 file(s); columns uid, score, step, input, output, gts, acc"
    assert lines[1].startswith("  uid from input (the prompt text); no token lists: rladv computes it at sequence level")
    t = pq.read_table(out)
    assert t["step"].to_pylist() == [1] * 12 + [2] * 12
    assert t["uid"].to_pylist()[:4] == ["What is 2+2?"] * 4 and t.schema.field("score").type == pa.float32()
    first = json.loads((ROLLOUTS / "1.jsonl").read_text().splitlines()[0])
    assert t.slice(0, 1).to_pylist()[0] == {**first, "uid": first["input"]}
    # sequence level: one position per row; grpo's advantages are the group z-scores of the scores
    computed, report = rladv_cli.compute(t, estimator="grpo", batch_key="step", device="cpu")
    assert report.inputs.sequence_level and report.tokens.actor == 24
    adv = [a[0] for a in computed["advantages"].to_pylist()]
    z = 0.5 / ((1 / 3) ** 0.5 + 1e-6)  # scores 1, 0, 1, 0: (R - 0.5) / (unbiased std + eps)
    assert adv[:4] == pytest.approx([z, -z, z, -z], abs=1e-6)
    assert adv[4:8] == [0.0] * 4 and [m for m in computed["response_mask"].to_pylist()] == [[1]] * 24
    steps = report.verdict.steps
    assert [(s.step, s.all_zero_share, s.all_top_share) for s in steps] == [
        ("step=1", 0.0, pytest.approx(1 / 3)), ("step=2", pytest.approx(1 / 3), pytest.approx(1 / 3))]


def test_sequence_level_rows_compute_with_every_outcome_estimator(tmp_path):
    t = pa.table({"uid": ["a", "a", "b", "b"], "score": pa.array([1.0, 0.0, 0.5, 0.5], pa.float32())})
    for estimator in ("grpo", "rloo", "opo", "gpg", "reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        out, report = rladv_cli.compute(t, estimator=estimator, device="cpu")
        assert out["response_mask"].to_pylist() == [[1]] * 4 and report.inputs.sequence_level, estimator
    with pytest.raises(rladv_cli.InputError, match="values"):
        rladv_cli.compute(t, estimator="gae", device="cpu")
    # a token list without a mask is still an error: only a score and no token lists is sequence-level
    bad = t.append_column("rm_scores", pa.array([[1.0]] * 4, pa.list_(pa.float32())))
    with pytest.raises(rladv_cli.InputError, match="response_mask"):
        rladv_cli.compute(bad, estimator="grpo", device="cpu")


@pytest.mark.parametrize("text, message", [
    ('{"input": "p", "output": "o", "gts": "g", "score": 1.0, "step": 1}\n{"input": "p", "scor',
     "line 2: not JSON (the file ends inside it: truncated?)"),
    ('{"input": "p", "score": 1.0, "step": 1}\n[1, 2]\n', "line 2: not a JSON object"),
    ('{"input": "p", "score": 1.0, "step": 1}\n{"input": "p", "step": 1}\n', "line 2: no score (verl writes"),
    ('{"input": "p", "score": "high", "step": 1}\n', "line 1: score is 'high'; a number is needed"),
])
def test_bad_lines_are_one_line_errors_and_nothing_is_written(tmp_path, text, message):
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(ROLLOUTS / "1.jsonl", folder / "1.jsonl")
    (folder / "2.jsonl").write_text(text)
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "verl-jsonl", folder, "-o", out)
    assert res.exit_code == 2 and res.output.startswith(f"Error: {folder / '2.jsonl'}: {message}"), res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_convert_from_needs_an_output_and_no_batch_options(tmp_path):
    assert "give -o OUT.parquet" in rladv("convert", "--from", "verl-jsonl", ROLLOUTS).output
    res = rladv("convert", "--from", "verl-jsonl", ROLLOUTS, "-o", tmp_path / "o.parquet", "--step", "3")
    assert res.exit_code == 2 and "--step is for a saved batch" in res.output
    res = rladv("convert", ROLLOUTS / "1.jsonl", ROLLOUTS / "2.jsonl")
    assert res.exit_code == 2 and "give --from FORMAT" in res.output


@pytest.mark.verl
def test_the_fixtures_are_what_verl_writes(tmp_path):
    """tests/data/make_verl_rollouts.py run with verl 0.9.1 writes exactly the committed files."""
    pytest.importorskip("verl.trainer.ppo.ray_trainer")
    script = (DATA / "make_verl_rollouts.py").read_text().replace(
        'Path(__file__).resolve().parent / "verl_rollouts"', repr(str(tmp_path)))
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True)
    for name in ("1.jsonl", "2.jsonl"):
        assert (tmp_path / name).read_bytes() == (ROLLOUTS / name).read_bytes(), name
