"""One array namespace: the kernels give numpy arrays the same bits as torch tensors, and torch's float32 sum
order is reproduced without torch (docs/arrays.md)."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rladv_cli.tensors import kernels
from rladv_cli.tensors import xp as X
from rladv_cli.tensors.groups import STATISTICS, group_stats

WIDTHS = [*range(1, 80), 127, 128, 129, 255, 256, 257, 511, 1000, 1024, 2047, 4096, 5000, 8193, 40000]


@pytest.mark.parametrize("width", WIDTHS)
def test_torch_row_sums_add_as_torchs_cpu_sum_kernel(width):
    """Values of mixed magnitudes, so that any other order of the float32 additions shows."""
    rng = np.random.default_rng(width)
    m = (rng.normal(size=(5, width)) * rng.choice([1.0, 1e-3, 1e4], size=(5, width))).astype(np.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        want = torch.from_numpy(m).sum(dim=1).numpy()
        want_mean = torch.from_numpy(m).mean(dim=1).numpy()
    finally:
        torch.set_num_threads(threads)
    got = kernels.torch_row_sums(m)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.int32), want.view(np.int32))
    assert np.array_equal((got / np.float32(width)).view(np.int32), want_mean.view(np.int32))


def test_the_namespace_of_numpy_arrays_is_not_torch():
    assert "numpy" in X.namespace(np.zeros(2)).__name__
    assert "torch" in X.namespace(torch.zeros(2)).__name__
    assert X.is_numpy(np.zeros(1)) and not X.is_numpy(torch.zeros(1))


ragged = st.lists(st.integers(0, 40), min_size=1, max_size=10)


def both(a: np.ndarray):
    return a, torch.from_numpy(a.copy())


def same(n, t, signed_zeros: bool = True) -> None:
    """The same bits; without ``signed_zeros``, the same values (the max of -0.0 and +0.0 is either)."""
    assert X.is_numpy(n) and isinstance(t, torch.Tensor)
    t = t.numpy()
    assert n.dtype == t.dtype and n.shape == t.shape
    if not signed_zeros:
        n, t = n + 0.0, t + 0.0
    view = {4: np.int32, 8: np.int64, 1: np.int8}[n.dtype.itemsize]
    assert np.array_equal(n.view(view), t.view(view)), (n, t)


@settings(max_examples=40, deadline=None)
@given(lengths=ragged, seed=st.integers(0, 2**31 - 1))
def test_kernels_give_numpy_the_bits_they_give_torch(lengths, seed):
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    x = (rng.normal(size=n) * rng.choice([0.0, 1.0, 1e3], size=n)).astype(np.float32)
    a = rng.choice([0.0, 0.5, 1.0], size=n).astype(np.float32)
    valid = rng.random(n) < 0.7
    (xn, xt), (an, at), (vn, vt), (on, ot) = both(x), both(a), both(valid), both(offsets)
    same(kernels.segment_sum(xn, on), kernels.segment_sum(xt, ot))
    for f in (kernels.segment_max, kernels.segment_min):
        same(f(xn, on), f(xt, ot), signed_zeros=False)
    nonempty = np.asarray(lengths) > 0
    same(kernels.broadcast_rows(np.arange(len(lengths), dtype=np.float32), on),
         kernels.broadcast_rows(torch.arange(len(lengths), dtype=torch.float32), ot))
    if nonempty.all():
        same(kernels.shift_left_in_row(xn, on), kernels.shift_left_in_row(xt, ot))
        same(kernels.reverse_linear_scan(an, xn, on), kernels.reverse_linear_scan(at, xt, ot))
        same(kernels.cumsum_in_row(xn, on), kernels.cumsum_in_row(xt, ot))
    same(kernels.log_depth_scan(an.astype(np.float64), xn.astype(np.float64), on),
         kernels.log_depth_scan(at.double(), xt.double(), ot))
    for name, value in kernels.row_summary(xn, vn, on).items():
        same(value, kernels.row_summary(xt, vt, ot)[name], signed_zeros=name not in ("min", "max"))
    keep = rng.random(len(lengths)) < 0.5
    for got_n, got_t in zip(kernels.select_rows(keep, on), kernels.select_rows(torch.from_numpy(keep), ot)):
        same(got_n, got_t)
    width = np.full(len(lengths), max(lengths), dtype=np.int64)
    same(kernels.padded_row_sum(xn, on, width), kernels.padded_row_sum(xt, ot, torch.from_numpy(width)))


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 60), groups=st.integers(1, 12), seed=st.integers(0, 2**31 - 1))
def test_group_statistics_of_numpy_and_torch_inputs_are_the_same_bits(rows, groups, seed):
    rng = np.random.default_rng(seed)
    index = rng.integers(0, groups, rows)
    total = rng.choice([0.0, 0.5, 1.0, 1.0 + 1e-6], rows).astype(np.float32)
    count = rng.integers(0, 4, rows)
    n = group_stats(total, index, groups, count)
    t = group_stats(torch.from_numpy(total), torch.from_numpy(index), groups, torch.from_numpy(count))
    for name in ("size", *STATISTICS):
        same(getattr(n, name), getattr(t, name))
