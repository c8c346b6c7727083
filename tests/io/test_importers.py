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
from conftest import DATA, assert_generator_writes_the_fixtures, assert_one_line_error, rladv

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
    ('{"input": "p", "score": 1.0, "step": "3"}\n', "line 1: step is '3'; verl writes the training step, an integer"),
    ('{"input": "p", "score": 1.0, "step": 1.5}\n', "line 1: step is 1.5; verl writes the training step"),
    ('{"input": "p", "score": 1, "step": 1, "hits": 1}\n{"input": "p", "score": 0, "step": 1}\n'
     '{"input": "p", "score": 0, "step": 1, "hits": "wrong"}\n',
     "line 3: hits is text where the lines before hold an integer; a field keeps one JSON type"),
    ('{"input": "p", "score": 1, "step": 1, "hits": true}\n{"input": "p", "score": 0, "step": 1, "hits": 0}\n',
     "line 2: hits is an integer where the lines before hold true/false"),
    ('{"input": "p", "score": 1, "step": 2, "acc": 1}\n',  # the good file 1.jsonl has acc true/false
     "line 1: acc is an integer where "),
    ('{"input": "p", "score": 1, "step": 1, "extra": {"k": 1}}\n{"input": "p", "score": 0, "step": 1, "extra": [1]}\n',
     "line 2: extra is a list where the lines before hold an object"),
])
def test_bad_lines_are_one_line_errors_and_nothing_is_written(tmp_path, text, message):
    assert_refused(tmp_path, "verl-jsonl", ROLLOUTS / "1.jsonl", "2.jsonl", text, message)


def test_carried_fields_keep_their_values_and_types(tmp_path):
    """Nulls, integers next to fractions, and nested values whose members change type are read as written:
    polars alone would make 1 the text "1" beside "x", and fail on objects of two shapes."""
    lines = [{"input": "p", "score": 1, "step": 2, "n": 1, "info": {"k": 1}, "tags": [1], "note": None},
             {"input": "p", "score": 0.5, "step": 2, "n": 2.5, "info": {"k": "x", "j": None}, "tags": ["a"]}]
    (tmp_path / "2.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    res = rladv("convert", "--from", "verl-jsonl", tmp_path / "2.jsonl", "-o", tmp_path / "o.parquet")
    assert res.exit_code == 0, res.output
    t = pq.read_table(tmp_path / "o.parquet")
    assert t.column_names == ["uid", "score", "step", "input", "n", "info", "tags", "note"]
    assert t["n"].type == pa.float64() and t["n"].to_pylist() == [1.0, 2.5]
    assert [json.loads(v) for v in t["info"].to_pylist()] == [lines[0]["info"], lines[1]["info"]]
    assert [json.loads(v) for v in t["tags"].to_pylist()] == [[1], ["a"]] and t["note"].null_count == 2
    assert t["score"].to_pylist() == [1.0, 0.5] and t["step"].to_pylist() == [2, 2]
    # a field a later file holds in another type: that file's line, and the file that held it first
    (tmp_path / "3.jsonl").write_text(json.dumps({**lines[0], "step": 3, "n": "many"}) + "\n")
    res = rladv("convert", "--from", "verl-jsonl", tmp_path, "-o", tmp_path / "p.parquet")
    assert res.exit_code == 2 and res.output == (f"Error: {tmp_path / '3.jsonl'}: line 1: n is text where "
                                                 f"{tmp_path / '2.jsonl'} holds a number; a field keeps one JSON "
                                                 "type through the log\n") and not (tmp_path / "p.parquet").exists()


def assert_refused(tmp_path, fmt, good, bad_name, text, message):
    """A folder of a good file and a bad one: one error line naming the bad file and ``message``, nothing written."""
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(good, folder / good.name)
    (folder / bad_name).write_text(text)
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", fmt, folder, "-o", out)
    assert res.exit_code == 2 and res.output.startswith(f"Error: {folder / bad_name}: {message}"), res.output
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


# ------------------------------------------------------------------------------------------------ nemo-rl
NEMO = DATA / "nemo_rl_rollouts"  # written by NeMo-RL's own Logger.log_batched_dict_as_jsonl
NEMO_COLUMNS = ("uid, step, idx, score, responses, response_mask, old_log_probs, rollout_log_probs, advantages, "
                "sample_loss_mask, input_lengths, content")


def nemo_lines(step: int) -> list[dict]:
    return [json.loads(line) for line in (NEMO / f"train_data_step{step}.jsonl").read_text().splitlines()]


def test_a_nemo_rl_dump_folder_converts_in_the_step_order_of_the_file_names(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(NEMO / "train_data_step1.jsonl", folder / "train_data_step10.jsonl")
    shutil.copy(NEMO / "train_data_step2.jsonl", folder / "train_data_step2.jsonl")
    (folder / "val_data_step1.jsonl").write_text("not NeMo-RL's train data\n")  # not a train_data_step file
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "nemo-rl", folder, "-o", out)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"{out}: 24 rows from 2 file(s); columns {NEMO_COLUMNS}"
    assert lines[1].startswith("  uid from the prompt's token ids (token_ids before the first token_loss_mask 1")
    assert "absent: values and the reference log-probs" in lines[1]
    t = pq.read_table(out)
    assert t["step"].to_pylist() == [2] * 12 + [10] * 12 and t["idx"].to_pylist() == list(range(12)) * 2
    # and a glob orders the same way
    res = rladv("convert", "--from", "nemo-rl", str(folder / "train_data_step*.jsonl"), "-o", tmp_path / "g.parquet")
    assert res.exit_code == 0 and pq.read_table(tmp_path / "g.parquet")["step"].to_pylist()[::12] == [2, 10]


def test_a_nemo_rl_row_is_its_line_unpadded_from_the_first_generated_token(tmp_path):
    out = tmp_path / "r.parquet"
    assert rladv("convert", "--from", "nemo-rl", NEMO, "-o", out).exit_code == 0
    t = pq.read_table(out)
    schema = {f.name: str(f.type) for f in t.schema}
    assert schema == {"uid": "string", "step": "int64", "idx": "int64", "score": "float", "responses": "list<element: int32>",
                      "response_mask": "list<element: int8>", "old_log_probs": "list<element: float>",
                      "rollout_log_probs": "list<element: float>", "advantages": "list<element: float>",
                      "sample_loss_mask": "float", "input_lengths": "int64", "content": "string"}
    rows = t.to_pylist()
    # the multi-turn line: step 1, idx 11, padded to 16; prompt 4 tokens, a tool observation (mask 0) inside
    line = nemo_lines(1)[11]
    assert line["input_lengths"] == [13] and len(line["token_ids"][0]) == 16
    assert line["token_loss_mask"][0] == [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0]
    row = rows[11]
    assert row["step"] == 1 and row["idx"] == 11 and row["score"] == 0.5 and row["input_lengths"] == 13
    assert row["responses"] == line["token_ids"][0][4:13]
    assert row["response_mask"] == [1, 1, 1, 1, 0, 0, 0, 1, 1]
    assert row["old_log_probs"] == line["prev_logprobs"][0][4:13]
    assert row["rollout_log_probs"] == line["generation_logprobs"][0][4:13]
    assert row["advantages"] == pytest.approx(line["advantages"][0][4:13], abs=1e-7)
    assert row["sample_loss_mask"] == 1.0 and json.loads(row["content"]) == line["content"][0]
    # every row: the token lists have one length, input_lengths - the prompt; uid equal within a prompt group
    for step in (1, 2):
        for entry, row in zip(nemo_lines(step), rows[12 * (step - 1):]):
            start = entry["token_loss_mask"][0].index(1)
            n = entry["input_lengths"][0] - start
            assert {len(row[c]) for c in ("responses", "response_mask", "old_log_probs", "rollout_log_probs",
                                          "advantages")} == {n}
            assert row["score"] == entry["rewards"][0] and row["sample_loss_mask"] == entry["sample_loss_mask"][0]
    uids = [r["uid"] for r in rows]
    assert [len(set(uids[g:g + 4])) for g in range(0, 24, 4)] == [1] * 6
    assert len(set(uids[0:12:4])) == 3 and uids[:12] == uids[12:]  # three prompts, the same ones in both steps
    assert [r["sample_loss_mask"] for r in rows].count(0.0) == 1


def test_rladv_replays_nemo_rl_advantages_and_inspects_the_conversion(tmp_path):
    out, computed, report = tmp_path / "r.parquet", tmp_path / "c.parquet", tmp_path / "report.json"
    assert rladv("convert", "--from", "nemo-rl", NEMO, "-o", out).exit_code == 0
    res = rladv("compute", out, "--estimator", "grpo", "--batch-key", "step", "-o", computed, "-q", "--report", report)
    assert res.exit_code == 0, res.output
    r = json.loads(report.read_text())
    assert r["inputs"]["sequence_level"] is False
    replay = r["replay"]
    assert replay["compared"] == ["advantages"] and replay["agree"] is False
    adv = replay["columns"]["advantages"]
    # the 4 groups with different rewards differ (NeMo-RL's leave-one-out baseline and std against verl's grpo);
    # the 2 groups with equal rewards agree (0 both ways)
    assert adv["rows_compared"] == 24 and adv["differing_rows"] == 16 and adv["length_mismatch_rows"] == 0
    assert replay["hint"].startswith("the estimator or its settings differ")
    # step 1, prompt 0, rewards 1, 0, 1, 0: NeMo-RL's (1 - 1/3) / sqrt((1/3 - 1/9) * 3/2); rladv's 0.5 / std
    nemo = pq.read_table(out)["advantages"].to_pylist()[0][0]
    ours = pq.read_table(computed)["advantages"].to_pylist()[0][0]
    assert nemo == pytest.approx((2 / 3) / ((1 / 3 - 1 / 9) * 1.5) ** 0.5, abs=1e-5)
    assert ours == pytest.approx(0.5 / ((1 / 3) ** 0.5 + 1e-6), abs=1e-5)
    res = rladv("inspect", out, "--json", "--estimator", "grpo", "--batch-key", "step")
    assert res.exit_code == 0, res.output
    seen = json.loads(res.output)
    assert seen["rows"] == 24 and seen["invalid_rows"] == 0 and seen["verdict"]["groups"] == 6
    assert seen["verdict"]["actor_tokens"] == sum(sum(m) for m in pq.read_table(out)["response_mask"].to_pylist())


def _nemo_line(**change) -> str:
    entry = nemo_lines(1)[0]
    for k, v in change.items():
        if v is None:
            entry.pop(k)
        else:
            entry[k] = v
    return json.dumps(entry) + "\n"


@pytest.mark.parametrize("text, message", [
    (_nemo_line() + _nemo_line()[:300], "line 2: not JSON (the file ends inside it: truncated?)"),
    (_nemo_line() + _nemo_line(token_loss_mask=None), "line 2: no token_loss_mask (NeMo-RL's GRPO writes rewards, "
                                                      "input_lengths, token_ids, token_loss_mask"),
    (_nemo_line(token_ids=[list(range(11))]), "line 1: token_ids has 11 positions, fewer than input_lengths 12"),
    (_nemo_line() * 2 + _nemo_line(token_loss_mask=[[0] * 12 + [1] * 4]),
     "line 3: token_loss_mask has no 1 within input_lengths 12: no generated token, so no response"),
    (_nemo_line(token_loss_mask=[[0] * 8 + [2] * 8]), "line 1: token_loss_mask holds 2; masks are 0 or 1"),
    (_nemo_line(rewards=1.0), "line 1: rewards is 1.0; NeMo-RL writes a list of one number (a batch of one)"),
    (_nemo_line(input_lengths=[12, 13]), "line 1: input_lengths is [12, 13]; NeMo-RL writes a list of one"),
])
def test_bad_nemo_rl_lines_are_one_line_errors_and_nothing_is_written(tmp_path, text, message):
    assert_refused(tmp_path, "nemo-rl", NEMO / "train_data_step1.jsonl", "train_data_step2.jsonl", text, message)


def test_a_nemo_rl_file_needs_its_name_for_the_step(tmp_path):
    other = tmp_path / "dump.jsonl"
    shutil.copy(NEMO / "train_data_step1.jsonl", other)
    res = rladv("convert", "--from", "nemo-rl", other, "-o", tmp_path / "r.parquet")
    assert res.exit_code == 2 and "not named train_data_step{N}.jsonl" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = rladv("convert", "--from", "nemo-rl", empty, "-o", tmp_path / "r.parquet")
    assert res.exit_code == 2 and "folder holds no train_data_step*.jsonl file" in res.output


@pytest.mark.slow
def test_the_nemo_rl_fixtures_are_what_nemo_rl_writes(tmp_path):
    """tests/data/make_nemo_rl_rollouts.py, run with NeMo-RL's source (NEMO_RL_SRC, see the script), writes
    exactly the committed files."""
    import os
    from pathlib import Path

    src = os.environ.get("NEMO_RL_SRC")
    if not src or not (Path(src) / "nemo_rl" / "utils" / "logger.py").is_file():
        pytest.skip("NEMO_RL_SRC is not NeMo-RL's source (tests/data/make_nemo_rl_rollouts.py says how)")
    assert assert_generator_writes_the_fixtures("make_nemo_rl_rollouts.py", tmp_path, "*.jsonl") == [
        Path("train_data_step1.jsonl"), Path("train_data_step2.jsonl")]


def test_nemo_rl_optional_fields_are_carried_and_batches_stream(tmp_path, monkeypatch):
    from rladv_cli.io import importers
    from rladv_cli.io.importers import common

    folder = tmp_path / "logs"
    folder.mkdir()
    for step in (1, 2):  # dynamic sampling's filtered_rewards and an agent_ref, as grpo.py logs them
        lines = [{"agent_ref": [{"name": f"agent{e['idx'] % 2}"}], **e, "filtered_rewards": e["rewards"]}
                 for e in nemo_lines(step)]
        (folder / f"train_data_step{step}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in lines))
    whole = importers.convert_log("nemo-rl", [NEMO], tmp_path / "whole.parquet")
    monkeypatch.setattr(common, "TOKEN_CHUNK_ROWS", 5)  # 5-row batches: the uids of later slices too
    done = importers.convert_log("nemo-rl", [folder], tmp_path / "r.parquet")
    assert done.rows == 24 and done.columns == whole.columns[:-1] + ["agent_ref", "content", "filtered_rewards"]
    t, w = pq.read_table(tmp_path / "r.parquet"), pq.read_table(tmp_path / "whole.parquet")
    assert t.select(w.column_names).equals(w)
    assert t["agent_ref"].to_pylist()[:2] == ['{"name": "agent0"}', '{"name": "agent1"}']
    assert t["filtered_rewards"].to_pylist() == t["score"].to_pylist()


TRL = DATA / "trl_completions"  # TRL's table and its own advantages: tests/data/make_trl_completions.py


def test_a_trl_completion_log_converts_and_its_advantages_replay_under_trl(tmp_path):
    out, report = tmp_path / "t.parquet", tmp_path / "r.json"
    res = rladv("convert", "--from", "trl", TRL, "-o", out)
    assert res.exit_code == 0, res.output
    assert "the sum of accuracy_reward, format_reward" in res.output and "sequence level" in res.output
    t = pq.read_table(out)
    assert t.column_names == ["uid", "step", "score", "advantages", "prompt", "completion", "accuracy_reward",
                              "format_reward", "solution"]
    src = [pq.read_table(TRL / f"completions_0000{s}.parquet") for s in (1, 2)]
    assert t["step"].to_pylist() == [1] * 16 + [2] * 16
    uids = t["uid"].to_pylist()
    assert [len(set(uids[g:g + 4])) for g in range(0, 32, 4)] == [1] * 8 and len(set(uids)) == 4
    # the score is TRL's nansum of its reward columns: row 5's format reward is None (NaN)
    acc = src[0]["accuracy_reward"].to_pylist()
    fmt = src[0]["format_reward"].to_pylist()
    assert t["score"].to_pylist()[5] == pytest.approx(acc[5]) and fmt[5] != fmt[5]
    assert t["score"].to_pylist()[:5] == pytest.approx([a + f for a, f in zip(acc[:5], fmt[:5])])
    res = rladv("compute", out, "--convention", "trl", "--estimator", "grpo", "--batch-key", "step",
                "--strict-replay", "-o", tmp_path / "c.parquet", "-q", "--report", report)
    assert res.exit_code == 0, res.output
    r = json.loads(report.read_text())
    assert r["inputs"]["sequence_level"] is True and r["groups"]["formed_by"] == "blocks of 4 rows"
    assert r["replay"]["agree"] and r["replay"]["columns"]["advantages"]["max_abs_diff"] == 0.0
    # verl's grpo (epsilon 1e-6 against TRL's 1e-4) does not reproduce TRL's numbers
    res = rladv("compute", out, "--estimator", "grpo", "--batch-key", "step", "--strict-replay",
                "-o", tmp_path / "v.parquet", "-q")
    assert res.exit_code == 1 and "advantages" in res.output


def _trl_file(path, **columns):
    base = {"step": pa.array([1, 1], pa.int64()), "prompt": ["p", "p"], "completion": ["a", "b"],
            "accuracy_reward": [1.0, 0.0], "advantage": [0.7, -0.7]}
    pq.write_table(pa.table({k: v for k, v in {**base, **columns}.items() if v is not None}), path)


@pytest.mark.parametrize("columns, message", [
    ({"advantage": None}, "has no advantage (TRL's GRPOTrainer.log writes"),
    ({"accuracy_reward": ["x", "y"]}, "has no number column between completion and advantage"),
])
def test_bad_trl_logs_are_one_line_errors_and_nothing_is_written(tmp_path, columns, message):
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(TRL / "completions_00001.parquet", folder)
    _trl_file(folder / "completions_00002.parquet", **columns)
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "trl", folder, "-o", out)
    assert res.exit_code == 2 and message in res.output and len(res.output.strip().splitlines()) == 1, res.output
    assert not out.exists()


def test_an_unscorable_trl_completion_gets_a_null_score_that_only_trl_reads(tmp_path):
    """Every reward of row 1 is missing (TRL's unscorable completion): a null score, which --convention trl leaves
    out of its block (the other row alone: advantage 0 for both) and verl's convention refuses, naming the row."""
    folder = tmp_path / "logs"
    folder.mkdir()
    _trl_file(folder / "completions_00001.parquet", accuracy_reward=[1.0, float("nan")], advantage=[0.0, 0.0])
    out = tmp_path / "r.parquet"
    assert rladv("convert", "--from", "trl", folder, "-o", out).exit_code == 0
    assert pq.read_table(out)["score"].to_pylist() == [1.0, None]
    res = rladv("compute", out, "--convention", "trl", "--estimator", "grpo", "--strict-replay",
                "-o", tmp_path / "c.parquet", "-q")
    assert res.exit_code == 0, res.output
    assert pq.read_table(tmp_path / "c.parquet")["advantages"].to_pylist() == [[0.0], [0.0]]
    assert_one_line_error(rladv("compute", out, "--estimator", "grpo", "-o", tmp_path / "v.parquet"),
                          "is null", row=1, column="score")


@pytest.mark.peers
def test_the_trl_fixtures_are_what_trl_computes(tmp_path, monkeypatch):
    """tests/data/make_trl_completions.py, with TRL's source (RLADV_PEER_SRC), writes the committed files."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_trl", DATA / "make_trl_completions.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "OUT", tmp_path)
    module.main()
    for name in ("completions_00001.parquet", "completions_00002.parquet"):
        made, kept = pq.read_table(tmp_path / name), pq.read_table(TRL / name)
        assert made.schema == kept.schema and str(made.to_pylist()) == str(kept.to_pylist()), name  # NaN as text


@pytest.mark.slow
def test_the_convert_memory_benchmark_runs(tmp_path):
    """bench/convert_memory.py (docs/dumps.md, "Converting a large log") on a 5 MB dump: every run reported."""
    import os
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "RLADV_BENCH_DATA": str(tmp_path)}
    p = subprocess.run([sys.executable, str(root / "bench" / "convert_memory.py"), "--gb", "0.005"], env=env,
                       capture_output=True, text=True, check=True)
    names = [line.split("  ")[0] for line in p.stdout.splitlines()[1:]]
    assert names == ["import", "read_ndjson 0.005 GB", "convert 0.005 GB (1 files)"], p.stdout
