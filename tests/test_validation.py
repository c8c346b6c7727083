"""check_chunk's ``validated``: later passes skip the value checks of columns an earlier pass checked, never
the checks that tie a new column to them."""
import pyarrow as pa
import pytest

from rladv_cli.errors import InputError
from rladv_cli.validation import check_chunk

I8, F32 = pa.list_(pa.int8()), pa.list_(pa.float32())


def table(**columns):
    types = {"response_mask": I8, "attention_mask": I8, "rm_scores": F32, "values": F32}
    return pa.table({name: pa.array(rows, types[name]) for name, rows in columns.items()})


def test_a_validated_column_is_not_checked_again():
    t = table(response_mask=[[1, 2, 1]], rm_scores=[[0.0, 0.0, 1.0]])
    with pytest.raises(InputError, match="masks must be 0 or 1"):
        check_chunk(t, "f.parquet", 0)
    check_chunk(t, "f.parquet", 0, frozenset({"response_mask"}))


def test_a_new_column_is_still_checked_against_validated_lengths():
    t = table(response_mask=[[1, 1, 1], [1]], values=[[0.0, 0.0, 1.0], [0.5, 0.5]])
    with pytest.raises(InputError, match="has length 2 but response_mask has 1") as err:
        check_chunk(t, "f.parquet", 10, frozenset({"response_mask"}))
    assert err.value.row == 11 and err.value.column == "values"


def test_padding_is_checked_when_either_mask_is_new():
    t = table(response_mask=[[1, 1, 1]], attention_mask=[[1, 1, 0]])
    for validated in ({"response_mask"}, {"attention_mask"}, set()):
        with pytest.raises(InputError, match="padding position"):
            check_chunk(t, "f.parquet", 0, frozenset(validated))
    check_chunk(t, "f.parquet", 0, frozenset({"response_mask", "attention_mask"}))
