"""slime's debug rollout data in (docs/dumps.md "Trainers' logs"): ``{rollout_id}.pt`` files written by slime's
own ``save_debug_rollout_data`` (tests/data/make_slime_rollouts.py), converted to token-level rows; read without
running code from them; bad samples are one-line errors naming file and sample, and nothing is written."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

import rladv_cli
from conftest import DATA, assert_generator_writes_the_fixtures, rladv

SLIME = DATA / "slime_rollouts"  # written by slime's save_debug_rollout_data
COLUMNS = ("uid, step, group_index, score, responses, response_mask, rollout_log_probs, index, rollout_id, "
           "response_length, status, remove_sample, label, prompt, response, metadata")


def samples(rollout: int) -> list[dict]:
    return torch.load(SLIME / f"{rollout}.pt", weights_only=True)["samples"]


def test_a_slime_folder_converts_its_rollouts_in_order_and_leaves_out_evaluation(tmp_path):
    folder = tmp_path / "rollout_data"
    folder.mkdir()
    shutil.copy(SLIME / "1.pt", folder / "1.pt")
    shutil.copy(SLIME / "0.pt", folder / "0.pt")
    shutil.copy(SLIME / "0.pt", folder / "eval_0.pt")  # slime's evaluation dump: not read from a folder
    out = tmp_path / "s.parquet"
    res = rladv("convert", "--from", "slime", folder, "-o", out)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"{out}: 16 rows from 2 file(s); columns {COLUMNS}"
    assert lines[1].startswith("  uid from rollout_id:group_index (slime's prompt group within its rollout); "
                               "score from reward; absent: advantages")
    t = pq.read_table(out)
    assert t["step"].to_pylist() == [0] * 8 + [1] * 8
    # group_index runs on across rollouts (slime's data source); the uid keeps rollouts apart all the same
    assert t["uid"].to_pylist() == [f"{r}:{g}" for r, g in ((0, 0), (0, 1), (1, 2), (1, 3)) for _ in range(4)]
    assert t["prompt"].to_pylist()[0] == t["prompt"].to_pylist()[12] == "What is 2+2?"


def test_a_slime_row_is_the_samples_response_and_its_loss_mask(tmp_path):
    out = tmp_path / "s.parquet"
    assert rladv("convert", "--from", "slime", SLIME, "-o", out).exit_code == 0
    t = pq.read_table(out)
    schema = {f.name: str(f.type) for f in t.schema}
    assert schema["responses"] == "list<element: int32>" and schema["response_mask"] == "list<element: int8>"
    assert schema["rollout_log_probs"] == "list<element: float>" and schema["score"] == "float"
    rows = t.to_pylist()
    # the multi-turn sample: rollout 0, group 1, sample 3; a tool observation (loss_mask 0, log-prob 0.0) inside
    sample = samples(0)[7]
    assert sample["response_length"] == 11 and len(sample["tokens"]) == 16 and sample["rollout_id"] is None
    row = rows[7]
    assert row["responses"] == sample["tokens"][5:] and row["response_mask"] == [1] * 7 + [0, 0, 1, 1]
    assert row["rollout_log_probs"] == sample["rollout_log_probs"] and row["rollout_log_probs"][7:9] == [0.0, 0.0]
    assert (row["score"], row["index"], row["group_index"], row["status"]) == (0.5, 7, 1, "completed")
    assert json.loads(row["metadata"]) == {"source": "arith"} and row["label"] == "11"
    assert row["response"] == " answer 3 <tool>observation</tool> final answer"
    # every row: its response_length tokens, the tail of tokens; slime's removed sample trains with mask 0
    for entry, row in zip(samples(0) + samples(1), rows):
        n = entry["response_length"]
        assert row["responses"] == entry["tokens"][-n:] and len(row["response_mask"]) == n
        assert row["response_mask"] == ([0] * n if entry["remove_sample"] else entry["loss_mask"])
        assert row["score"] == entry["reward"] and row["status"] == entry["status"]
    assert [r["remove_sample"] for r in rows].count(True) == 1 and rows[9]["response_mask"] == [0] * 4
    assert rows[12]["status"] == "truncated"


def test_rladv_computes_and_inspects_a_converted_slime_dump(tmp_path):
    out, computed, report = tmp_path / "s.parquet", tmp_path / "c.parquet", tmp_path / "r.json"
    assert rladv("convert", "--from", "slime", SLIME, "-o", out).exit_code == 0
    res = rladv("compute", out, "--estimator", "grpo", "--batch-key", "step", "-o", computed, "-q", "--report", report)
    assert res.exit_code == 0, res.output
    r = json.loads(report.read_text())
    assert r["inputs"]["sequence_level"] is False and r["replay"] is None  # slime logs no advantages
    adv = pq.read_table(computed)["advantages"].to_pylist()
    z = 0.5 / ((1 / 3) ** 0.5 + 1e-6)  # rollout 0, group 0: rewards 1, 0, 1, 0
    assert [a[0] for a in adv[:4]] == pytest.approx([z, -z, z, -z], abs=1e-5)
    assert adv[7][7:9] == [0.0, 0.0]  # the tool observation
    res = rladv("inspect", out, "--json", "--estimator", "grpo", "--batch-key", "step")
    assert res.exit_code == 0, res.output
    seen = json.loads(res.output)
    assert seen["rows"] == 16 and seen["invalid_rows"] == 0 and seen["verdict"]["groups"] == 4


def _save(path: Path, change, rollout: int = 0, first_only: bool = False):
    """slime's file of ``rollout`` with ``change`` applied to its samples (to its first only)."""
    data = {"rollout_id": rollout, "samples": samples(rollout)}
    for s in data["samples"][:1] if first_only else data["samples"]:
        change(s)
    torch.save(data, path)


def test_dict_rewards_need_the_reward_key_slime_was_given(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    _save(folder / "0.pt", lambda s: s.update(reward={"acc": s["reward"], "len": -0.1}))
    res = rladv("convert", "--from", "slime", folder, "-o", tmp_path / "r.parquet")
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith(f"Error: {folder / '0.pt'}: sample 0: reward is a dict (acc, len); give "
                                 "--reward-key KEY")
    assert not (tmp_path / "r.parquet").exists()
    res = rladv("convert", "--from", "slime", folder, "-o", tmp_path / "r.parquet", "--reward-key", "acc")
    assert res.exit_code == 0 and "score from reward['acc']" in res.output, res.output
    t = pq.read_table(tmp_path / "r.parquet")
    assert t["score"].to_pylist() == [s["reward"] for s in samples(0)]
    assert json.loads(t["reward"].to_pylist()[0]) == {"acc": 1.0, "len": -0.1}
    res = rladv("convert", "--from", "slime", folder, "-o", tmp_path / "x.parquet", "--reward-key", "f1")
    assert res.exit_code == 2 and "sample 0: reward has no key 'f1' (it has acc, len)" in res.output


class _RunsCode:
    """A pickled payload that runs code on loading: it creates ``marker``."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def test_a_slime_file_that_would_run_code_is_refused_without_trust_pickle(tmp_path):
    folder, marker = tmp_path / "logs", tmp_path / "ran"
    folder.mkdir()
    bad = folder / "0.pt"
    torch.save({"rollout_id": 0, "samples": [{**samples(0)[0], "metadata": _RunsCode(str(marker))}]}, bad)
    before = hashlib.sha256(bad.read_bytes()).hexdigest()
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "slime", folder, "-o", out)
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert res.output.startswith(f"Error: {bad}: holds exec, beyond tensors, lists, dicts and numbers")
    assert "--trust-pickle loads it (only for a file you trust" in res.output
    assert not marker.exists() and not out.exists() and hashlib.sha256(bad.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_trust_pickle_and_reward_key_are_slime_options(tmp_path):
    res = rladv("convert", "--from", "slime", SLIME / "0.pt", "-o", tmp_path / "r.parquet", "--trust-pickle")
    assert res.exit_code == 0 and "8 rows from 1 file(s)" in res.output, res.output
    res = rladv("convert", "--from", "areal", DATA / "areal_rollouts", "-o", tmp_path / "a.parquet", "--trust-pickle")
    assert res.exit_code == 2 and "--trust-pickle is for a saved batch or --from slime" in res.output
    res = rladv("convert", SLIME / "0.pt", "-o", tmp_path / "b.parquet", "--reward-key", "acc")
    assert res.exit_code == 2 and "--reward-key is for --from slime" in res.output
    with pytest.raises(rladv_cli.InputError, match="--reward-key is for slime"):
        from rladv_cli.io.importers import convert_log

        convert_log("nemo-rl", [DATA / "nemo_rl_rollouts"], tmp_path / "n.parquet", reward_key="acc")


@pytest.mark.parametrize("change, message", [
    (lambda s: s.update(response_length=99), "sample 0: response_length is 99; it must be 1 to len(tokens) 8"),
    (lambda s: s.update(loss_mask=[1, 1]), "sample 0: loss_mask is not 4 (response_length) values 0 or 1"),
    (lambda s: s.update(group_index=None), "sample 0: has no group_index"),
    (lambda s: s.update(reward=None), "sample 0: reward is None; slime scores every sample before training"),
    (lambda s: s.update(rollout_log_probs=[0.5]), "sample 0: rollout_log_probs is not 4 (response_length) numbers"),
])
def test_bad_slime_samples_are_one_line_errors_and_nothing_is_written(tmp_path, change, message):
    folder = tmp_path / "logs"
    folder.mkdir()
    shutil.copy(SLIME / "0.pt", folder / "0.pt")
    _save(folder / "1.pt", change, rollout=1, first_only=True)
    out = tmp_path / "r.parquet"
    res = rladv("convert", "--from", "slime", folder, "-o", out)
    assert res.exit_code == 2 and res.output.startswith(f"Error: {folder / '1.pt'}: {message}"), res.output
    assert len(res.output.strip().splitlines()) == 1 and not out.exists()


def test_a_loss_mask_slime_left_out_is_all_ones(tmp_path):
    _save(tmp_path / "0.pt", lambda s: s.update(loss_mask=None))
    from rladv_cli.io.importers import convert_log

    done = convert_log("slime", [tmp_path / "0.pt"], tmp_path / "r.parquet")
    t = pq.read_table(done.path)
    assert t["response_mask"].to_pylist() == [[1] * s["response_length"] for s in samples(0)]


@pytest.mark.slow
def test_the_slime_fixtures_are_what_slime_writes(tmp_path):
    """tests/data/make_slime_rollouts.py, run with slime's source (SLIME_SRC, see the script), writes exactly the
    committed files."""
    src = os.environ.get("SLIME_SRC")
    if not src or not (Path(src) / "slime" / "utils" / "types.py").is_file():
        pytest.skip("SLIME_SRC is not slime's source (tests/data/make_slime_rollouts.py says how)")
    assert assert_generator_writes_the_fixtures("make_slime_rollouts.py", tmp_path, "*.pt") == [Path("0.pt"), Path("1.pt")]
