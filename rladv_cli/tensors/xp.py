"""The one array namespace the math is written against (docs/arrays.md): numpy arrays on the CPU, torch tensors on
CUDA, one code path for both.

``namespace(x)`` is the array API standard over ``x``'s library (array-api-compat wraps numpy and torch into
it); the functions here add what the standard lacks and the kernels need: scatter-adds in row order, counts,
repeats, and the conversions at the edges (Arrow buffers in, tensors to another device). Nothing here imports
torch: a tensor only reaches this module from a caller that made one, so ``rladv compute`` on the CPU runs on
numpy alone.
"""
from __future__ import annotations

import sys
import warnings
from typing import Any, Optional

import numpy as np
from array_api_compat import array_namespace, device as _device_of, is_numpy_array

Array = Any  # numpy.ndarray on the CPU, torch.Tensor on CUDA (or a CPU tensor a library caller passes)

CPU = "cpu"


def namespace(*arrays: Optional[Array]):
    """The array API namespace of ``arrays`` (None entries skipped): numpy itself (numpy 2.1 implements the
    standard; array-api-compat's wrapper of it costs 0.1 s of imports), else array-api-compat's torch."""
    given = [a for a in arrays if a is not None]
    if all(is_numpy_array(a) for a in given):
        return np
    return array_namespace(*given)


def is_numpy(x: Array) -> bool:
    return is_numpy_array(x)


def on_cpu(x: Array) -> bool:
    return is_numpy_array(x) or x.device.type == "cpu"


def to_numpy(x: Array) -> np.ndarray:
    """The values of ``x`` as a numpy array (no copy for a numpy array or a CPU tensor)."""
    if is_numpy_array(x):
        return x
    return x.detach().cpu().numpy()


def like(a: np.ndarray, ref: Array) -> Array:
    """``a`` as the kind of array ``ref`` is: itself for numpy, a tensor on ``ref``'s device for torch."""
    if is_numpy_array(ref):
        return a
    return _tensor(a, ref.device)


def on_device(a: np.ndarray, device: str) -> Array:
    """A numpy array as the arrays of ``device`` hold it: itself on the CPU, a tensor elsewhere."""
    if device == CPU:
        return a
    return _tensor(a, device)


def _tensor(a: np.ndarray, device) -> Array:
    # Arrow buffers are read-only; the tensors made from them are never written in place.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return _torch().from_numpy(np.ascontiguousarray(a) if a.ndim else np.asarray(a)).to(device)


def numel(x: Array) -> int:
    return int(x.size) if is_numpy_array(x) else x.numel()


def float32(x: Array) -> Array:
    return namespace(x).astype(x, namespace(x).float32, copy=False)


def float64(x: Array) -> Array:
    return namespace(x).astype(x, namespace(x).float64, copy=False)


def int64(x: Array) -> Array:
    return namespace(x).astype(x, namespace(x).int64, copy=False)


def flatnonzero(mask: Array) -> Array:
    """Indices where ``mask`` is true, ``(K,) int64``."""
    if is_numpy_array(mask):
        return np.flatnonzero(mask)
    return mask.nonzero().flatten()


def unique(x: Array) -> Array:
    """The distinct values of ``x``, ascending."""
    if is_numpy_array(x):
        return np.unique(x)
    return _torch().unique(x, sorted=True)


def bincount(index: Array, minlength: int, weights: Optional[Array] = None) -> Array:
    """``out[g] = #{k: index_k = g}`` (int64), or ``Σ weights_k`` over them (float64); ``(max(minlength, max+1),)``."""
    if is_numpy_array(index):
        out = np.bincount(index, weights=weights, minlength=minlength)
        return out if weights is not None else out.astype(np.int64, copy=False)
    return _torch().bincount(index, weights=weights, minlength=minlength)


def index_add(n: int, index: Array, values: Array) -> Array:
    """``out (n,)`` in ``values``' dtype with ``values[k]`` added at ``index[k]`` one after the other in ``k`` order
    (the order verl's scatter adds in, so float32 sums round as its do)."""
    xp = namespace(values)
    out = xp.zeros(n, dtype=values.dtype, device=dev(values))
    if is_numpy_array(values):
        np.add.at(out, index, values)
        return out
    return out.index_add_(0, index, values)


def scatter_max(n: int, index: Array, values: Array, initial: float) -> Array:
    """``out[g] = max(initial, max {values_k: index_k = g})``; ``(n,)`` in ``values``' dtype."""
    return _scatter(n, index, values, initial, np.maximum, "amax")


def scatter_min(n: int, index: Array, values: Array, initial: float) -> Array:
    """``out[g] = min(initial, min {values_k: index_k = g})``; ``(n,)`` in ``values``' dtype."""
    return _scatter(n, index, values, initial, np.minimum, "amin")


def _scatter(n: int, index: Array, values: Array, initial: float, ufunc, reduce: str) -> Array:
    out = namespace(values).full(n, initial, dtype=values.dtype, device=dev(values))
    if is_numpy_array(values):
        ufunc.at(out, index, values)
        return out
    return out.scatter_reduce_(0, index, values, reduce=reduce)


def exp32(x: Array) -> Array:
    """``exp(x)`` in ``x``'s dtype; numpy float32 through float64, rounded once (docs/arrays.md: torch's CPU ``exp``
    is that correctly rounded value on ~99% of inputs, numpy's own float32 ``exp`` on ~60%)."""
    if is_numpy_array(x) and x.dtype == np.float32:
        with np.errstate(over="ignore"):
            return np.exp(x.astype(np.float64)).astype(np.float32)
    return namespace(x).exp(x)


def log32(x: Array) -> Array:
    """``log(x)`` in ``x``'s dtype; numpy float32 through float64, rounded once (as ``exp32``)."""
    if is_numpy_array(x) and x.dtype == np.float32:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(x.astype(np.float64)).astype(np.float32)
    return namespace(x).log(x)


def repeat(values: Array, counts: Array) -> Array:
    """``values[i]`` repeated ``counts[i]`` times, in order: ``(B,) -> (Σ counts,)``."""
    if is_numpy_array(values):
        return np.repeat(values, counts)
    return values.repeat_interleave(counts)


def dev(x: Array):
    """``x``'s device, to create arrays beside it (``xp.zeros(n, device=dev(x))``)."""
    return _device_of(x)


def _torch():
    """torch, which a caller holding tensors has already imported."""
    return sys.modules.get("torch") or __import__("torch")
