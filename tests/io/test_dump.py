"""dump_batch / rladv convert: a trainer's batch (padded [B, T] tensors, jagged tensors, a DataProto-like object,
a saved file) written in the contract's layout, and replayed by rladv compute."""
import json
import pickle
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rladv_cli
import strategies as S
from conftest import GOLDEN, golden_cases, runner
from rladv_cli.cli import app
from rladv_cli.io.dump import batch_table, dump_batch

CASES = golden_cases()


class Proto:
    """What dump_batch reads of verl's DataProto: ``batch`` (tensors) and ``non_tensor_batch`` (numpy arrays)."""

    def __init__(self, batch, non_tensor_batch):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch


def padded_batch():
    """Three rows, prompt width 2, response width 4; row 2 has 3 padding positions."""
    attention = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    return {
        "prompts": torch.zeros(3, 2, dtype=torch.long),
        "responses": torch.arange(12).view(3, 4),
        "attention_mask": attention,
        "response_mask": torch.tensor([[1, 1, 1, 0], [1, 0, 1, 1], [1, 0, 0, 0]]),
        "token_level_scores": torch.tensor([[0, 0, 1.0, 0], [0, 0, 0, 0.5], [1.0, 0, 0, 0]]),
        "old_log_probs": torch.tensor([[-0.5, -1.0, -0.25, 0.0]] * 3).bfloat16(),
        "reward_baselines": torch.tensor([0.5, 0.25, 0.0]),
        "hidden": torch.zeros(3, 4, 2),
        "uid": np.array(["a", "a", "b"], dtype=object),
    }


def test_padded_tensors_keep_their_width_and_mark_the_padding():
    table, skipped = batch_table(padded_batch(), step=12)
    assert table.column_names == ["responses", "attention_mask", "response_mask", "rm_scores", "old_log_probs",
                                  "reward_baselines", "uid", "step"]
    assert table["attention_mask"].to_pylist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]]  # the response part
    assert table["response_mask"].to_pylist()[1] == [1, 0, 1, 1]
    assert table.schema.field("response_mask").type == pa.list_(pa.int8())
    assert table.schema.field("old_log_probs").type == pa.list_(pa.float32())  # bfloat16 read as float32
    assert table["old_log_probs"].to_pylist()[0] == [-0.5, -1.0, -0.25, 0.0]
    assert table["rm_scores"].to_pylist()[2] == [1.0, 0, 0, 0]
    assert table["reward_baselines"].to_pylist() == [0.5, 0.25, 0.0] and table["uid"].to_pylist() == ["a", "a", "b"]
    assert table["step"].to_pylist() == [12] * 3
    assert skipped == {"prompts": "prompt side, not one value per response token",
                       "hidden": "shape [3, 4, 2], neither [B] nor the responses' layout"}


def test_scores_sit_where_the_trainer_put_them():
    """rladv's score position in a padded dump is the last non-padding position, as in the trainer: with a
    scalar score and the padding marked, the assembled rm_scores equal the trainer's token-level ones."""
    batch = padded_batch()
    batch["score"] = torch.tensor([1.0, 0.5, 1.0])
    del batch["token_level_scores"]
    table, _ = batch_table(batch)
    out, _ = rladv_cli.compute(table, estimator="grpo")
    assert out["token_level_rewards"].to_pylist() == [[0, 0, 1, 0], [0, 0, 0, 0.5], [1, 0, 0, 0]]


def test_an_all_ones_attention_mask_is_left_out_and_a_dataproto_is_read():
    batch = padded_batch()
    batch["attention_mask"] = torch.ones(3, 6, dtype=torch.long)
    uid = batch.pop("uid")
    table, skipped = batch_table(Proto(batch, {"uid": uid, "extra": np.array([{"k": 1}, {"k": 2}, None], dtype=object)}))
    assert "attention_mask" not in table.column_names
    assert skipped["attention_mask"] == "all ones over the responses: no padding to mark"
    assert table["uid"].to_pylist() == ["a", "a", "b"] and table["extra"].to_pylist() == [{"k": 1}, {"k": 2}, None]


def test_jagged_tensors_become_ragged_rows():
    mask = torch.nested.nested_tensor([torch.tensor([1, 1, 0]), torch.tensor([1, 1])], layout=torch.jagged)
    scores = torch.nested.nested_tensor([torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.0, 0.5])], layout=torch.jagged)
    other = torch.nested.nested_tensor([torch.tensor([1.0]), torch.tensor([1.0, 2.0, 3.0])], layout=torch.jagged)
    table, skipped = batch_table({"response_mask": mask, "rm_scores": scores, "other": other, "uid": ["p", "p"],
                                  "attention_mask": torch.ones(2, 3)})
    assert table.to_pylist() == [{"response_mask": [1, 1, 0], "rm_scores": [0.0, 0.0, 1.0], "uid": "p"},
                                 {"response_mask": [1, 1], "rm_scores": [0.0, 0.5], "uid": "p"}]
    assert skipped == {"other": "jagged [2, j] does not follow response_mask's jagged rows",
                       "attention_mask": "the rows are jagged: they hold no padding to mark"}


def test_a_batch_without_response_mask_is_an_input_error():
    with pytest.raises(rladv_cli.InputError, match="column response_mask: missing"):
        batch_table({"rm_scores": torch.zeros(2, 3)})
    with pytest.raises(rladv_cli.InputError, match="column step: the batch has a step field already"):
        batch_table({"response_mask": torch.ones(2, 3), "step": torch.tensor([1, 2])}, step=3)


def _padded_golden(case: dict, width: int) -> dict:
    """The golden case's input and verl's outputs as a trainer holds them: [B, width] tensors, right-padded,
    with the prompt and response attention mask."""
    table = pq.read_table(GOLDEN / case["input"])
    expected = pq.read_table(GOLDEN / case["expected"])
    rows = table.num_rows

    def pad(values, dtype):
        out = torch.zeros(rows, width, dtype=dtype)
        for i, v in enumerate(values):
            out[i, :len(v)] = torch.tensor(v, dtype=dtype)
        return out

    lengths = [len(r) for r in table["response_mask"].to_pylist()]
    batch = {"prompts": torch.ones(rows, 3, dtype=torch.long),
             "attention_mask": torch.cat([torch.ones(rows, 3, dtype=torch.long),
                                          pad([[1] * n for n in lengths], torch.long)], 1),
             "response_mask": pad(table["response_mask"].to_pylist(), torch.long),
             "rm_scores": pad(table["rm_scores"].to_pylist(), torch.float32)}
    for name in ("old_log_probs", "ref_log_prob", "rollout_log_probs", "values"):
        batch[name] = pad(table[name].to_pylist(), torch.float32)
    for name in ("token_level_rewards", "advantages", "returns"):
        batch[name] = pad(expected[name].to_pylist(), torch.float32)
    batch["uid"] = np.array(table["uid"].to_pylist(), dtype=object)
    return batch


@pytest.mark.parametrize("stem", ["mix__gae_g0.99_l0.95__kl", "mix__grpo__kl_k1", "mix__rpp_carry__plain"])
def test_a_padded_dump_of_verls_step_replays(stem, tmp_path):
    case = CASES[stem]
    dumped = dump_batch(_padded_golden(case, width=100), tmp_path / "step.parquet", step=0)
    lengths = [len(r) for r in pq.read_table(GOLDEN / case["input"])["response_mask"].to_pylist()]
    assert dumped.rows == 72 and dumped.tokens == sum(lengths) and "prompts" in dumped.skipped  # padding not counted
    report = tmp_path / "r.json"
    result = runner.invoke(app, ["compute", str(tmp_path / "step.parquet"), *case["rladv_args"], "-o",
                                      str(tmp_path / "out.parquet"), "--report", str(report), "-q", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert data["tokens"]["padding"] > 0
    assert data["replay"]["agree"], data["replay"]


def test_convert_reads_a_saved_batch(tmp_path):
    batch = padded_batch()
    torch.save(batch, tmp_path / "b.pt")
    with open(tmp_path / "b.pkl", "wb") as f:
        pickle.dump(Proto({k: v for k, v in batch.items() if k != "uid"}, {"uid": batch["uid"]}), f)
    result = runner.invoke(app, ["convert", str(tmp_path / "b.pt"), "--step", "5"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (f"{tmp_path / 'b.parquet'}: 3 rows, 8 tokens; columns responses, "
                                             "attention_mask, response_mask, rm_scores, old_log_probs, "
                                             "reward_baselines, uid, step (step 5)")
    assert "  left out prompts: prompt side, not one value per response token" in result.output
    result = runner.invoke(app, ["convert", str(tmp_path / "b.pkl"), "-o", str(tmp_path / "p.parquet")])
    assert result.exit_code == 2 and "Proto, beyond containers, numbers and numpy arrays" in result.output  # a class: code
    assert not (tmp_path / "p.parquet").exists()
    result = runner.invoke(app, ["convert", str(tmp_path / "b.pkl"), "--trust-pickle", "-o", str(tmp_path / "p.parquet")])
    assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "p.parquet").equals(pq.read_table(tmp_path / "b.parquet").drop_columns(["step"]))


class _Evil:
    """A pickle payload: unpickling it calls ``open(path, "w")``, creating a file."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_dump_is_data_not_code(tmp_path):
    """Without --trust-pickle nothing in a dump runs: a pickle whose payload would create a file is refused before
    it runs, with a one-line error naming the flag, and writes nothing; the same inside a torch.save file."""
    planted = tmp_path / "planted.txt"
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps({"response_mask": [[1, 1]], "x": _Evil(planted)}))
    torch.save({"response_mask": torch.ones(1, 2), "x": _Evil(planted)}, tmp_path / "evil.pt")
    before = sorted(p.name for p in tmp_path.iterdir())
    for name, what in (("evil.pkl", "is a pickle that needs io.open"), ("evil.pt", "holds io.open")):
        result = runner.invoke(app, ["convert", str(tmp_path / name)])
        assert result.exit_code == 2, result.output
        assert result.output == (f"Error: {tmp_path / name}: {what}, beyond " + (
            "containers, numbers and numpy arrays" if name.endswith("pkl") else "tensors, lists, dicts and numbers")
            + ": loading it runs code from the file; --trust-pickle loads it (only for a file you trust, e.g. "
            "verl's DataProto.save_to_disk output)\n")
        assert not planted.exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == before
    # plain data loads without the flag: tensors in a torch.save file, containers and numbers in a pickle
    torch.save(padded_batch(), tmp_path / "plain.pt")
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({
        "response_mask": np.array([[1, 1], [1, 0]], np.int64), "rm_scores": np.array([[0.0, 1.0], [0.5, 0.0]], np.float32),
        "uid": np.array(["a", "b"], dtype=object), "step": np.int64(3)}))
    for name in ("plain.pt", "plain.pkl"):
        result = runner.invoke(app, ["convert", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
    plain = pq.read_table(tmp_path / "plain.parquet")
    assert plain["rm_scores"].to_pylist() == [[0.0, 1.0], [0.5, 0.0]] and plain["uid"].to_pylist() == ["a", "b"]
    # the user says so: then it is unpickled fully (and the payload runs, as pickle does)
    result = runner.invoke(app, ["convert", str(tmp_path / "evil.pkl"), "--trust-pickle", "-o", str(tmp_path / "e.parquet")])
    assert planted.exists()


def test_convert_errors_are_one_line(tmp_path, monkeypatch):
    (tmp_path / "text.pkl").write_text("not a pickle")
    result = runner.invoke(app, ["convert", str(tmp_path / "text.pkl")])
    assert result.exit_code == 2 and result.output == (
        f"Error: {tmp_path / 'text.pkl'}: cannot be read as a saved batch (a torch.save or pickle file): "
        "invalid load key, 'n'.\n")
    # a pickle of a class from a package that is not installed here
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "gone_pkg.py").write_text("class Batch:\n    pass\n")
    monkeypatch.syspath_prepend(str(package))
    import gone_pkg
    (tmp_path / "gone.pkl").write_bytes(pickle.dumps(gone_pkg.Batch()))
    monkeypatch.delitem(sys.modules, "gone_pkg")
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(package)])
    result = runner.invoke(app, ["convert", str(tmp_path / "gone.pkl"), "--trust-pickle"])
    assert result.exit_code == 2 and "holds objects of the gone_pkg package, which is not installed here" in result.output
    assert not (tmp_path / "gone.parquet").exists() and not list(tmp_path.glob(".rladv-*"))
    # no response_mask: nothing written
    torch.save({"rm_scores": torch.zeros(2, 3)}, tmp_path / "nomask.pt")
    result = runner.invoke(app, ["convert", str(tmp_path / "nomask.pt")])
    assert result.exit_code == 2 and result.output == f"Error: {tmp_path / 'nomask.pt'}: column response_mask: missing; " \
        "the batch needs it to tell the responses' tokens\n"
    assert not (tmp_path / "nomask.parquet").exists()


@pytest.mark.verl
def test_a_real_dataproto_and_tensordict(tmp_path):
    """verl's own containers, where verl is installed (python -m pytest -m verl)."""
    protocol = pytest.importorskip("verl.protocol")
    from tensordict import NonTensorStack, TensorDict

    batch = padded_batch()
    uid = batch.pop("uid")
    proto = protocol.DataProto.from_dict(tensors=batch, non_tensors={"uid": uid})
    table, skipped = batch_table(proto)
    assert table["uid"].to_pylist() == ["a", "a", "b"] and "prompts" in skipped
    assert table.drop_columns(["uid"]).equals(batch_table(batch)[0])
    saved = tmp_path / "proto.pkl"
    proto.save_to_disk(str(saved))  # a pickle of verl's classes: code, so only with the user's word
    refused = runner.invoke(app, ["convert", str(saved)])
    assert refused.exit_code == 2 and "verl.protocol.DataProto" in refused.output and "--trust-pickle" in refused.output
    trusted = runner.invoke(app, ["convert", str(saved), "--trust-pickle"])
    assert trusted.exit_code == 0, trusted.output
    assert pq.read_table(tmp_path / "proto.parquet").drop_columns(["uid"]).equals(batch_table(batch)[0])
    mask = torch.nested.nested_tensor([torch.tensor([1, 1]), torch.tensor([1])], layout=torch.jagged)
    td = TensorDict({"response_mask": mask, "uid": NonTensorStack("x", "y")}, batch_size=2)
    table, _ = batch_table(td)
    assert table.to_pylist() == [{"response_mask": [1, 1], "uid": "x"}, {"response_mask": [1], "uid": "y"}]


def test_output_paths_are_refused_as_compute_refuses_them(tmp_path):
    torch.save(padded_batch(), tmp_path / "b.pt")
    onto = runner.invoke(app, ["convert", str(tmp_path / "b.pt"), "-o", str(tmp_path / "b.pt")])
    assert onto.exit_code == 2 and onto.output == f"Error: -o {tmp_path / 'b.pt'} is one of the inputs; rladv never writes onto its input\n"
    missing = runner.invoke(app, ["convert", str(tmp_path / "b.pt"), "-o", str(tmp_path / "no" / "b.parquet")])
    assert missing.exit_code == 2 and "folder " + str(tmp_path / "no") + " does not exist" in missing.output
    with pytest.raises(rladv_cli.OutputError, match="is a folder"):
        dump_batch(padded_batch(), tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["b.pt"]


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")  # the strided layout, on purpose
def test_what_a_trainer_batch_may_hold_is_written_or_said():
    """Found by an audit: empty dicts (verl's tools_kwargs), strided nested tensors, numpy float16, mixed uids."""
    strided = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    table, skipped = batch_table({
        "response_mask": strided, "rm_scores": torch.nested.nested_tensor([torch.zeros(2), torch.ones(3)]),
        "tools_kwargs": np.array([{}, {}], dtype=object), "uid": ["a", 1],
    })
    assert table.to_pylist() == [{"response_mask": [1, 1], "rm_scores": [0.0, 0.0], "uid": "a"},
                                 {"response_mask": [1, 1, 1], "rm_scores": [1.0, 1.0, 1.0], "uid": "1"}]
    assert skipped["tools_kwargs"].startswith("has type struct<>, which Parquet cannot store")
    table, _ = batch_table({"response_mask": np.ones((2, 3)), "rm_scores": np.full((2, 3), 0.5, np.float16),
                            "score": np.array([1, 2], np.float16), "uid": [3, 4]})
    assert table.schema.field("rm_scores").type == pa.list_(pa.float32()) and table.schema.field("score").type == pa.float32()
    assert table["uid"].to_pylist() == [3, 4]  # integer uids stay integers


def test_bad_batches_are_one_line_errors_naming_the_row(tmp_path):
    with pytest.raises(rladv_cli.InputError, match=r"^<batch>: row 1, column response_mask: has value 0.5 at position 2; masks must be 0 or 1$"):
        batch_table({"response_mask": torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.5]])})
    jagged = torch.nested.nested_tensor([torch.ones(2), torch.ones(0), torch.ones(1)], layout=torch.jagged)
    with pytest.raises(rladv_cli.InputError, match=r"^<batch>: row 1, column response_mask: is an empty response"):
        batch_table({"response_mask": jagged})
    with pytest.raises(rladv_cli.InputError, match=r"^step.pt: holds a Tensor, not a batch"):
        dump_batch(torch.ones(2, 3), tmp_path / "x.parquet", source="step.pt")
    with pytest.raises(rladv_cli.OutputError, match="^path is empty; give a file name$"):
        dump_batch(padded_batch(), "")
    assert not list(tmp_path.iterdir())


def test_convert_takes_the_step_from_meta_info_and_refuses_to_overwrite_its_input(tmp_path):
    proto = Proto({k: v for k, v in padded_batch().items() if k != "uid"}, {})
    proto.meta_info = {"global_steps": 42}
    (tmp_path / "b.pkl").write_bytes(pickle.dumps(proto))
    result = runner.invoke(app, ["convert", str(tmp_path / "b.pkl"), "--trust-pickle"])
    assert result.exit_code == 0 and result.output.splitlines()[0].endswith("(step 42)")
    assert pq.read_table(tmp_path / "b.parquet")["step"].to_pylist() == [42] * 3
    torch.save(torch.ones(2), tmp_path / "t.pt")
    result = runner.invoke(app, ["convert", str(tmp_path / "t.pt")])
    assert result.exit_code == 2 and result.output == (f"Error: {tmp_path / 't.pt'}: holds a Tensor, not a batch (a verl "
                                                       "DataProto, a TensorDict or a mapping of names to tensors and arrays)\n")
    (tmp_path / "s.parquet").write_bytes(pickle.dumps(proto))
    result = runner.invoke(app, ["convert", str(tmp_path / "s.parquet")])
    assert result.exit_code == 2 and "the default output " in result.output and "give -o OUT.parquet" in result.output


# ------------------------------------------------------------------ property: a padded dump computes as its rows
def _as_trainer_holds_it(table: pa.Table, extra: int) -> dict:
    """The ragged rows as [B, T] tensors right-padded to the longest response plus ``extra``, with the prompt and
    response attention mask, and uids as a per-row array."""
    rows = table.num_rows
    lengths = [len(r) for r in table["response_mask"].to_pylist()]
    width = max(lengths) + extra

    def pad(name, dtype):
        out = torch.zeros(rows, width, dtype=dtype)
        for i, r in enumerate(table[name].to_pylist()):
            out[i, :len(r)] = torch.tensor(r, dtype=dtype)
        return out

    batch = {"attention_mask": torch.cat([torch.ones(rows, 2, dtype=torch.long),
                                          (torch.arange(width) < torch.tensor(lengths)[:, None]).long()], 1),
             "response_mask": pad("response_mask", torch.long)}
    for name in ("rm_scores", "values", "old_log_probs", "ref_log_prob"):
        if name in table.column_names:
            batch[name] = pad(name, torch.float32)
    if "score" in table.column_names:
        batch["score"] = torch.tensor(table["score"].to_pylist(), dtype=torch.float32)
    batch["uid"] = np.array(table["uid"].to_pylist(), dtype=object)
    return batch


@settings(max_examples=25, deadline=None)
@given(data=st.data(), estimator=st.sampled_from(["gae", "grpo", "rloo", "reinforce_plus_plus", "opo"]),
       extra=st.integers(0, 5), kl=st.booleans())
def test_a_padded_dump_computes_what_its_ragged_rows_compute(data, estimator, extra, kl):
    """Scores land where the trainer put them (a scalar score at the last non-padding position), padding takes
    no part, and every value agrees with the ragged rows' (row totals are summed over the padded width, as the
    trainer sums them, so within float32 rounding)."""
    table = data.draw(S.rollouts(max_rows=12, max_len=12, min_valid=2), label="rollout").table()
    common = dict(estimator=estimator, device="cpu", kl_coef=0.05 if kl else 0.0)
    try:
        ragged, _ = rladv_cli.compute(table, **common)
    except rladv_cli.ComputeError:
        return
    padded, _ = rladv_cli.compute(batch_table(_as_trainer_holds_it(table, extra))[0], **common)
    for name in ("token_level_rewards", "advantages", "returns"):
        for r, p in zip(ragged[name].to_pylist(), padded[name].to_pylist()):
            np.testing.assert_allclose(p[:len(r)], r, rtol=1e-5, atol=1e-5, err_msg=name)
            assert not any(p[len(r):]), f"{name} beyond the response"
