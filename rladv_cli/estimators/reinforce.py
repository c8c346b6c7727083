"""REINFORCE++ (Hu 2025, arXiv:2501.03262): verl's ``reinforce_plus_plus`` and ``reinforce_plus_plus_baseline``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..tensors import xp as X
from ..tensors.batch import Batch
from ..tensors.kernels import reverse_linear_scan
from ..tensors.xp import Array
from .derivation import Derivation, Row
from .inputs import Inputs
from .registry import Estimator

if TYPE_CHECKING:
    from ..config.settings import Params


def reinforce_plus_plus(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """Discounted reward-to-go ``G (N,)`` over actor tokens; the pipeline whitens it over the batch
    (docs/semantics.md §7.7).

    ``m_t = 1``: ``G_t = r_t + γ·run``. At ``m_t = 0`` the running return, in ``carry`` mode (the default,
    verl 0.9.1): passes through unchanged, the position's own reward dropped; in ``reset`` mode (verl before
    0.9, and the chapter: docs/semantics.md §13) restarts at 0, so tokens left of an observation or rejected
    token never see rewards right of it. returns = G, 0 off-mask.
    """
    m = batch.response_mask
    keep = params.gamma * m if params.rpp_mask_mode == "reset" else params.gamma * m + (1 - m)
    # the scan's output is a new array (its inputs are temporaries too): masked in place, no second copy
    returns = reverse_linear_scan(keep, batch.token_level_rewards * m, batch.row_offsets)
    returns *= m
    return returns, returns


def credit_cut_rows(batch: Batch, inputs: Inputs, params: Params) -> Array:
    """Rows ``(B,) bool`` whose returns the mask mode decides: at some mask-0 position ``t`` with an actor token
    before it in its row, ``carry`` passes ``γ·h_t ≠ 0`` back to the earlier tokens (``h`` the carry scan) and
    ``reset`` cuts it off. Exactly the rows whose returns differ between the two modes (a reward sitting on a
    mask-0 position itself is dropped by both).

    Only the ``m = 0`` positions are looked at: of the ``k``-th one, at ``t`` in row ``i``, the tokens before it
    in the row are ``t − start_i`` and the ``m = 0`` ones among them ``k − first_i``, ``first_i`` the index of
    the row's first ``m = 0`` position."""
    m = batch.response_mask
    xp = X.namespace(m)
    cut = xp.zeros(batch.num_rows, dtype=xp.bool, device=X.dev(m))
    at = X.flatnonzero(m == 0)
    if X.numel(at) == 0:
        return cut
    offsets = batch.row_offsets
    row = xp.searchsorted(offsets, at, side="right") - 1
    carried = params.gamma * reverse_linear_scan(params.gamma * m + (1 - m), batch.token_level_rewards * m, offsets)
    first = xp.searchsorted(at, offsets[:-1])
    kept_before = (at - offsets[row]) > (xp.arange(X.numel(at), device=X.dev(m)) - first[row])
    cut[row[(carried[at] != 0) & kept_before]] = True
    return cut


def reinforce_plus_plus_baseline(batch: Batch, inputs: Inputs, params: Params) -> tuple[Array, Array]:
    """``X[i,t] = (R_i − b_g)·m[i,t]`` with ``b_g`` the float32 group mean (0 for a singleton); the pipeline
    whitens ``X`` over the batch (docs/semantics.md §7.8). returns = advantages."""
    x = batch.per_token(inputs.reward_total - inputs.groups.mean[inputs.group_index]) * batch.response_mask
    return x, x


def explain(est: Estimator, row: Row, params: Params, whitening: dict) -> Derivation:
    """The reward-to-go recursion for one row (float64 for reading), marking each mask-0 position: the return
    that ``reset`` cuts off there or ``carry`` passes on to an earlier actor token (the rows of
    ``credit_cut_rows``), and a reward on the position itself, which both modes drop."""
    m, r, adv = row["response_mask"], row["token_level_rewards"], row["advantages"]
    reset = params.rpp_mask_mode == "reset"
    running, table = 0.0, [None] * m.size
    for t in reversed(range(m.size)):
        if m[t]:
            running = r[t] + params.gamma * running
            table[t] = [t, 1, r[t], running, "", adv[t]]
        else:
            mark = params.rpp_mask_mode
            if params.gamma * running and m[:t].any():
                mark += f": return {running:.4g} " + ("cut" if reset else "passed on")
            if r[t]:
                mark += f"; its reward {r[t]:.4g} dropped"
            running = 0.0 if reset else running
            table[t] = [t, 0, r[t], None, mark, adv[t]]
    rule = "reset to 0 (verl before 0.9, the chapter)" if reset else "carried through unchanged (verl 0.9.1)"
    return Derivation(
        formula=["G_t = r_t + gamma * G_(t+1) on actor tokens",
                 f"at mask-0 positions the running return is {rule}",
                 "advantages = (G - batch mean) / sqrt(batch var + 1e-8), 0 off-mask; returns = G"],
        constants={"gamma": params.gamma, "mode": params.rpp_mask_mode, **whitening},
        columns=["t", "mask", "reward", "reward-to-go G", "mask-0 point", "advantage"], tokens=table)
