"""check_chunk's ``validated``: later passes skip the value checks of columns an earlier pass checked, never
the checks that tie a new column to them."""
import pyarrow as pa
import pytest

from conftest import I8, table
from rladv_cli.contract.validation import check_chunk
from rladv_cli.errors import InputError


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


MASK_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.bool_()]
NUMBER_TYPES = [pa.float16(), pa.float32(), pa.float64(), pa.int32(), pa.int64(), pa.uint64()]


@pytest.mark.parametrize("kind", MASK_TYPES, ids=str)
def test_mask_values_other_than_0_and_1_are_found_first_in_any_integer_type(kind):
    """``_first_not_0_or_1`` reads signed masks as unsigned: -1 is found like 2, at the first such row."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rladv_cli.contract.columns import numpy_of
    from rladv_cli.contract.validation import _first_not_0_or_1

    elements = st.booleans() if kind == pa.bool_() else st.integers(-2 if pa.types.is_signed_integer(kind) else 0, 3)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(elements, min_size=1, max_size=40))
    def check(values):
        arr = pa.array(values, kind)
        v = numpy_of(arr)
        want = next((i for i, x in enumerate(values) if x not in (0, 1)), None)
        assert _first_not_0_or_1(v) == want, (values, v.dtype)

    check()


@pytest.mark.parametrize("kind", NUMBER_TYPES, ids=str)
def test_numbers_that_are_not_finite_float32_are_found_first(kind):
    """NaN, ±inf and values beyond float32's range (finite in float64) are found; integers never are."""
    import numpy as np
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from rladv_cli.contract.columns import numpy_of
    from rladv_cli.contract.validation import _first_not_float32

    if pa.types.is_integer(kind):
        elements = st.integers(0, 2**31 - 1)
    else:
        elements = st.sampled_from([0.0, -1.5, 3e38, float("nan"), float("inf"), float("-inf"), 65504.0, 1e39])
        if kind == pa.float64():
            elements = elements | st.floats(allow_nan=True, allow_infinity=True)

    @settings(max_examples=60, deadline=None)
    @given(st.lists(elements, min_size=1, max_size=40))
    def check(values):
        dtype = {pa.float16(): np.float16, pa.float32(): np.float32}.get(kind, np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            raw = np.asarray(values, dtype=dtype)
            as_float32 = raw.astype(np.float32)
        want = None if pa.types.is_integer(kind) else next(
            (i for i, x in enumerate(as_float32) if not np.isfinite(x)), None)
        v = raw if kind == pa.float16() else numpy_of(pa.array(values, kind))
        assert _first_not_float32(v) == want, (values, v.dtype)

    check()


@pytest.mark.parametrize(("t", "values"), [(pa.int64(), [2**62, -(2**63), 2**53 + 1]), (pa.uint64(), [2**64 - 1, 0, 1])])
def test_integer_scores_beyond_2_53_pass_the_finite_check(t, values):
    """Arrow's safe cast to float64 refuses integers beyond ±2**53 (ArrowInvalid, a traceback in every
    command); every integer is a finite float32, which is the check."""
    table = pa.table({"response_mask": pa.array([[1]] * 3, I8), "score": pa.array(values, t)})
    check_chunk(table, "f.parquet", 0)
    nan = pa.table({"response_mask": pa.array([[1]] * 2, I8), "score": pa.array([1.0, float("nan")], pa.float64())})
    with pytest.raises(InputError, match="finite") as err:
        check_chunk(nan, "f.parquet", 4)
    assert err.value.row == 5 and err.value.column == "score"
