"""The verdict on the command line (docs/debugging.md "The verdict"): first on the terminal, in --json and the
report, --fail-on's exit codes, per step, and the quieter summary (warnings only where they change the numbers)."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from conftest import SAMPLES, copy_sample, read, rladv


def with_column(src, dst, name, values):
    t = pq.read_table(src)
    i = t.schema.get_field_index(name)
    pq.write_table(t.set_column(i, name, values) if i >= 0 else t.append_column(name, values), dst)
    return dst


@pytest.fixture
def zero(tmp_path):
    """sample_data/groups.parquet with every score 0."""
    t = read(SAMPLES / "groups.parquet")
    return with_column(SAMPLES / "groups.parquet", tmp_path / "zero.parquet", "score",
                       pa.array([0.0] * t.num_rows, pa.float32()))


@pytest.fixture
def own_uid(tmp_path):
    t = read(SAMPLES / "groups.parquet")
    return with_column(SAMPLES / "groups.parquet", tmp_path / "own.parquet", "uid",
                       pa.array([f"r{i}" for i in range(t.num_rows)]))


@pytest.fixture
def no_uid(tmp_path):
    path = tmp_path / "nouid.parquet"
    pq.write_table(read(SAMPLES / "groups.parquet").drop_columns(["uid"]), path)
    return path


def test_the_verdict_comes_first_on_the_terminal(zero):
    res = rladv("inspect", zero, env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[1].startswith("verdict FAIL: 0% of actor tokens (0 of 65 rows, 0 of 17 groups) carry learning signal")
    assert "all_equal_group: 16 group(s) score the same on every row" in lines[2] and "16 all 0: too hard?" in lines[2]
    assert lines[3].strip().startswith(f"e.g. rladv inspect {zero} --uid ")
    assert "every reward is 0" in res.stdout


def test_every_row_its_own_uid_fails_with_the_cause_named(own_uid):
    res = rladv("inspect", own_uid, "--json")
    v = json.loads(res.stdout)["verdict"]
    assert v["level"] == "fail" and v["signal_share"] == 0 and v["groups"] == 65
    assert [(c["code"], c["groups"]) for c in v["causes"]] == [("singleton_group", 65)]
    assert any("every row has its own uid: is the group column the prompt id?" in h for h in v["hints"])


def test_fail_on_sets_the_exit_code_of_inspect(zero):
    assert rladv("inspect", zero).exit_code == 0  # default: never
    res = rladv("inspect", zero, "--fail-on", "fail")
    assert res.exit_code == 1
    assert res.stderr.strip().startswith("Verdict FAIL reached --fail-on fail: 0% of actor tokens")
    assert len(res.stderr.strip().splitlines()) == 1
    clean = SAMPLES / "multiturn.parquet"  # a warning verdict at most
    assert rladv("inspect", clean, "--fail-on", "fail").exit_code == 0
    # groups.parquet: 17% of its tokens in all-equal groups, a note at the default 50%, a warning at 10%
    assert rladv("inspect", SAMPLES / "groups.parquet", "--estimator", "grpo", "--fail-on", "warn").exit_code == 0
    strict = rladv("inspect", SAMPLES / "groups.parquet", "--estimator", "grpo", "--fail-on", "warn",
                   "--threshold", "all_equal_group=0.1")
    assert strict.exit_code == 1 and strict.stderr.startswith("Verdict WARN reached --fail-on warn")
    assert rladv("inspect", zero, "--fail-on", "sometimes").exit_code == 2


def test_fail_on_sets_the_exit_code_of_compute_after_writing(zero, tmp_path):
    out, report = tmp_path / "o.parquet", tmp_path / "r.json"
    res = rladv("compute", zero, "--estimator", "grpo", "-o", out, "--report", report, "--fail-on", "fail")
    assert res.exit_code == 1 and "Verdict FAIL reached --fail-on fail" in res.stderr
    assert out.exists() and json.loads(report.read_text())["verdict"]["level"] == "fail"
    ok = rladv("compute", SAMPLES / "groups.parquet", "--estimator", "grpo", "-o", tmp_path / "g.parquet",
               "--fail-on", "fail")
    assert ok.exit_code == 0, ok.output


def test_compute_and_inspect_agree_on_an_rladv_output(tmp_path):
    src = copy_sample(tmp_path, "multiturn.parquet")
    out, report = tmp_path / "o.parquet", tmp_path / "r.json"
    args = ("--kl-coef", "0.05", "--rollout-rs", "token_k1", "--rollout-rs-threshold", "1.5")
    assert rladv("compute", src, "--estimator", "grpo", *args, "-o", out, "--report", report).exit_code == 0
    computed = json.loads(report.read_text())["verdict"]
    inspected = json.loads(rladv("inspect", out, "--estimator", "grpo", "--kl-coef", "0.05", "--json").stdout)["verdict"]
    assert inspected["basis"] == "advantages" and computed["basis"] == "advantages"
    for key in ("actor_tokens", "signal_tokens", "signal_rows", "groups", "signal_groups"):
        assert inspected[key] == computed[key], key
    assert [(c["code"], c["tokens"]) for c in inspected["causes"]] == [(c["code"], c["tokens"]) for c in computed["causes"]]
    assert {c["code"] for c in computed["causes"]} == {"kl_only_group", "rejected"}


def test_no_uid_is_a_finding_in_inspect_validate_and_for_a_group_estimator(no_uid):
    res = rladv("inspect", no_uid, "--json")
    data = json.loads(res.stdout)
    assert data["verdict"]["level"] == "warn"
    assert {c["code"]: c["status"] for c in data["checks"]}["no_groups"] == "warn"
    res = rladv("inspect", no_uid, "--estimator", "grpo", "--fail-on", "fail")
    assert res.exit_code == 1 and "no uid column" in res.stdout
    res = rladv("validate", no_uid)
    assert res.exit_code == 0 and "note: no uid column: no groups, so grpo" in res.stdout
    assert "note" not in rladv("validate", no_uid, "--estimator", "gae").stdout


def test_the_verdict_per_step(tmp_path):
    t = read(SAMPLES / "groups.parquet")
    scores = t["score"].to_pylist()
    step = [0 if i < 32 else 1 for i in range(t.num_rows)]
    later = [s if i < 32 else 0.0 for i, s in enumerate(scores)]  # step 1's groups collapse to all 0
    path = tmp_path / "run.parquet"
    t = t.set_column(t.schema.get_field_index("score"), "score", pa.array(later, pa.float32()))
    pq.write_table(t.set_column(t.schema.get_field_index("step"), "step", pa.array(step, pa.int64())), path)
    res = rladv("inspect", path, "--batch-key", "step", "--json")
    assert res.exit_code == 0, res.output
    steps = json.loads(res.stdout)["verdict"]["steps"]
    assert [(s["step"], s["rows"]) for s in steps] == [("step=0", 32), ("step=1", 33)]
    # in key order, whichever step comes first in the file
    reordered = tmp_path / "reordered.parquet"
    pq.write_table(read(path).take(list(range(32, 65)) + list(range(32))), reordered)
    again = json.loads(rladv("inspect", reordered, "--batch-key", "step", "--json").stdout)["verdict"]["steps"]
    assert [(s["step"], s["rows"], s["signal_share"]) for s in again] == [
        (s["step"], s["rows"], s["signal_share"]) for s in steps]
    assert steps[1]["signal_share"] == 0 and steps[1]["all_zero_share"] == 1 and steps[1]["level"] == "fail"
    # each step's entry is the verdict of its rows inspected alone
    alone = tmp_path / "step0.parquet"
    pq.write_table(read(path).slice(0, 32), alone)
    v0 = json.loads(rladv("inspect", alone, "--json").stdout)["verdict"]
    assert (steps[0]["signal_share"], steps[0]["all_zero_share"], steps[0]["level"]) == (
        v0["signal_share"], v0["group_outcomes"]["all_zero"], v0["level"])
    assert steps[0]["signal_share"] > 0.5
    table = rladv("inspect", path, "--batch-key", "step", env={"COLUMNS": "120"}).stdout
    assert "verdict per step" in table
    out, report = tmp_path / "o.parquet", tmp_path / "r.json"
    assert rladv("compute", path, "--estimator", "grpo", "--batch-key", "step", "-o", out, "--report", report).exit_code == 0
    computed = json.loads(report.read_text())["verdict"]["steps"]
    assert [(s["step"], s["rows"], s["all_zero_share"]) for s in computed] == [
        (s["step"], s["rows"], s["all_zero_share"]) for s in steps]
    assert rladv("compute", reordered, "--estimator", "grpo", "--batch-key", "step", "-o", tmp_path / "r.parquet",
                 "--report", report).exit_code == 0
    assert json.loads(report.read_text())["verdict"]["steps"] == computed


def test_several_files_are_the_steps_without_a_batch_key(tmp_path, zero):
    """With --batch-key none (the files' step column would be the batch key otherwise) the files are one batch, as
    in compute: groups are per uid, so step files need uids of their own (verl's are uuid4s), which the second
    file gets here; the verdict's steps are the files."""
    zero = with_column(zero, tmp_path / "zero2.parquet", "uid",
                       pc.binary_join_element_wise(read(zero)["uid"], pa.scalar("-step2"), ""))
    res = rladv("inspect", SAMPLES / "groups.parquet", zero, "--json", "--batch-key", "none")
    steps = json.loads(res.stdout)["verdict"]["steps"]
    assert [s["step"] for s in steps] == [str(SAMPLES / "groups.parquet"), str(zero)]
    assert steps[1]["signal_share"] == 0 and steps[0]["signal_share"] > 0.5
    report = tmp_path / "r.json"
    assert rladv("compute", SAMPLES / "groups.parquet", zero, "--estimator", "grpo", "-o", tmp_path / "o.parquet",
                 "--report", report, "--batch-key", "none").exit_code == 0
    computed = json.loads(report.read_text())["verdict"]["steps"]
    assert [(s["step"], s["rows"], s["all_zero_share"]) for s in computed] == [
        (s["step"], s["rows"], s["all_zero_share"]) for s in steps]


def test_group_warnings_only_for_group_estimators(tmp_path):
    out, report = tmp_path / "o.parquet", tmp_path / "r.json"
    src = SAMPLES / "multiturn.parquet"
    t = read(src)
    # make one singleton and one short group: gae does not use groups, so no group warning
    uid = t["uid"].to_pylist()
    uid[0] = "alone"
    path = with_column(src, tmp_path / "m.parquet", "uid", pa.array(uid))
    assert rladv("compute", path, "--estimator", "gae", "-o", out, "--report", report).exit_code == 0
    codes = {w["code"] for w in json.loads(report.read_text())["warnings"]}
    assert not codes & {"singleton_group", "all_equal_group", "group_size_mismatch"}
    assert rladv("compute", path, "--estimator", "grpo", "-o", out, "--report", report).exit_code == 0
    warnings = {w["code"]: w for w in json.loads(report.read_text())["warnings"]}
    assert warnings["singleton_group"]["rows"] == [0]
    # the rows of group_size_mismatch are the groups off the most common size (4): "alone" and the one it left
    first_of_short = min(i for i, u in enumerate(uid) if u == t["uid"][0].as_py())
    assert warnings["group_size_mismatch"]["rows"] == [0, first_of_short]


def test_rollout_correction_metrics_only_when_asked(tmp_path):
    src = SAMPLES / "multiturn.parquet"
    plain = rladv("compute", src, "--estimator", "grpo", "-o", tmp_path / "a.parquet", env={"COLUMNS": "120"})
    assert "rollout correction" not in plain.stdout
    assert "off-policy metrics (rollout_log_probs vs old_log_probs) are in the JSON report" in plain.stdout
    asked = rladv("compute", src, "--estimator", "grpo", "--rollout-rs", "token_k1", "--rollout-rs-threshold", "1.5",
                  "-o", tmp_path / "b.parquet", env={"COLUMNS": "120"})
    assert "rollout correction" in asked.stdout and "off-policy metrics" not in asked.stdout


def test_the_report_json_has_the_verdict_second(tmp_path):
    report = tmp_path / "r.json"
    assert rladv("compute", SAMPLES / "groups.parquet", "--estimator", "grpo", "-o", tmp_path / "o.parquet",
                 "--report", report).exit_code == 0
    doc = json.loads(report.read_text())
    assert list(doc)[:2] == ["rladv_version", "verdict"]
    v = doc["verdict"]
    actor = int(pc.sum(pc.list_value_length(read(SAMPLES / "groups.parquet")["response_mask"])).as_py())
    assert v["actor_tokens"] == actor == 1850
    zero_tokens = doc["dead_signal"]["zero_advantage_tokens"]
    singleton = {c["code"]: c["tokens"] for c in v["causes"]}["singleton_group"]
    # the dead signal counts zero advantages; the verdict also counts the singleton's raw-score advantage as no signal
    assert v["signal_tokens"] == actor - zero_tokens - singleton
