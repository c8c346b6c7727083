"""Whether this host's CPU ``torch.exp`` rounds as the host of the exact expectations did.

Some expectations are exact to the last bit of a float32 ``exp``: verl's recorded golden outputs with an
exp-based KL penalty in near-tied groups (an ulp of a reward total moves a std-normalised advantage by up to
~1e-3) and the recorded importance weights ``exp(S_i)``. ``torch.exp`` is not correctly rounded and its last
bit depends on the host: on the H200 machine's Intel Xeon host (torch 2.11.0+cu130) it differed by one ulp on
1.7% of these probe values, and verl's own functions move with it. There the tests that depend on that bit
use the tolerance an ulp can explain; on a host that rounds as the recording one (this project's machines,
torch 2.11 and 2.13), they stay exact. Such a host has other kernels too: on an Intel AVX512 host where ``exp``
differed, so did the summation order of float32 ``matmul`` (NeMo-RL's per-group baseline), so the tests of
NeMo-RL's near-tied groups take the same flag.
"""
import hashlib

import numpy as np
import torch

# sha256 of torch.exp over the probe below, on the host whose outputs the golden files and this project
# recorded (x86-64 with AVX512; torch 2.11 and 2.13 CPU alike)
RECORDING_HOST = "d918fdc783e1087a75231cf9178c912afa0a28a51187f0a2310e56267d496ebf"


def exp_fingerprint() -> str:
    """sha256 of float32 ``torch.exp`` over 100,003 draws of N(0, 0.05²) (the size of low_var_kl's
    arguments) and 200,003 points evenly over [-20, 20]."""
    small = np.random.default_rng(0).normal(0.0, 0.05, 100_003).astype(np.float32)
    wide = np.linspace(-20.0, 20.0, 200_003, dtype=np.float32)
    out = torch.exp(torch.from_numpy(np.concatenate([small, wide])))
    return hashlib.sha256(out.numpy().tobytes()).hexdigest()


SAME_EXP = exp_fingerprint() == RECORDING_HOST
