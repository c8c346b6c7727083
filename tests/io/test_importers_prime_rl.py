"""prime-rl's episode log in (docs/dumps.md "Trainers' logs"): ``rollouts/step_N/train/effective/traces.jsonl``
written by prime-rl's ``FileMonitor`` from verifiers' ``Episode.to_record()`` with prime-rl's own GRPO advantages
(tests/data/make_prime_rl_rollouts.py); one row per trainable branch, replayed against rladv's Dr. GRPO; bad lines
are one-line errors naming file and line, and nothing is written."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import DATA, assert_generator_writes_the_fixtures, rladv

PRIME = DATA / "prime_rl_rollouts"  # FileMonitor.log_episodes's files
STEP1 = PRIME / "rollouts" / "step_1" / "train" / "effective" / "traces.jsonl"
STEP2 = PRIME / "rollouts" / "step_2" / "train" / "effective" / "traces.jsonl"
COLUMNS = ("uid, step, score, responses, response_mask, rollout_log_probs, advantages, episode_id, trace_id, branch, "
           "agent, env, dispatch_step, stop_condition")


def episodes(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_prime_rl_run_folder_converts_its_effective_episodes_in_step_order(tmp_path):
    out = tmp_path / "p.parquet"
    res = rladv("convert", "--from", "prime-rl", PRIME, "-o", out)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"{out}: 15 rows from 2 file(s); columns {COLUMNS}"  # not step 1's all/ subset
    assert lines[1].startswith("  uid from group.id (the episode's rollout group); score from the trace's reward")
    assert "replayed against rladv's: compute --estimator grpo --no-norm-adv-by-std" in lines[1]
    t = pq.read_table(out)
    assert t["step"].to_pylist() == [1] * 6 + [2] * 9
    assert t["uid"].to_pylist() == ["group-1-A"] * 4 + ["group-1-B"] * 2 + ["group-2-C"] * 5 + ["group-2-E"] * 4
    # not trained on, so not logged: B's errored trace and B's trace at the group mean (advantage 0); E's judge
    assert "b1-solver" not in t["trace_id"].to_pylist() and "b3-solver" not in t["trace_id"].to_pylist()
    assert set(t["agent"].to_pylist()) == {"solver"} and set(t["dispatch_step"].to_pylist()) == {0, 1}


def _expected(trace: dict, branch: list[int]) -> dict:
    """A branch by hand: its nodes' tokens and masks concatenated, per-sampled-token values spread on the mask."""
    nodes = [trace["nodes"][i] for i in branch]
    tokens = [x for n in nodes for x in n["token_ids"]]
    mask = [m for n in nodes for m in n["mask"]]

    def spread(name):
        out = []
        for n in nodes:
            values = iter(n.get(name) or [])
            out += [next(values) if m else 0.0 for m in n["mask"]]
        return out

    return {"tokens": tokens, "mask": mask, "logprobs": spread("logprobs"), "advantages": spread("advantages")}


def test_a_prime_rl_row_is_a_branch_from_its_first_trained_token(tmp_path):
    out = tmp_path / "p.parquet"
    assert rladv("convert", "--from", "prime-rl", PRIME, "-o", out).exit_code == 0
    rows = pq.read_table(out).to_pylist()
    # the multi-turn trace a1: user, assistant (sampled), tool, assistant (sampled)
    a1 = episodes(STEP1)[1]["traces"][0]
    assert [n["message"]["role"] for n in a1["nodes"]] == ["user", "assistant", "tool", "assistant"]
    want = _expected(a1, [0, 1, 2, 3])
    start = want["mask"].index(True)
    assert start == len(a1["nodes"][0]["token_ids"]) + 3  # the prompt and the assistant's template scaffold
    row = rows[1]
    assert row["responses"] == want["tokens"][start:] and row["response_mask"] == [int(m) for m in want["mask"][start:]]
    assert row["response_mask"] == [1, 1, 1] + [0] * 7 + [1, 1]
    assert row["rollout_log_probs"] == pytest.approx(want["logprobs"][start:])
    assert row["advantages"] == pytest.approx(want["advantages"][start:]) and row["advantages"][0] == -0.25
    # verifiers' Trace.reward: correct 0 x 1 + format 1 x 0.5
    assert row["score"] == 0.5 and a1["rewards"] == {"correct": {"score": 0.0, "weight": 1.0},
                                                     "format": {"score": 1.0, "weight": 0.5}}
    assert (row["episode_id"], row["trace_id"], row["branch"], row["env"], row["stop_condition"]) == (
        "episode-1-a1", "a1-solver", 0, "gsm8k", "stop")
    # the forked trace c0: branches 0-1-2-3 and 0-1-4-5 share node 1, which trains in the first branch only
    c0 = episodes(STEP2)[0]["traces"][0]
    assert [n.get("parent") for n in c0["nodes"]] == [None, 0, 1, 2, 1, 4]
    first, second = rows[6], rows[7]
    assert [(r["trace_id"], r["branch"]) for r in (first, second)] == [("c0-solver", 0), ("c0-solver", 1)]
    want = _expected(c0, [0, 1, 4, 5])
    assert second["responses"] == want["tokens"][-3:] and second["response_mask"] == [1, 1, 1]
    assert second["advantages"] == [0.625] * 3 and first["advantages"][-3:] == [0.0, 0.625, 0.625]
    assert len(first["responses"]) == sum(len(c0["nodes"][i]["token_ids"]) for i in (1, 2, 3)) - 3


def test_rladv_replays_prime_rl_advantages_as_dr_grpo(tmp_path):
    """prime-rl's GRPO is reward minus the group mean: rladv's --no-norm-adv-by-std. Step 1 agrees exactly; in
    step 2 the group with a forked trace differs (prime-rl averages over traces, rladv over rows)."""
    out, report = tmp_path / "p.parquet", tmp_path / "r.json"
    assert rladv("convert", "--from", "prime-rl", STEP1, "-o", out).exit_code == 0
    res = rladv("compute", out, "--estimator", "grpo", "--no-norm-adv-by-std", "--strict-replay",
                "-o", tmp_path / "c.parquet", "-q", "--report", report)
    assert res.exit_code == 0, res.output
    replay = json.loads(report.read_text())["replay"]
    assert replay["agree"] and replay["columns"]["advantages"]["max_abs_diff"] == 0.0
    # verl's grpo (divided by the group std) does not
    res = rladv("compute", out, "--estimator", "grpo", "--strict-replay", "-o", tmp_path / "v.parquet", "-q")
    assert res.exit_code == 1 and "advantages" in res.output
    whole = tmp_path / "w.parquet"
    assert rladv("convert", "--from", "prime-rl", PRIME, "-o", whole).exit_code == 0
    res = rladv("compute", whole, "--estimator", "grpo", "--no-norm-adv-by-std", "-o", tmp_path / "d.parquet", "-q",
                "--report", report)
    assert res.exit_code == 0, res.output
    adv = json.loads(report.read_text())["replay"]["columns"]["advantages"]
    assert adv["differing_rows"] == 5 and adv["first_rows"][0].endswith(":6")  # group C's 5 rows, from row 6
    res = rladv("inspect", whole, "--json", "--estimator", "grpo")
    assert res.exit_code == 0, res.output
    seen = json.loads(res.output)
    assert seen["rows"] == 15 and seen["invalid_rows"] == 0 and seen["verdict"]["groups"] == 4


def test_the_all_subset_has_no_advantages_and_converts_without_them(tmp_path):
    out = tmp_path / "a.parquet"
    res = rladv("convert", "--from", "prime-rl", PRIME / "rollouts/step_1/train/all/traces.jsonl", "-o", out)
    assert res.exit_code == 0, res.output
    assert "no advantages (not the effective subset?), so nothing to replay" in res.output
    t = pq.read_table(out)
    assert "advantages" not in t.column_names and t.num_rows == 7  # 8 arrivals, one errored
    res = rladv("convert", "--from", "prime-rl", PRIME / "rollouts/step_1/train/all/traces.jsonl", STEP1,
                "-o", tmp_path / "m.parquet")
    assert res.exit_code == 2 and "differ from" in res.output and not (tmp_path / "m.parquet").exists()


def _line(root: dict | None = None, **change) -> str:
    """The first episode with node 1 changed (``change``) and node 0 (``root``)."""
    entry = episodes(STEP1)[0]
    entry["traces"][0]["nodes"][0].update(root or {})
    node = entry["traces"][0]["nodes"][1]
    for k, v in change.items():
        if k == "group":
            entry.pop("group")
        else:
            node[k] = v
    return json.dumps(entry) + "\n"


@pytest.mark.parametrize("text, message", [
    (_line() + _line()[:500], "line 2: not JSON (the file ends inside it: truncated?)"),
    (_line() + _line(group=None), "line 2: no group.id (prime-rl's orchestrator stamps every train episode"),
    (_line(mask=[True]), "line 1: trace 0: node 1: mask is not 9 (token_ids) true/false values"),
    (_line(logprobs=[-0.5]), "line 1: trace 0: node 1: logprobs is not 6 numbers (one per sampled token"),
    (_line(advantages=[0.1] * 7), "line 1: trace 0: node 1: advantages is not 6 numbers"),
    (_line(parent=1), "line 1: trace 0: node 1: parent is 1, not another node's index"),
    (_line(root={"parent": 1}), "line 1: trace 0: nodes 0 -> 1 -> 0 form a loop of parent links (a trace's nodes "
                                "form a tree)"),  # no node is a leaf: no branch would be read, and none was said
])
def test_bad_prime_rl_lines_are_one_line_errors_and_nothing_is_written(tmp_path, text, message):
    step = tmp_path / "rollouts"
    for n, body in ((1, STEP1.read_text()), (2, text)):
        folder = step / f"step_{n}" / "train" / "effective"
        folder.mkdir(parents=True)
        (folder / "traces.jsonl").write_text(body)
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "prime-rl", step, "-o", out)
    bad = step / "step_2" / "train" / "effective" / "traces.jsonl"
    assert res.exit_code == 2 and res.output.startswith(f"Error: {bad}: {message}"), res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()


def test_a_prime_rl_file_needs_its_step_folder(tmp_path):
    shutil.copy(STEP1, tmp_path / "traces.jsonl")
    res = rladv("convert", "--from", "prime-rl", tmp_path / "traces.jsonl", "-o", tmp_path / "r.parquet")
    assert res.exit_code == 2 and "is not inside a step_N folder" in res.output
    (tmp_path / "empty").mkdir()
    res = rladv("convert", "--from", "prime-rl", tmp_path / "empty", "-o", tmp_path / "r.parquet")
    assert res.exit_code == 2 and "folder holds no traces.jsonl file" in res.output


@pytest.mark.slow
def test_the_prime_rl_fixtures_are_what_prime_rl_writes(tmp_path):
    """tests/data/make_prime_rl_rollouts.py, run with prime-rl's and verifiers' source (PRIME_RL_SRC,
    VERIFIERS_SRC) and orjson, writes exactly the committed files."""
    vf, prl = os.environ.get("VERIFIERS_SRC"), os.environ.get("PRIME_RL_SRC")
    if not vf or not prl or not (Path(prl) / "prime_rl" / "monitors" / "file.py").is_file():
        pytest.skip("PRIME_RL_SRC/VERIFIERS_SRC are not prime-rl's and verifiers' source (see the script)")
    if importlib.util.find_spec("orjson") is None and "PYTHONPATH" not in os.environ:
        pytest.skip("orjson (prime-rl's JSON writer) is not importable")
    assert len(assert_generator_writes_the_fixtures("make_prime_rl_rollouts.py", tmp_path, "traces.jsonl")) == 3
