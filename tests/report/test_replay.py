"""Replay: an input that already holds token_level_rewards / rollout_is_weights / advantages / returns (a trainer's
dump) is compared with what the run computes; the report's ``replay`` section says whether they agree and where
the runs part. verl 0.9.1's own outputs (tests/golden) are the trainer dumps here."""
import io
import json
import math
import shlex
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

import rladv_cli
import strategies as S
from conftest import GOLDEN, case_estimator, golden_cases, runner
from rladv_cli.cli import app
from rladv_cli.estimators.registry import REFERENCE_NAMES
from rladv_cli.report.model import render
from strategies import attempt, examples, failed, needs

CASES = golden_cases()
# every estimator once, with KL shaping, rejection and importance weights where verl's V1 trainer ran them
REPLAYED = [stem for stem in CASES if stem.startswith("mix__") and stem.endswith("__kl_rs_is")] + [
    "nosingle__grpo_passk__plain"]
DUMPED = ("token_level_rewards", "rollout_is_weights", "advantages", "returns")


def _dump(tmp_path: Path, case: dict, expected_stem: str | None = None) -> Path:
    """The case's input with verl's outputs (of ``expected_stem``, by default the case's own) attached, as a
    trainer's batch dump would hold them."""
    table = pq.read_table(GOLDEN / case["input"])
    expected = pq.read_table(GOLDEN / (CASES[expected_stem]["expected"] if expected_stem else case["expected"]))
    assert expected["row_id"].to_pylist() == table["row_id"].to_pylist()
    for name in DUMPED:
        if name in expected.column_names:
            table = table.append_column(name, expected[name].cast(pa.list_(pa.float32())))
    path = tmp_path / "dump.parquet"
    pq.write_table(table, path)
    return path


def _run(args: list[str], tmp_path: Path) -> dict:
    report = tmp_path / "report.json"
    result = runner.invoke(app, ["compute", *args, "-o", str(tmp_path / "out.parquet"), "--report", str(report),
                                      "--quiet", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    return json.loads(report.read_text())["replay"]


def test_replayed_cases_cover_every_estimator_with_golden_cases():
    """Every registered estimator of verl's (those with golden cases made by verl, which carry no ``reference``
    of another trainer) but those of reward components, which have no golden case (verl's V1 trainer does not
    feed them: tests/estimators/test_registry.py)."""
    estimators = {case_estimator(CASES[s]) for s in REPLAYED}
    by_verl = {case_estimator(c) for c in CASES.values() if "reference" not in c}
    assert estimators == {name for name, e in rladv_cli.ESTIMATORS.items() if not e.components and name in by_verl}
    assert by_verl >= set(REFERENCE_NAMES) - {name for name, e in rladv_cli.ESTIMATORS.items() if e.components}


@pytest.mark.parametrize("stem", REPLAYED)
def test_verl_dump_replays(stem, tmp_path):
    case = CASES[stem]
    rp = _run([str(_dump(tmp_path, case)), *case["rladv_args"]], tmp_path)
    with_is = "--rollout-is" in case["rladv_args"]
    assert rp["compared"] == [c for c in DUMPED if with_is or c != "rollout_is_weights"]
    assert rp["agree"] is True and rp["first_difference"] is None and rp["hint"] is None
    rows = pq.read_metadata(GOLDEN / case["input"]).num_rows
    for name, c in rp["columns"].items():
        assert c["rows_compared"] == rows and c["positions"] > 0 and c["differing_positions"] == 0, (name, c)
        assert c["max_abs_diff"] < 1e-4


def test_a_verl_batch_after_rejection_replays_with_or_without_the_rejection_flags(tmp_path):
    """A batch dumped after verl's advantage step holds the rewritten response_mask and, as verl's [P] trainer
    stores it, the original mask as loss_mask: rladv takes loss_mask as the mask before rejection, so the run's
    own flags recompute the same rejection, and without them the estimator uses the batch's response_mask."""
    case = CASES["mix__grpo__kl_rs_is"]
    table = pq.read_table(_dump(tmp_path, case))
    expected = pq.read_table(GOLDEN / case["expected"])
    rewritten = pa.array([[int(v) for v in r] for r in expected["response_mask"].to_pylist()], pa.list_(pa.int8()))
    table = table.append_column("loss_mask", table["response_mask"]).set_column(
        table.schema.get_field_index("response_mask"), "response_mask", rewritten)
    pq.write_table(table, tmp_path / "after.parquet")
    args = case["rladv_args"]
    with_flags = _run([str(tmp_path / "after.parquet"), *args], tmp_path)
    assert with_flags["agree"] and len(with_flags["compared"]) == 4
    kl_only = args[:args.index("--rollout-rs")]
    without = _run([str(tmp_path / "after.parquet"), *kl_only], tmp_path)
    assert without["agree"] and without["compared"] == ["token_level_rewards", "advantages", "returns"]
    assert without["not_compared"] == {"rollout_is_weights": "carried through: this run does not compute it"}
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["tokens"]["rejected"] > 0
    assert report["tokens"]["rejected"] == sum(map(sum, table["loss_mask"].to_pylist())) - sum(map(sum, rewritten.to_pylist()))


def test_other_settings_are_found_at_the_estimator_with_their_scale(tmp_path):
    """verl's GRPO advantages replayed as Dr.GRPO: rewards agree, advantages differ by the groups' 1/(std+eps)."""
    case = CASES["mix__grpo_nostd__plain"]
    rp = _run([str(_dump(tmp_path, case, "mix__grpo__plain")), *case["rladv_args"]], tmp_path)
    assert rp["agree"] is False and rp["first_difference"] == "advantages"
    assert rp["columns"]["token_level_rewards"]["agree"] is True
    adv = rp["columns"]["advantages"]
    assert adv["differing_rows"] > 0 and adv["proportional"]["unit"] == "group"
    assert "within each differing group" in rp["hint"] and "std normalisation" in rp["hint"]
    # the factor of each row is its group's 1 / (std + 1e-6): recompute the range from the scores
    table = pq.read_table(GOLDEN / case["input"])
    totals = np.array([sum(r) for r in table["rm_scores"].to_pylist()])
    uids = np.array(table["uid"].to_pylist())
    factors = []
    for u in np.unique(uids):
        t = totals[uids == u]
        if t.size > 1 and t.std(ddof=1) > 0:
            factors.append(1 / (t.std(ddof=1) + 1e-6))
    assert adv["proportional"]["lo"] == pytest.approx(min(factors), rel=1e-4)
    assert adv["proportional"]["hi"] == pytest.approx(max(factors), rel=1e-4)


def test_another_baseline_is_not_called_a_scale():
    """Advantages off by a constant (another baseline): each GRPO row holds one value, so every row alone is
    proportional to the input's, but the rows of the group do not share one factor, so no scale is claimed;
    the same rows each in a group of their own (no uid) are called proportional row by row."""
    table = pa.table({"uid": ["g"] * 3, "response_mask": pa.array([[1, 1], [1], [1, 1, 1]], pa.list_(pa.int8())),
                      "score": [0.0, 1.0, 3.0]})
    out, _ = rladv_cli.compute(table, estimator="grpo")
    shifted = pa.array([[a + 0.1 for a in r] for r in out["advantages"].to_pylist()], pa.list_(pa.float32()))
    _, report = rladv_cli.compute(table.append_column("advantages", shifted), estimator="grpo")
    assert report.replay["columns"]["advantages"]["differing_rows"] == 3
    assert report.replay["columns"]["advantages"]["proportional"] is None
    # no uid: rows of one value each are judged together (one factor for the batch, or none)
    alone = table.drop_columns(["uid"])
    out, _ = rladv_cli.compute(alone, estimator="reinforce_plus_plus")
    adv = out["advantages"].to_pylist()
    for values, unit in (([[a + 0.1 for a in r] for r in adv], None), ([[2 * a for a in r] for r in adv], "batch")):
        _, report = rladv_cli.compute(alone.append_column("advantages", pa.array(values, pa.list_(pa.float32()))),
                                      estimator="reinforce_plus_plus")
        found = report.replay["columns"]["advantages"]["proportional"]
        assert (found and found["unit"]) == unit and (unit is None or found["lo"] == pytest.approx(2, rel=1e-6))
    # rows that vary along their length (GAE with values) are judged row by row
    gae = pa.table({"response_mask": pa.array([[1, 1], [1, 1], [1, 1, 1]], pa.list_(pa.int8())), "score": [0.0, 1.0, 3.0],
                    "values": pa.array([[0.5, 0.2], [0.1, 0.7], [0.3, 0.9, 0.4]], pa.list_(pa.float32()))})
    out, _ = rladv_cli.compute(gae, estimator="gae", gamma=0.9, lam=0.8)
    scaled = [[a * (3.0 if i == 2 else 0.5) for a in r] for i, r in enumerate(out["advantages"].to_pylist())]
    _, report = rladv_cli.compute(gae.append_column("advantages", pa.array(scaled, pa.list_(pa.float32()))),
                                  estimator="gae", gamma=0.9, lam=0.8)
    found = report.replay["columns"]["advantages"]["proportional"]
    assert found["unit"] == "row" and (found["lo"], found["hi"]) == (pytest.approx(0.5), pytest.approx(3.0))


@pytest.mark.parametrize("dtype, arrow_type, name", [(torch.bfloat16, pa.float32(), "bfloat16"),
                                                     (torch.float16, pa.float32(), "float16"),
                                                     (torch.float16, pa.float16(), "float16")])
def test_values_a_trainer_rounded_to_half_precision_are_named(dtype, arrow_type, name):
    """Advantages rounded to bfloat16 or float16 (stored as such, or as float32 after the rounding) differ beyond
    the tolerance; the hint names the precision instead of blaming the settings."""
    table = pq.read_table(GOLDEN / "inputs" / "mix.parquet")
    out, _ = rladv_cli.compute(table, estimator="gae", lam=0.95)
    rounded = [torch.tensor(r).to(dtype).float().numpy() for r in out["advantages"].to_pylist()]
    given = table.append_column("advantages", pa.array([r.astype(arrow_type.to_pandas_dtype()) for r in rounded],
                                                        pa.list_(arrow_type)))
    _, report = rladv_cli.compute(given, estimator="gae", lam=0.95)
    c = report.replay["columns"]["advantages"]
    assert c["differing_positions"] > 0 and c["half_precision"] == name
    assert report.replay["hint"].startswith(f"every differing value of the input's advantages is a {name} number")
    # a settings difference whose values happen to be rounded to bfloat16 is still a settings difference
    other, _ = rladv_cli.compute(table, estimator="gae", lam=0.9)
    rounded = [torch.tensor(r).to(dtype).float().tolist() for r in other["advantages"].to_pylist()]
    _, report = rladv_cli.compute(table.append_column("advantages", pa.array(rounded, pa.list_(pa.float32()))),
                                  estimator="gae", lam=0.95)
    assert report.replay["columns"]["advantages"]["half_precision"] is None
    assert report.replay["hint"].startswith("the estimator or its settings differ")
    # one value off beyond the rounding among rounded ones: not explained by the precision
    rounded = [torch.tensor(r).to(dtype).float().tolist() for r in out["advantages"].to_pylist()]
    rounded[5][0] += 0.5
    _, report = rladv_cli.compute(table.append_column("advantages", pa.array(rounded, pa.list_(pa.float32()))),
                                  estimator="gae", lam=0.95)
    assert report.replay["columns"]["advantages"]["half_precision"] is None


def test_kl_left_out_is_found_at_the_rewards(tmp_path):
    case = CASES["mix__grpo__kl_k1"]
    rp = _run([str(_dump(tmp_path, case)), "--estimator", "grpo"], tmp_path)
    assert rp["first_difference"] == "token_level_rewards" and "KL shaping" in rp["hint"]
    # the difference is verl's shaping term, 0.05 * (old_log_probs - ref_log_prob) on actor tokens
    table = pq.read_table(GOLDEN / case["input"])
    assert case["rladv_args"][-4:] == ["--kl-coef", "0.05", "--kl-penalty", "kl"]
    shaped = [any(abs(0.05 * (o - r) * m) > 1e-5 + 1e-4 * abs(s) for o, r, m, s in zip(*row))
              for row in zip(*(table[c].to_pylist() for c in ("old_log_probs", "ref_log_prob", "response_mask", "rm_scores")))]
    assert 0 < rp["columns"]["token_level_rewards"]["differing_rows"] == sum(shaped)


def _table(**lists) -> pa.Table:
    """Two groups of two rows, lengths 3, 2, 3, 2; scores at each row's last position."""
    mask = [[1, 1, 1], [1, 1], [1, 0, 1], [1, 1]]
    scores = [[0, 0, 1.0], [0, 0.0], [0, 0, 0.5], [0, 2.0]]
    cols = {"response_mask": pa.array(mask, pa.list_(pa.int8())), "rm_scores": pa.array(scores, pa.list_(pa.float32())),
            "uid": pa.array(["a", "a", "b", "b"])}
    return pa.table({**cols, **lists})


def test_one_changed_token_is_located():
    out, _ = rladv_cli.compute(_table(), estimator="grpo")
    adv = out["advantages"].to_pylist()
    adv[2][2] += 0.01  # row 2, position 2
    _, report = rladv_cli.compute(_table(advantages=pa.array(adv, pa.list_(pa.float32()))), estimator="grpo")
    c = report.replay["columns"]["advantages"]
    assert (c["differing_rows"], c["differing_positions"], c["positions"]) == (1, 1, 9)  # row 2 position 1: mask 0
    assert c["first_rows"] == ["<table>:2"]
    assert c["worst"]["where"] == "<table>:2" and c["worst"]["position"] == 2
    assert c["worst"]["input"] == pytest.approx(adv[2][2]) and c["max_abs_diff"] == pytest.approx(0.01, rel=1e-4)
    assert report.replay["compared"] == ["advantages"] and report.replay["first_difference"] == "advantages"
    assert "no token_level_rewards" in report.replay["hint"]


def test_masked_positions_are_not_compared_for_advantages_but_are_for_rewards():
    out, _ = rladv_cli.compute(_table(), estimator="grpo")
    adv, tlr = out["advantages"].to_pylist(), out["token_level_rewards"].to_pylist()
    adv[2][1] = 7.0  # mask 0: verl leaves values there for some estimators
    tlr[2][1] = 7.0
    _, report = rladv_cli.compute(_table(advantages=pa.array(adv), token_level_rewards=pa.array(tlr)), estimator="grpo")
    assert report.replay["columns"]["advantages"]["agree"] is True
    assert report.replay["columns"]["token_level_rewards"]["differing_positions"] == 1
    assert report.replay["first_difference"] == "token_level_rewards"


def test_length_mismatch_null_list_and_nan():
    out, _ = rladv_cli.compute(_table(), estimator="grpo")
    adv = out["advantages"].to_pylist()
    adv[0] = adv[0][:2]       # wrong length
    adv[1] = None             # null list
    adv[3] = [adv[3][0], None]  # null inside the list
    adv[2][0] = math.nan
    _, report = rladv_cli.compute(_table(advantages=pa.array(adv, pa.list_(pa.float32()))), estimator="grpo")
    c = report.replay["columns"]["advantages"]
    assert c["rows_compared"] == 2 and c["length_mismatch_rows"] == 2
    assert c["length_mismatch_first_rows"] == ["<table>:0", "<table>:1"]
    assert c["non_finite_positions"] == 2 and c["max_abs_diff"] == 0.0  # the largest finite difference
    assert c["first_non_finite"] == {"where": "<table>:2", "dataset_row": 2, "position": 0}
    assert c["differing_rows"] == 4 and c["first_rows"] == ["<table>:0", "<table>:1", "<table>:2", "<table>:3"]
    assert report.replay["hint"].startswith("the input's advantages holds 2 NaN or infinite value(s) where rladv's are "
                                            "finite (first at <table>:2 position 0)")
    assert "the other differences" not in report.replay["hint"]
    adv[3] = [adv[3][0], 9.0]  # a real difference beside the NaN
    _, report = rladv_cli.compute(_table(advantages=pa.array(adv, pa.list_(pa.float32()))), estimator="grpo")
    assert "; the other differences: the estimator or its settings" in report.replay["hint"]
    assert report.replay["columns"]["advantages"]["max_abs_diff"] > 8


def test_lists_that_do_not_line_up_are_said_so():
    out, _ = rladv_cli.compute(_table(), estimator="grpo")
    adv = out["advantages"].to_pylist()
    adv[1] = adv[1] + [0.0]
    _, report = rladv_cli.compute(_table(advantages=pa.array(adv, pa.list_(pa.float32()))), estimator="grpo")
    assert report.replay["hint"] == ("1 row(s) of the input's advantages are null or not the response's length: the "
                                     "file's lists do not line up with response_mask (rows cut, padded or shifted?)")


def test_a_rewritten_mask_without_loss_mask_is_named():
    """verl's DataProto trainer rewrites response_mask at rejection and keeps no copy: its rewards (KL shaped on
    the original mask) then differ from the replay's only where the rewritten mask is 0."""
    case = CASES["mix__grpo__kl_rs_is"]
    table = pq.read_table(GOLDEN / case["input"])
    expected = pq.read_table(GOLDEN / case["expected"])
    rewritten = pa.array([[int(v) for v in r] for r in expected["response_mask"].to_pylist()], pa.list_(pa.int8()))
    table = table.set_column(table.schema.get_field_index("response_mask"), "response_mask", rewritten)
    table = table.append_column("token_level_rewards", expected["token_level_rewards"].cast(pa.list_(pa.float32())))
    args = case["rladv_args"]
    settings = dict(estimator="grpo", kl_coef=0.01, kl_penalty="mse", device="cpu")
    assert args[:6] == ["--estimator", "grpo", "--kl-coef", "0.01", "--kl-penalty", "mse"]
    _, report = rladv_cli.compute(table, **settings)
    assert report.replay["first_difference"] == "token_level_rewards"
    assert report.replay["hint"].startswith("the rewards differ only where this run's response_mask is 0")
    tlr = report.replay["columns"]["token_level_rewards"]
    assert tlr["differing_positions"] == tlr["differing_masked_positions"] > 0
    # with the mask before rejection as loss_mask, the same rewards agree
    _, report = rladv_cli.compute(table.append_column("loss_mask", pq.read_table(GOLDEN / case["input"])["response_mask"]),
                                  **settings)
    assert report.replay["columns"]["token_level_rewards"]["agree"]


def test_columns_that_cannot_be_compared_are_said():
    _, report = rladv_cli.compute(_table(advantages=pa.array(["x"] * 4),
                                         rollout_is_weights=pa.array([[1.0] * 3, [1.0] * 2, [1.0] * 3, [1.0] * 2])),
                                  estimator="grpo")
    assert report.replay["compared"] == [] and report.replay["agree"] is False
    assert report.replay["not_compared"] == {
        "rollout_is_weights": "carried through: this run does not compute it",
        "advantages": "has type string, not a list of numbers"}


def test_no_dumped_columns_no_section():
    _, report = rladv_cli.compute(_table(), estimator="grpo")
    assert report.replay is None


@pytest.mark.parametrize("chunk_rows", [1, 3])
def test_replay_does_not_depend_on_chunking(chunk_rows, tmp_path):
    case = CASES["mix__gae__kl_rs_is"]
    dump = _dump(tmp_path, case, "mix__gae_g0.99_l0.95__kl_rs_is")
    whole = _run([str(dump), *case["rladv_args"]], tmp_path)
    chunked = _run([str(dump), *case["rladv_args"], "--chunk-rows", str(chunk_rows)], tmp_path)
    assert chunked == whole and whole["first_difference"] == "advantages"


def test_terminal_and_html_show_the_replay(tmp_path):
    case = CASES["mix__grpo_nostd__plain"]
    dump = _dump(tmp_path, case, "mix__grpo__plain")
    html = tmp_path / "r.html"
    result = runner.invoke(app, ["compute", str(dump), *case["rladv_args"], "-o", str(tmp_path / "o.parquet"),
                                      "--html", str(html), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "replay: the input's own columns against this run's (first difference: advantages" in text
    assert "token_level_rewards agree over" in text and "advantages differ in" in text
    report = rladv_cli.compute_file([str(dump)], rladv_cli.Config(estimator="grpo", norm_adv_by_std=False),
                                    output=str(tmp_path / "o2.parquet"))
    wide = Console(width=400, file=io.StringIO())
    render(report, wide)
    worst = report.replay["columns"]["advantages"]["worst"]
    assert f"that row, token by token: rladv explain {dump} --estimator grpo --row {worst['dataset_row']} " in wide.file.getvalue()
    page = html.read_text()
    assert '<section id="replay">' in page and "Where to look:" in page
    assert '<a href="#replay">differ: advantages</a>' in page


def test_rladv_output_replays_itself(tmp_path):
    src = tmp_path / "in.parquet"
    shutil.copy(GOLDEN / CASES["mix__gae__plain"]["input"], src)
    first = tmp_path / "first.parquet"
    assert runner.invoke(app, ["compute", str(src), "--estimator", "gae", "-o", str(first), "-q"]).exit_code == 0
    rp = _run([str(first), "--estimator", "gae"], tmp_path)
    assert rp["agree"] is True and all(c["max_abs_diff"] == 0 for c in rp["columns"].values())


# ------------------------------------------------------------------ properties on random batches
@pytest.mark.slow  # hypothesis property of every estimator
@pytest.mark.parametrize("name", list(rladv_cli.ESTIMATORS))
@examples(4)
@given(data=st.data(), s=S.estimator_settings(), kl=S.kl_settings())
def test_an_output_replays_exactly_and_one_changed_token_is_found(name, data, s, kl):
    """Every estimator: an output fed back with the same settings agrees bit for bit (any chunking); the same
    output with one valid advantage moved by >= 1e-3·(1 + |a|) differs at exactly that row and position."""
    table = data.draw(S.rollouts(**needs(name)), label="rollout").table()
    first = attempt(rladv_cli.compute, table, estimator=name, device="cpu", **s, **kl)
    if failed(first):
        return
    out = first[0]
    chunk = data.draw(st.integers(1, table.num_rows), label="chunk_rows")
    _, report = rladv_cli.compute(out, estimator=name, device="cpu", chunk_rows=chunk, **s, **kl)
    rp = report.replay
    assert rp["agree"] and rp["compared"] == ["token_level_rewards", "advantages", "returns"]
    assert all(c["max_abs_diff"] in (0.0, None) and c["positions"] >= 0 for c in rp["columns"].values())
    valid = [(i, t) for i, m in enumerate(out["response_mask"].to_pylist()) for t, v in enumerate(m) if v]
    if not valid:
        return
    row, pos = data.draw(st.sampled_from(valid), label="changed token")
    adv = out["advantages"].to_pylist()
    step = data.draw(st.floats(1e-3, 10.0), label="step") * data.draw(st.sampled_from([1, -1]), label="sign")
    adv[row][pos] = float(np.float32(adv[row][pos] + step * (1 + abs(adv[row][pos]))))  # well beyond the tolerance
    changed = out.set_column(out.schema.get_field_index("advantages"), "advantages", pa.array(adv, pa.list_(pa.float32())))
    _, report = rladv_cli.compute(changed, estimator=name, device="cpu", chunk_rows=chunk, **s, **kl)
    c = report.replay["columns"]["advantages"]
    assert (c["differing_rows"], c["differing_positions"]) == (1, 1)
    assert c["first_rows"] == [f"<table>:{row}"] and c["worst"]["where"] == f"<table>:{row}"
    assert c["worst"]["position"] == pos and c["worst"]["input"] == adv[row][pos]
    assert report.replay["first_difference"] == "advantages" and report.replay["columns"]["token_level_rewards"]["agree"]


EXPLAINED_RUNS = {  # settings that tie rows together in every way explain has to honour
    "gae, defaults": dict(estimator="gae", gamma=0.99, lam=0.9, kl_coef=0.05),
    "grpo by step, Dr.GRPO": dict(estimator="grpo", batch_key="step", norm_adv_by_std=False, epsilon=1e-4),
    "gae, rejection by step": dict(estimator="gae", lam=0.95, rollout_rs="token_k1", rollout_rs_threshold="0.9_1.1",
                                   batch_key="step"),
    "reinforce++, adaptive KL by step": dict(estimator="reinforce_plus_plus", kl_coef=0.2, kl_ctrl="adaptive",
                                             kl_target=0.01, kl_horizon=10, batch_key="step", rpp_mask_mode="carry"),
    "rloo, adaptive KL by step": dict(estimator="rloo", kl_coef=0.2, kl_ctrl="adaptive", kl_target=0.01,
                                      kl_horizon=10, batch_key="step", kl_penalty="low_var_kl"),
    "grpo, overlong and IS": dict(estimator="grpo", overlong_buffer_len=4, max_resp_len=16, rollout_is="token",
                                  rollout_rs="seq_max_k2", rollout_rs_threshold="0.05"),
    "gdpo, components": dict(estimator="gdpo", reward_components=("c1", "c2"), reward_weights=(1.0, 0.5)),
}


@pytest.mark.parametrize("name", EXPLAINED_RUNS)
def test_the_explain_line_reproduces_the_runs_numbers_for_any_row(name, tmp_path):
    """The terminal's 'that row, token by token' line is a command that reproduces the run's advantages for
    that row, whatever the run's settings: batches, rejection, adaptive KL, overlong shaping, components."""
    from rladv_cli.report.model import explain_command

    table = pq.read_table(GOLDEN / "inputs" / "mix.parquet")
    rng = np.random.default_rng(0)
    table = (table.append_column("step", pa.array(np.arange(table.num_rows) // 24))
             .append_column("c1", pa.array(rng.choice([0.0, 1.0], table.num_rows)))
             .append_column("c2", pa.array(rng.choice([0.0, 0.5, 1.0], table.num_rows))))
    path = tmp_path / "in.parquet"
    pq.write_table(table, path)
    report = rladv_cli.compute_file([str(path)], rladv_cli.Config(**EXPLAINED_RUNS[name], chunk_rows=7),
                                    output=str(tmp_path / "out.parquet"))
    computed = pq.read_table(tmp_path / "out.parquet")["advantages"]
    for row in (0, 30, 71):  # one row in each step
        command = explain_command(report, row)
        assert command.startswith(f"rladv explain {path} --estimator {EXPLAINED_RUNS[name]['estimator']} --row {row}")
        shown = runner.invoke(app, ["explain", *shlex.split(command)[2:], "--json"])
        assert shown.exit_code == 0, shown.output
        np.testing.assert_allclose(json.loads(shown.stdout)["advantages"], computed[row].as_py(), rtol=1e-6, atol=1e-7)


def test_the_explain_line_names_only_the_settings_that_differ_from_the_defaults(tmp_path):
    from rladv_cli.report.model import explain_command

    path = tmp_path / "in.parquet"
    pq.write_table(pq.read_table(GOLDEN / "inputs" / "mix.parquet"), path)
    report = rladv_cli.compute_file([str(path)], rladv_cli.Config(estimator="gae", gamma=0.99, lam=0.9, kl_coef=0.05,
                                                                  chunk_rows=7, cache_mib=0), output=str(tmp_path / "b.parquet"))
    assert explain_command(report, 3) == f"rladv explain {path} --estimator gae --row 3 --gamma 0.99 --lam 0.9 --kl-coef 0.05"
    # settings without effect (a verl YAML writes lam and the KL controller's for every estimator) are left out
    inert = rladv_cli.compute_file([str(path)], rladv_cli.Config(estimator="grpo", lam=0.95, gamma=0.99, kl_target=0.5,
                                                                 kl_penalty="k3", max_resp_len=64),
                                   output=str(tmp_path / "c.parquet"))
    command = explain_command(inert, 3)
    assert command == f"rladv explain {path} --estimator grpo --row 3"
    assert runner.invoke(app, ["explain", *shlex.split(command)[2:]]).exit_code == 0


def test_strict_replay_exit_codes(tmp_path):
    case = CASES["mix__grpo_nostd__plain"]
    args = lambda dump, extra: ["compute", str(dump), "--estimator", "grpo", *extra, "-o", str(tmp_path / "o.parquet"),  # noqa: E731
                                "-q", "--strict-replay"]
    dump = _dump(tmp_path, case, "mix__grpo__plain")
    assert runner.invoke(app, args(dump, [])).exit_code == 0
    differ = runner.invoke(app, args(dump, ["--no-norm-adv-by-std"]))
    assert differ.exit_code == 1 and (tmp_path / "o.parquet").exists()
    assert differ.output == ("--strict-replay: the input's advantages differ from this run's (the report's replay "
                             "section says where)\n")
    plain = tmp_path / "plain.parquet"
    shutil.copy(GOLDEN / case["input"], plain)
    nothing = runner.invoke(app, args(plain, []))
    assert nothing.exit_code == 1 and nothing.output == ("--strict-replay: the input holds none of token_level_rewards, "
                                                         "rollout_is_weights, advantages, returns to compare\n")


def test_the_bitwise_shortcut_reports_what_the_full_comparison_does():
    """float32 columns equal bit for bit take a shortcut; the same values as float64 take the full comparison."""
    case = CASES["mix__gae__kl_rs_is"]
    table = pq.read_table(GOLDEN / case["input"])
    settings = dict(estimator="gae", kl_coef=0.01, kl_penalty="mse", device="cpu", chunk_rows=13)
    out, _ = rladv_cli.compute(table, **settings)
    f32 = table
    f64 = table
    for name in ("token_level_rewards", "advantages", "returns"):
        f32 = f32.append_column(name, out[name])
        f64 = f64.append_column(name, out[name].cast(pa.list_(pa.float64())))
    shortcut = rladv_cli.compute(f32, **settings)[1].replay
    full = rladv_cli.compute(f64, **settings)[1].replay
    assert shortcut == full and shortcut["agree"]


finite_or_not = st.one_of(st.floats(-4, 4, width=32), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e-6]))


@settings(deadline=None)
@given(data=st.data())
def test_the_c_comparison_gives_the_torch_comparisons_fields(data):
    """kernels.compare_native (C passes per row) and the torch path (GPUs, no C build) give the same per-row
    fields: counts, sums, the largest difference and its place, the scale factor, whether values are rounded
    to half precision, rows not compared; on random lists with NaN/inf, null lists and null values, lists of
    the wrong length, values rounded to float16 or bfloat16, float16/32/64 input and either mask rule."""
    from rladv_cli.report.replay import compare_rows
    from rladv_cli.tensors import kernels

    lengths = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=8), label="lengths")
    off = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.long)
    n = int(off[-1])
    got = torch.tensor(data.draw(st.lists(st.floats(-4, 4, width=32), min_size=n, max_size=n)), dtype=torch.float32)
    valid = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=torch.bool)
    rows = []
    for i, L in enumerate(lengths):
        kind = data.draw(st.sampled_from(["near", "far", "null", "short", "long", "scaled", "float16", "bfloat16"]),
                         label=f"row {i}")
        base = got[off[i]:off[i + 1]].tolist()
        if kind == "null":
            rows.append(None)
        elif kind in ("short", "long"):
            rows.append(base[:-1] if kind == "short" and L else base + [0.5])
        elif kind == "scaled":
            rows.append([v * data.draw(st.sampled_from([2.0, 2.0 + 1e-3])) for v in base])
        elif kind in ("float16", "bfloat16"):
            rows.append(torch.tensor(base, dtype=torch.float32).to(getattr(torch, kind)).double().tolist())
        else:
            rows.append([data.draw(st.one_of(st.none(), finite_or_not)) if kind == "far" else v + data.draw(
                st.sampled_from([0.0, 1e-7, 3e-5])) for v in base])
    arrow_type = data.draw(st.sampled_from([pa.float32(), pa.float64(), pa.float16()]), label="type")
    given = pa.array([None if r is None else [None if v is None or (arrow_type == pa.float16() and abs(v) > 6e4)
                                              else v for v in r] for r in rows], pa.list_(arrow_type))
    on_valid = data.draw(st.booleans(), label="on_valid")
    native = compare_rows(given, got, off, valid, on_valid)
    saved = kernels._rows
    kernels._rows = None
    try:
        plain = compare_rows(given, got, off, valid, on_valid)
    finally:
        kernels._rows = saved
    assert set(native) == set(plain)
    for k in plain:
        a, b = native[k], plain[k]
        assert a.dtype == b.dtype, k
        if k in ("sum", "factor"):  # sums of float64 products: the last bit may depend on the order
            torch.testing.assert_close(a, b, rtol=1e-12, atol=0, equal_nan=True)
        else:
            assert torch.equal(a, b) or torch.equal(a.isnan(), b.isnan()) and torch.equal(a[~a.isnan()], b[~b.isnan()]), k
