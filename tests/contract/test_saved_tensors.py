"""Tensors as a trainer saves them: float masks of 0.0/1.0 (torch.ones) and [B, T] tensors as fixed_size_list
columns are read as the contract's lists; a mask value other than 0 and 1 is the usual one-line error."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from conftest import rladv


def _padded(seed: int = 0, B: int = 8, T: int = 12):
    """A padded batch as torch tensors: float masks, rm_scores at each row's last valid position, 2 rows a uid."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(3, T + 1, (B,), generator=g)
    attention = (torch.arange(T)[None, :] < lengths[:, None]).float()
    response = attention * (torch.rand(B, T, generator=g) > 0.2).float()
    response[:, 0] = 1.0
    scores = torch.zeros(B, T)
    scores[torch.arange(B), lengths - 1] = torch.randint(0, 2, (B,), generator=g).float()
    uid = [f"p{i // 2}" for i in range(B)]
    return uid, response, attention, scores, lengths


def _fixed(t: torch.Tensor) -> pa.Array:
    return pa.FixedSizeListArray.from_arrays(pa.array(t.flatten().numpy()), t.shape[1])


def _ragged(t: torch.Tensor, dtype) -> pa.Array:
    return pa.array([row.numpy().astype(dtype).tolist() for row in t], type=pa.list_(pa.from_numpy_dtype(dtype)))


def test_fixed_size_float_tensors_give_the_numbers_of_int8_lists(tmp_path):
    uid, response, attention, scores, _ = _padded()
    saved = pa.table({"uid": uid, "response_mask": _fixed(response), "attention_mask": _fixed(attention),
                      "rm_scores": _fixed(scores)})
    lists = pa.table({"uid": uid, "response_mask": _ragged(response, np.int8), "attention_mask": _ragged(attention, np.int8),
                      "rm_scores": _ragged(scores, np.float32)})
    pq.write_table(saved, tmp_path / "saved.parquet")
    pq.write_table(lists, tmp_path / "lists.parquet")
    for name in ("saved", "lists"):
        res = rladv("compute", tmp_path / f"{name}.parquet", "--estimator", "grpo", "-o", tmp_path / f"{name}.adv.parquet", "-q")
        assert res.exit_code == 0, res.stderr
    got, want = pq.read_table(tmp_path / "saved.adv.parquet"), pq.read_table(tmp_path / "lists.adv.parquet")
    for column in ("token_level_rewards", "response_mask", "advantages", "returns"):
        assert got[column].equals(want[column]), column
    assert got.schema.field("rm_scores").type == pa.list_(pa.float32())  # read, and carried, as a list


def test_a_float_mask_value_other_than_0_and_1_is_an_error_naming_row_and_column(tmp_path):
    uid, response, attention, scores, _ = _padded()
    response[5, 2] = 0.5
    pq.write_table(pa.table({"uid": uid, "response_mask": _fixed(response), "rm_scores": _fixed(scores)}),
                   tmp_path / "bad.parquet")
    res = rladv("compute", tmp_path / "bad.parquet", "--estimator", "grpo", "-o", tmp_path / "o.parquet")
    assert res.exit_code == 2
    assert res.stderr == (f"Error: {tmp_path / 'bad.parquet'}: row 5, column response_mask: has value 0.5; masks "
                          "must be 0 or 1\n")
    assert not (tmp_path / "o.parquet").exists()


def test_padded_dumps_of_different_widths_are_one_dataset(tmp_path):
    """Two steps saved at T = 12 and T = 16 (fixed_size_list<12> and <16>) read as one dataset, with the numbers
    of the same rows as ragged lists; a non-contract fixed-size column is carried as it is, or as a list where
    the files' widths differ."""
    for step, T in ((0, 12), (1, 16)):
        uid, response, attention, scores, _ = _padded(seed=step, T=T)
        emb = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(16, np.float32)), 2)
        pq.write_table(pa.table({"uid": [f"s{step}-{u}" for u in uid], "response_mask": _fixed(response),
                                 "attention_mask": _fixed(attention), "rm_scores": _fixed(scores), "emb": emb}),
                       tmp_path / f"step{step}.parquet")
        pq.write_table(pa.table({"uid": [f"s{step}-{u}" for u in uid], "response_mask": _ragged(response, np.int8),
                                 "attention_mask": _ragged(attention, np.int8),
                                 "rm_scores": _ragged(scores, np.float32), "emb": emb}),
                       tmp_path / f"lists{step}.parquet")
    res = rladv("compute", tmp_path / "step0.parquet", tmp_path / "step1.parquet", "--estimator", "grpo",
                "-o", tmp_path / "saved.adv.parquet", "-q")
    assert res.exit_code == 0, res.stderr
    res = rladv("compute", tmp_path / "lists0.parquet", tmp_path / "lists1.parquet", "--estimator", "grpo",
                "-o", tmp_path / "lists.adv.parquet", "-q")
    assert res.exit_code == 0, res.stderr
    got, want = pq.read_table(tmp_path / "saved.adv.parquet"), pq.read_table(tmp_path / "lists.adv.parquet")
    assert got["advantages"].equals(want["advantages"]) and got.num_rows == 16
    assert got.schema.field("emb").type == pa.list_(pa.float32(), 2)
    one = torch.ones(1, 2)
    wide = pa.table({"uid": ["x"], "response_mask": _ragged(one, np.int8), "attention_mask": _ragged(one, np.int8),
                     "rm_scores": _ragged(one, np.float32),
                     "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(3, np.float32)), 3)})
    pq.write_table(wide, tmp_path / "wide.parquet")
    res = rladv("compute", tmp_path / "lists0.parquet", tmp_path / "wide.parquet", "--estimator", "grpo",
                "-o", tmp_path / "o.parquet", "-q")
    assert res.exit_code == 0, res.stderr
    emb = pq.read_table(tmp_path / "o.parquet")["emb"]
    assert pa.types.is_list(emb.type) and emb.to_pylist()[-1] == [1.0, 1.0, 1.0] and len(emb.to_pylist()[0]) == 2
