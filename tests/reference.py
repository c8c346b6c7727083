"""Slow, obvious oracle for verl 0.9.1's reward shaping and advantage estimators.

Written from docs/semantics.md ([P] = verl 0.9.1), not from rladv: plain Python loops over rows and time
steps, every step in float32 in the order verl evaluates it.  Inputs are lists of rows (ragged lists or
arrays of floats; masks 0/1); outputs are lists of float32 numpy rows of the same lengths, holding
verl's *raw* values (nothing is zeroed that verl does not zero).

Numeric conventions (docs/semantics.md §0):
- a Python constant (γ, ε, β, 1e-8) is rounded to float32 when it meets a float32 value (``_f``);
- γ·λ is formed in float64 and rounded once;
- "× m" is a multiplication by the 0/1 mask, never a selection (NaN·0 = NaN, (−a)·0 = −0.0);
- sums accumulate in float32 in row order.  torch's SIMD order differs by a few ulps; std-normalised
  group advantages of near-tied groups (σ ~ 1e-4) amplify that by 1/σ, which the golden test allows
  for explicitly (tests/estimators/test_reference.py, ``_reduction_slack``).
"""

import numpy as np

F32 = np.float32


def _f(c):
    """Round a Python constant to float32, as torch does when it meets a float32 tensor."""
    return F32(c)


def _rows(rows):
    return [np.asarray(row, dtype=F32) for row in rows]


def _fsum(values):
    """Σ values, accumulated sequentially in float32."""
    s = F32(0.0)
    for v in values:
        s = F32(s + v)
    return s


def _groups(uids):
    """{uid: [row indices]} keyed on the raw label (a Python dict: equal labels share a group),
    members in row order (docs/semantics.md §2.3)."""
    groups = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    return groups


# --------------------------------------------------------------------------- §1 score assembly


def assemble_scores(lengths, score=None, rm_scores=None, attention_mask=None):
    """token_level_scores per row (docs/semantics.md §1).

    rm_scores given: copied verbatim (float32).  Scalar ``score[i]``: a float32 zero row with
    float32(score_i) at p_i = (#ones in attention_mask[i]) − 1, or L_i − 1 without an attention mask.
    p_i = −1 (nothing to count) wraps, as verl's indexing does, to the last column T − 1 of the
    padded [B, T] tensor (T = max L_i); the rows are then cut back to their lengths L_i.
    """
    if rm_scores is not None:
        return _rows(rm_scores)
    if score is None:
        raise ValueError("need score or rm_scores")
    lengths = [int(n) for n in lengths]
    T = max(lengths, default=0)
    padded = np.zeros((len(lengths), T), dtype=F32)
    for i, s_i in enumerate(score):
        if attention_mask is not None:
            p_i = int(sum(1 for a in attention_mask[i] if a == 1)) - 1
        else:
            p_i = lengths[i] - 1
        padded[i, p_i] = F32(s_i)  # p_i = −1 → column T − 1, like torch
    return [padded[i, :n].copy() for i, n in enumerate(lengths)]


# --------------------------------------------------------------------------- §2.1 masked reductions


def masked_sum(row, mask):
    """Σ_t where(m_t ≠ 0, x_t, 0) · m_t over one row (select first, then multiply)."""
    return _fsum(F32(F32(x if m != 0 else 0.0) * F32(m)) for x, m in zip(row, mask))


def masked_mean_row(row, mask):
    """masked_sum / (float32(Σ m) + 1e-8): a row without valid tokens gives 0, not NaN."""
    n = _fsum(F32(m) for m in mask)
    return F32(masked_sum(row, mask) / F32(n + _f(1e-8)))


def masked_mean(rows, masks):
    """masked_mean over the whole batch (all rows, row-major order)."""
    flat_x = [x for row in rows for x in row]
    flat_m = [m for mask in masks for m in mask]
    return masked_mean_row(flat_x, flat_m)


def masked_var(rows, masks):
    """Unbiased batch variance: v = masked_mean((x − μ)², m) · (N / (N − 1)), N = Σ m.

    Deviations are taken at every position, then masked.  Raises verl's ValueErrors for N ≤ 1.
    """
    rows = _rows(rows)
    masks = _rows(masks)
    mu = masked_mean(rows, masks)
    dev = [(row - mu).astype(F32) for row in rows]
    v = masked_mean([(d * d).astype(F32) for d in dev], masks)
    N = _fsum(m for mask in masks for m in mask)
    if N == 0:
        raise ValueError("At least one element in the mask has to be 1.")
    if N == 1:
        raise ValueError("The sum of the mask is one, which can cause a division by zero.")
    bessel = F32(N / F32(N - F32(1.0)))  # one float32 division
    return F32(v * bessel)


def masked_whiten(rows, masks):
    """out[i,t] = (x[i,t] − μ) · rsqrt(var + 1e-8) at EVERY position (masked or not), [B, T] → [B, T].

    μ = masked_mean(x, m), var = masked_var(x, m) over the whole batch.
    """
    rows = _rows(rows)
    mu = masked_mean(rows, _rows(masks))
    var = masked_var(rows, masks)
    inv_std = F32(F32(1.0) / np.sqrt(F32(var + _f(1e-8))))
    return [((row - mu).astype(F32) * inv_std).astype(F32) for row in rows]


# --------------------------------------------------------------------------- §4 KL shaping


def _kl_forward(logprob, ref_logprob, mode):
    d = (logprob - ref_logprob).astype(F32)
    if mode in ("kl", "k1"):
        return d
    if mode == "abs":
        return np.abs(d)
    if mode in ("mse", "k2"):
        return (_f(0.5) * (d * d).astype(F32)).astype(F32)
    if mode in ("low_var_kl", "k3"):
        k = np.clip((ref_logprob - logprob).astype(F32), _f(-20), _f(20)).astype(F32)
        # exp correctly rounded from float64: torch's float32 exp is within 1 ulp of that, numpy's
        # float32 exp often is not, and that ulp is amplified in near-tied GRPO groups
        ratio = np.exp(k.astype(np.float64)).astype(F32)
        e = ((ratio - k).astype(F32) - _f(1)).astype(F32)
        return np.clip(e, _f(-10), _f(10)).astype(F32)
    if mode == "full":
        raise NotImplementedError("full KL is not implemented")
    raise NotImplementedError(f"unknown kl_penalty mode: {mode!r}")


def kl_penalty(logprob, ref_logprob, mode):
    """Per-token KL estimate of one row, d = logprob − ref_logprob (docs/semantics.md §4.1, [P]).

    kl/k1: d; abs: |d|; mse/k2: 0.5·d²; low_var_kl/k3: clamp(exp(k) − k − 1, −10, 10) with
    k = clamp(−d, −20, 20).  ``<mode>+`` ([P]): straight-through b − b + value(mode) with
    b = 0.5·d², so the value is the base mode's unless b is inf/NaN (then NaN).
    """
    logprob = np.asarray(logprob, dtype=F32)
    ref_logprob = np.asarray(ref_logprob, dtype=F32)
    # float32 overflow to inf (and inf − inf = NaN below) is what verl computes, not an accident
    with np.errstate(over="ignore", invalid="ignore"):
        if not mode.endswith("+"):
            return _kl_forward(logprob, ref_logprob, mode)
        forward = _kl_forward(logprob, ref_logprob, mode[:-1])
        d = (logprob - ref_logprob).astype(F32)
        b = (_f(0.5) * (d * d).astype(F32)).astype(F32)
        return ((b - b).astype(F32) + forward).astype(F32)


def apply_kl(scores_rows, old_rows, ref_rows, m0_rows, beta, mode):
    """use_kl_in_reward (docs/semantics.md §4.2): kld = kl_penalty(old, ref) × m0, r = s − β·kld.

    Returns (rewards rows, current_kl) with current_kl = mean over ALL rows of the per-row
    masked_mean(kld, m0) (rows without a valid token count as 0), as a Python float.
    """
    rewards, row_kl = [], []
    for s, old, ref, m0 in zip(_rows(scores_rows), old_rows, ref_rows, _rows(m0_rows)):
        kld = (kl_penalty(old, ref, mode) * m0).astype(F32)
        rewards.append((s - (_f(beta) * kld).astype(F32)).astype(F32))
        row_kl.append(masked_mean_row(kld, m0))
    current_kl = F32(_fsum(row_kl) / F32(len(row_kl)))
    return rewards, float(current_kl)


def adaptive_kl_step(value, current_kl, target, horizon, n_steps):
    """AdaptiveKLController.update (float64): e = clip(kl/target − 1, ±0.2);
    value · (1 + e · n_steps / horizon)."""
    assert horizon > 0, f"horizon must be > 0, got {horizon}"
    e = float(np.clip(current_kl / target - 1, -0.2, 0.2))
    return value * (1 + e * n_steps / horizon)


# --------------------------------------------------------------------------- §7.1 GAE


def gae(rewards, values, masks, gamma, lam):
    """verl's compute_gae_advantage_return, row by row, t = T−1 … 0 (docs/semantics.md §7.1).

        delta      = (r_t + γ·nextvalues) − V_t
        lastgaelam_ = delta + float32(γ·λ)·lastgaelam
        nextvalues = V_t·m_t + (1 − m_t)·nextvalues          # mask-0 steps pass the state through
        lastgaelam = lastgaelam_·m_t + (1 − m_t)·lastgaelam

    returns = A_raw + V; advantages = masked_whiten(A_raw, m), NOT multiplied by the mask.
    """
    g, c = _f(gamma), _f(gamma * lam)  # γ·λ in float64, rounded once
    a_raw = []
    for r, V, m in zip(_rows(rewards), _rows(values), _rows(masks)):
        nextvalues, lastgaelam = F32(0.0), F32(0.0)
        A = np.zeros(len(r), dtype=F32)
        for t in reversed(range(len(r))):
            delta = F32(F32(r[t] + F32(g * nextvalues)) - V[t])
            lastgaelam_ = F32(delta + F32(c * lastgaelam))
            keep, skip = m[t], F32(F32(1.0) - m[t])
            nextvalues = F32(F32(V[t] * keep) + F32(skip * nextvalues))
            lastgaelam = F32(F32(lastgaelam_ * keep) + F32(skip * lastgaelam))
            A[t] = lastgaelam
        a_raw.append(A)
    returns = [(A + V).astype(F32) for A, V in zip(a_raw, _rows(values))]
    return masked_whiten(a_raw, masks), returns


# --------------------------------------------------------------------------- §7.2–7.6 outcome estimators


def _outcome(rewards):
    """R_i = Σ_t r[i,t] over all positions (never masked)."""
    return [_fsum(r) for r in _rows(rewards)]


def _broadcast(a, masks):
    """advantages[i,t] = a_i · m[i,t]; returns = advantages."""
    adv = [(F32(a_i) * m).astype(F32) for a_i, m in zip(a, _rows(masks))]
    return adv, [x.copy() for x in adv]


def _mean_std(xs):
    """float32 mean Σx/n and torch.std (Bessel, about that same mean)."""
    n = len(xs)
    mu = F32(_fsum(xs) / F32(n))
    var = F32(_fsum(F32(F32(x - mu) * F32(x - mu)) for x in xs) / F32(n - 1))
    return mu, F32(np.sqrt(var))


def grpo(rewards, masks, uids, norm_adv_by_std=True, epsilon=1e-6):
    """a_i = (R_i − μ_g)/(σ_g + ε)  (or R_i − μ_g without std), times m (docs/semantics.md §7.2).

    Singleton groups: μ = 0, σ = 1, so a = R/(1 + ε).
    """
    R = _outcome(rewards)
    stats = {}
    for uid, idx in _groups(uids).items():
        stats[uid] = (F32(0.0), F32(1.0)) if len(idx) == 1 else _mean_std([R[i] for i in idx])
    a = []
    for R_i, uid in zip(R, uids):
        mu, sigma = stats[uid]
        centred = F32(R_i - mu)
        a.append(F32(centred / F32(sigma + _f(epsilon))) if norm_adv_by_std else centred)
    return _broadcast(a, masks)


def _as_torch_index_keys(uids):
    """verl's ``as_torch_index`` on the object array of a batch's uids (docs/semantics.md §2.3): ``int(uid)`` for every
    uid when all of them convert to int64 ("01", " 1" and "1" are one group), else the uids themselves."""
    try:
        keys = [int(u) for u in uids]
    except (ValueError, TypeError):
        return list(uids)
    return keys if all(-2 ** 63 <= k < 2 ** 63 for k in keys) else list(uids)


def grpo_vectorized(rewards, masks, uids):
    """grpo_vectorized [P] (docs/semantics.md §7.3, §2.2): two-pass group_mean_std with eps = 0 (no floor),
    always divided by σ + 1e-6 (the dispatcher never passes the std flag); groups of ``as_torch_index``.

    μ = s1/c, var = Σ(x − μ)²/max(c − 1, 1), σ = sqrt(max(var, 0)); groups with c ≤ 1: μ = 0, σ = 1.
    """
    R = _outcome(rewards)
    uids = _as_torch_index_keys(uids)
    stats = {}
    for uid, idx in _groups(uids).items():
        c = len(idx)
        if c <= 1:
            stats[uid] = (F32(0.0), F32(1.0))
            continue
        mu = F32(_fsum(R[i] for i in idx) / F32(c))
        var = F32(_fsum(F32(F32(R[i] - mu) * F32(R[i] - mu)) for i in idx) / F32(c - 1))
        stats[uid] = (mu, F32(np.sqrt(max(var, F32(0.0)))))
    a = [F32(F32(R_i - stats[u][0]) / F32(stats[u][1] + _f(1e-6))) for R_i, u in zip(R, uids)]
    return _broadcast(a, masks)


def rloo(rewards, masks, uids):
    """a_i = (R_i·n)/(n−1) − (μ·n)/(n−1) for groups of n > 1; a singleton keeps R_i (docs/semantics.md §7.5)."""
    R = _outcome(rewards)
    groups = _groups(uids)
    mean = {u: F32(_fsum(R[i] for i in idx) / F32(len(idx))) for u, idx in groups.items()}
    a = []
    for R_i, uid in zip(R, uids):
        n = len(groups[uid])
        if n > 1:
            R_i = F32(F32(F32(R_i * F32(n)) / F32(n - 1)) - F32(F32(mean[uid] * F32(n)) / F32(n - 1)))
        a.append(R_i)
    return _broadcast(a, masks)


def rloo_vectorized(rewards, masks, uids):
    """a_i = (c·R_i − S)/max(c − 1, 1) · [c > 1], S = group sum of R in row order (docs/semantics.md §7.6).

    A singleton gets 0 (rloo keeps its raw score).
    """
    R = _outcome(rewards)
    groups = _groups(uids)
    S = {u: _fsum(R[i] for i in idx) for u, idx in groups.items()}
    a = []
    for R_i, uid in zip(R, uids):
        c = F32(len(groups[uid]))
        x = F32(F32(F32(c * R_i) - S[uid]) / max(F32(c - F32(1.0)), F32(1.0)))
        a.append(F32(x * F32(c > 1)))
    return _broadcast(a, masks)


# --------------------------------------------------------------------------- §7.7–7.8 REINFORCE++


def reinforce_plus_plus_returns(rewards, masks, gamma, mode="carry"):
    """Discounted reward-to-go G per row (docs/semantics.md §7.7); scan t = T−1 … 0, run = 0.

    carry ([P], verl 0.9.1, rladv's default): new = r_t + γ·run; G_t = new·m_t; run = new·m_t + run·(1 − m_t).
    reset ([S], the chapter, verl before 0.9):  run = r_t + γ·run; G_t = run; run = run·m_t.
    """
    if mode not in ("reset", "carry"):
        raise ValueError(f"mode must be 'reset' or 'carry', got {mode!r}")
    g = _f(gamma)
    G_rows = []
    for r, m in zip(_rows(rewards), _rows(masks)):
        run = F32(0.0)
        G = np.zeros(len(r), dtype=F32)
        for t in reversed(range(len(r))):
            new = F32(r[t] + F32(g * run))
            if mode == "reset":
                G[t] = new
                run = F32(new * m[t])
            else:
                G[t] = F32(new * m[t])
                run = F32(F32(new * m[t]) + F32(run * F32(F32(1.0) - m[t])))
        G_rows.append(G)
    return G_rows


def reinforce_plus_plus(rewards, masks, gamma, mode="carry"):
    """REINFORCE++ (docs/semantics.md §7.7): G = ``reinforce_plus_plus_returns``; advantages =
    masked_whiten(G, m) · m; returns = G."""
    G_rows = reinforce_plus_plus_returns(rewards, masks, gamma, mode)
    adv = [(w * m).astype(F32) for w, m in zip(masked_whiten(G_rows, masks), _rows(masks))]
    return adv, G_rows


def reinforce_plus_plus_baseline(rewards, masks, uids):
    """x_i = R_i − b_g (b_g = float32 group mean, 0 for singletons); X = x_i · m;
    advantages = masked_whiten(X, m) · m; returns = advantages (docs/semantics.md §7.8)."""
    R = _outcome(rewards)
    b = {}
    for uid, idx in _groups(uids).items():
        b[uid] = F32(0.0) if len(idx) == 1 else F32(_fsum(R[i] for i in idx) / F32(len(idx)))
    X = [(F32(R_i - b[uid]) * m).astype(F32) for R_i, uid, m in zip(R, uids, _rows(masks))]
    adv = [(w * m).astype(F32) for w, m in zip(masked_whiten(X, masks), _rows(masks))]
    return adv, [x.copy() for x in adv]


# --------------------------------------------------------------------------- §7.4, §7.9–7.13 the rest


def _reward_to_go(rewards, masks):
    """G[i,t] = Σ_{u ≥ t} r[i,u]·m[i,u], accumulated right to left in float32 (verl's flip-cumsum-flip)."""
    out = []
    for r, m in zip(_rows(rewards), _rows(masks)):
        G = np.zeros(len(r), dtype=F32)
        run = F32(0.0)
        for t in reversed(range(len(r))):
            run = F32(run + F32(r[t] * m[t]))
            G[t] = run
        out.append(G)
    return out


def grpo_passk(rewards, masks, uids, norm_adv_by_std=True, epsilon=1e-6):
    """Per group (2+ rows, else ValueError): the row with the largest R gets (r1 − r2)/(σ + ε) (or r1 − r2),
    every other row 0; σ = Bessel std of the group (docs/semantics.md §7.4). Ties for the maximum give 0."""
    R = _outcome(rewards)
    a = [F32(0.0)] * len(R)
    for uid, idx in _groups(uids).items():
        if len(idx) < 2:
            raise ValueError(f"Pass@k requires at least 2 samples per group. Got {len(idx)} for group {uid}.")
        order = sorted(idx, key=lambda i: -R[i])
        gap = F32(R[order[0]] - R[order[1]])
        if norm_adv_by_std:
            gap = F32(gap / F32(_mean_std([R[i] for i in idx])[1] + _f(epsilon)))
        a[order[0]] = gap
    return _broadcast(a, masks)


def remax(rewards, masks, reward_baselines):
    """G = reward-to-go of r·m; advantages = G − b_i·m; returns = G (docs/semantics.md §7.9)."""
    G = _reward_to_go(rewards, masks)
    adv = [(g - F32(b) * m).astype(F32) for g, b, m in zip(G, reward_baselines, _rows(masks))]
    return adv, G


def opo(rewards, masks, uids):
    """b_g = Σ n_i R_i / Σ n_i (n_i = valid tokens; 0 for a singleton); a_i = R_i − b_g (docs/semantics.md §7.10)."""
    R = _outcome(rewards)
    n = [F32(np.sum(m)) for m in _rows(masks)]
    b = {}
    for uid, idx in _groups(uids).items():
        if len(idx) == 1:
            b[uid] = F32(0.0)
        else:
            with np.errstate(invalid="ignore", divide="ignore"):
                b[uid] = F32(_fsum(F32(n[i] * R[i]) for i in idx) / _fsum(n[i] for i in idx))
    return _broadcast([F32(R_i - b[u]) for R_i, u in zip(R, uids)], masks)


def gpg(rewards, masks, uids):
    """a_i = α·(R_i − μ_g) with α = B / max(#rows with R ≠ 0, 1) over the batch, μ_g the group mean (0 for a
    singleton), f_norm = 1 (docs/semantics.md §7.11)."""
    R = _outcome(rewards)
    alpha = F32(F32(len(R)) / F32(max(sum(1 for x in R if x != 0), 1)))
    mu = {u: F32(0.0) if len(idx) == 1 else _mean_std([R[i] for i in idx])[0] for u, idx in _groups(uids).items()}
    return _broadcast([F32(F32(alpha * F32(R_i - mu[u])) / F32(1.0)) for R_i, u in zip(R, uids)], masks)


def _path_weights(masks, old_log_probs, sum_pi_squared, rollout_is_weights=None):
    """W[i,t] = Σ_{u ≤ t} w_u·m_u with w = 1 − 2·exp(old) + Σπ² (× IS weight²), float32 left to right."""
    out = []
    for i, (m, old, spp) in enumerate(zip(_rows(masks), _rows(old_log_probs), _rows(sum_pi_squared))):
        w = (F32(1.0) - F32(2.0) * np.exp(old).astype(F32) + spp).astype(F32)
        if rollout_is_weights is not None:
            w = (w * np.square(np.asarray(rollout_is_weights[i], dtype=F32))).astype(F32)
        W = np.zeros(len(m), dtype=F32)
        run = F32(0.0)
        for t in range(len(m)):
            run = F32(run + F32(w[t] * m[t]))
            W[t] = run
        out.append(W)
    return out


def _zero_tail(lengths):
    """(row index in the list, second-longest length) when one row is strictly the longest, else None."""
    order = sorted(lengths)
    longest = order[-1]
    if lengths.count(longest) == 1 and longest > order[-2]:
        return lengths.index(longest), order[-2]
    return None


def optimal_token_baseline(rewards, masks, uids, old_log_probs, sum_pi_squared, rollout_is_weights=None):
    """b_t = Σ_i G[i,t]·W[i,t]·m[i,t] / (Σ_i W[i,t]·m[i,t] + 1e-8) per group and absolute position; a singleton
    has b = 0; zero tail for a strictly longest row; advantages = (G − b)·m; returns = G (docs/semantics.md §7.12)."""
    G, W, M = _reward_to_go(rewards, masks), _path_weights(masks, old_log_probs, sum_pi_squared, rollout_is_weights), _rows(masks)
    adv = []
    baselines = [np.zeros(len(g), dtype=F32) for g in G]
    for idx in _groups(uids).values():
        if len(idx) == 1:
            continue
        for i in idx:
            for t in range(len(G[i])):
                num = _fsum(F32(F32(G[j][t] * W[j][t]) * M[j][t]) for j in idx if t < len(G[j]))
                den = _fsum(F32(W[j][t] * M[j][t]) for j in idx if t < len(G[j]))
                baselines[i][t] = F32(num / F32(den + _f(1e-8)))
        tail = _zero_tail([int(np.sum(M[i])) for i in idx])
        if tail is not None:
            baselines[idx[tail[0]]][tail[1]:] = 0.0
    for g, b, m in zip(G, baselines, M):
        adv.append((F32(1.0) * (g - b) * m).astype(F32))
    return adv, G


def tir_optimal_token_baseline(rewards, masks, uids, old_log_probs, sum_pi_squared, rollout_is_weights=None):
    """As ``optimal_token_baseline`` over each row's actor tokens renumbered k = 0..n_i−1; rows without an actor
    token are left out of their group (advantage 0) (docs/semantics.md §7.12)."""
    G, W, M = _reward_to_go(rewards, masks), _path_weights(masks, old_log_probs, sum_pi_squared, rollout_is_weights), _rows(masks)
    Gc = [g[m > 0] for g, m in zip(G, M)]
    Wc = [w[m > 0] for w, m in zip(W, M)]
    bc = [np.zeros(len(g), dtype=F32) for g in Gc]
    groups = {}
    for i, uid in enumerate(uids):
        if len(Gc[i]):
            groups.setdefault(uid, []).append(i)
    for idx in groups.values():
        if len(idx) == 1:
            continue
        for i in idx:
            for k in range(len(Gc[i])):
                num = _fsum(F32(Gc[j][k] * Wc[j][k]) for j in idx if k < len(Gc[j]))
                den = _fsum(Wc[j][k] for j in idx if k < len(Gc[j]))
                bc[i][k] = F32(num / F32(den + _f(1e-8)))
        tail = _zero_tail([len(Gc[i]) for i in idx])
        if tail is not None:
            bc[idx[tail[0]]][tail[1]:] = 0.0
    adv = []
    for g, gc, b, m in zip(G, Gc, bc, M):
        a = np.zeros(len(g), dtype=F32)
        a[m > 0] = gc - b
        adv.append((a * m).astype(F32))
    return adv, G


def gdpo(rewards, masks, uids, components=None, weights=None, epsilon=1e-6):
    """A_sum = Σ_k w_k · grpo(component_k) (each component a per-row scalar placed on one position; without
    components the single one is the rewards themselves); advantages = masked_whiten(A_sum, m)·m;
    returns = advantages (docs/semantics.md §7.13)."""
    if components is None:
        parts = [rewards]
    else:
        parts = [[np.array([c], dtype=F32) for c in comp] for comp in components]
    weights = [1.0] * len(parts) if weights is None else weights
    total = None
    for w, part in zip(weights, parts):
        adv, _ = grpo(part, masks, uids, norm_adv_by_std=True, epsilon=epsilon)
        term = [(F32(w) * a).astype(F32) for a in adv]
        total = term if total is None else [(x + y).astype(F32) for x, y in zip(total, term)]
    out = [(x * m).astype(F32) for x, m in zip(masked_whiten(total, masks), _rows(masks))]
    return out, [x.copy() for x in out]


# --------------------------------------------------------------------------- §7.16–7.19 other trainers' estimators


def _level_stats(R, labels):
    """{label: (float32 mean, Bessel std)} of the totals sharing a label; (0, 1) for a label of one row."""
    return {u: (F32(0.0), F32(1.0)) if len(idx) == 1 else _mean_std([R[i] for i in idx])
            for u, idx in _groups(labels).items()}


def grpo_norm(rewards, masks, uids, batches=None, mean_level="group", std_level="group", epsilon=1e-6):
    """a_i = (R_i − μ)/(σ + ε) with μ and σ the float32 mean and Bessel std of R over the row's group or batch
    (``batches``: one label per row, None = one batch), μ = 0 for ``none``, no division for ``none``; a level of
    one row has μ = 0, σ = 1 (docs/semantics.md §7.16)."""
    R = _outcome(rewards)
    batches = [0] * len(R) if batches is None else list(batches)
    keys = {"group": [(b, u) for b, u in zip(batches, uids)], "batch": batches}
    stats = {level: _level_stats(R, keys[level]) for level in keys}
    a = []
    for i, R_i in enumerate(R):
        x = R_i if mean_level == "none" else F32(R_i - stats[mean_level][keys[mean_level][i]][0])
        if std_level != "none":
            x = F32(x / F32(stats[std_level][keys[std_level][i]][1] + _f(epsilon)))
        a.append(x)
    return _broadcast(a, masks)


def pkpo(rewards, masks, uids, k=2):
    """By enumeration: a_i = mean over the k-subsets I of the group of [i ∈ I]·(max_I R − max_{I∖i} R) (the max
    of an empty set is 0), float64 over the float32 totals, rounded once; groups need k rows
    (docs/semantics.md §7.17)."""
    from itertools import combinations

    R = _outcome(rewards)
    a = [F32(0.0)] * len(R)
    for uid, idx in _groups(uids).items():
        if len(idx) < k:
            raise ValueError(f"pkpo requires at least {k} samples per group. Got {len(idx)} for group {uid}")
        subsets = list(combinations(idx, k))
        for i in idx:
            gain = sum(max(float(R[j]) for j in I) - max((float(R[j]) for j in I if j != i), default=0.0)
                       for I in subsets if i in I)
            a[i] = F32(gain / len(subsets))
    return _broadcast(a, masks)


def passk_analytic(rewards, masks, uids, k=2, epsilon=1e-6):
    """Rewards 0/1 only (ValueError otherwise). By enumeration: ρ = the share of the group's k-subsets holding a
    correct row, σ = sqrt(ρ(1 − ρ)); a correct row gets (1 − ρ)/(σ + ε), an incorrect one
    (1 − ρ − q)/(σ + ε) with q the share of (k−1)-subsets of the other rows holding no correct row; float64,
    rounded once (docs/semantics.md §7.18)."""
    from itertools import combinations

    R = _outcome(rewards)
    if any(x not in (0.0, 1.0) for x in R):
        raise ValueError("passk_analytic reads binary rewards")
    a = [F32(0.0)] * len(R)
    for uid, idx in _groups(uids).items():
        if len(idx) < k:
            raise ValueError(f"passk_analytic requires at least {k} samples per group. Got {len(idx)} for group {uid}")
        subsets = list(combinations(idx, k))
        rho = sum(any(R[j] == 1 for j in I) for I in subsets) / len(subsets)
        sigma = float(np.sqrt(rho * (1 - rho)))
        for i in idx:
            if R[i] == 1:
                a[i] = F32((1 - rho) / (sigma + epsilon))
                continue
            others = list(combinations([j for j in idx if j != i], k - 1))
            q = sum(not any(R[j] == 1 for j in J) for J in others) / len(others)
            a[i] = F32((1 - rho - q) / (sigma + epsilon))
    return _broadcast(a, masks)


def vapo(rewards, values, masks, gamma, alpha=0.05, value_lam=1.0):
    """``gae``'s recurrence with λ_i = clamp(1 − 1/(α·l_i), 0, 1) per row (l_i = Σ m, float64; γ·λ_i rounded to
    float32 once) for the advantages, whitened; returns = ``gae``'s returns with λ = ``value_lam``
    (docs/semantics.md §7.19)."""
    a_raw = []
    for r, V, m in zip(_rows(rewards), _rows(values), _rows(masks)):
        length = float(np.sum(m, dtype=np.float64))
        lam = min(max(1 - 1 / (alpha * length), 0.0), 1.0) if length else 0.0
        g, c = _f(gamma), _f(gamma * lam)
        nextvalues, lastgaelam = F32(0.0), F32(0.0)
        A = np.zeros(len(r), dtype=F32)
        for t in reversed(range(len(r))):
            delta = F32(F32(r[t] + F32(g * nextvalues)) - V[t])
            if m[t]:
                lastgaelam = F32(delta + F32(c * lastgaelam))
                nextvalues = V[t]
            A[t] = lastgaelam
        a_raw.append(A)
    return masked_whiten(a_raw, masks), gae(rewards, values, masks, gamma, value_lam)[1]


def shape_scores(scores, score_positions, truncated=None, stop_coef=None, scale=1.0, bias=0.0, clip=None):
    """The score shaping after DAPO's (docs/semantics.md §3.1), per row in float32: the stop-properly penalty
    (rows with ``truncated``: scores × coef for coef ≥ 0, else 0 with coef at the score position), then bias at
    the score position and every score × scale, then a row total beyond ±clip moved back to ±clip at the score
    position (total summed sequentially here)."""
    out = []
    for i, (row, p) in enumerate(zip(_rows(scores), score_positions)):
        row = row.copy()
        if stop_coef is not None and truncated[i]:
            if stop_coef >= 0:
                row = (row * _f(stop_coef)).astype(F32)
            else:
                row[:] = 0.0
                row[p] = _f(stop_coef)
        shaped = (row * _f(scale)).astype(F32)
        shaped[p] = F32(F32(row[p] + _f(bias)) * _f(scale))
        if clip is not None:
            total = _fsum(shaped)
            bounded = F32(min(max(total, -_f(clip)), _f(clip)))
            if bounded != total:
                shaped[p] = F32(bounded - F32(total - shaped[p]))
        out.append(shaped)
    return out


# each estimator's oracle by verl's name: (rewards, masks, rollout, settings) -> (advantages, returns), verl's raw
# rows; ``rollout`` holds the other columns as attributes (``uids``, ``values``, ``reward_baselines``,
# ``old_log_probs``, ``sum_pi_squared``: tests/strategies.py's ``Rollout``), ``settings`` the estimator's own
# (``gamma``, ``lam``, ``norm_adv_by_std``, ``rpp_mask_mode``). Every registered estimator has one
# (tests/estimators/test_registry.py).
def grpo_loo(rewards, masks, uids, norm_adv_by_std=True, leave_one_out=True):
    """NeMo-RL's GRPO (docs/semantics.md §7.14): per row, over the other k = n − 1 rows of its group (all n rows
    without leave-one-out), b = Σ R_j / k and σ = sqrt((Σ R_j² / k − b²) · k/(k − 1)) (NaN -> 0), summed in
    float32 in row order; a = R − b, divided by σ + 1e-6 where σ > 0; a group of one row gets 0."""
    R = _outcome(rewards)
    groups = _groups(uids)
    a = []
    for i, uid in enumerate(uids):
        idx = groups[uid]
        if len(idx) < 2:
            a.append(F32(0.0))
            continue
        others = [R[j] for j in idx if j != i or not leave_one_out]
        k = F32(len(others))
        b = F32(_fsum(others) / k)
        square = F32(_fsum(F32(x * x) for x in others) / k)
        with np.errstate(divide="ignore", invalid="ignore"):
            sigma = np.nan_to_num(F32(np.sqrt(F32(F32(square - F32(b * b)) * F32(k / F32(k - 1))))), nan=0.0)
        centred = F32(R[i] - b)
        a.append(F32(centred / F32(sigma + _f(1e-6))) if norm_adv_by_std and sigma > 0 else centred)
    return _broadcast(a, masks)


def maxrl(rewards, masks, uids, epsilon=1e-6):
    """a_i = (R_i − μ_g)/(μ_g + ε) for groups of 2+ rows, R_i for a singleton (docs/semantics.md §7.15)."""
    R = _outcome(rewards)
    groups = _groups(uids)
    mean = {u: F32(_fsum(R[i] for i in idx) / F32(len(idx))) for u, idx in groups.items()}
    a = [F32(F32(R_i - mean[u]) / F32(mean[u] + _f(epsilon))) if len(groups[u]) > 1 else R_i
         for R_i, u in zip(R, uids)]
    return _broadcast(a, masks)


ORACLE = {
    "gae": lambda r, m, ro, s: gae(r, ro.values, m, s["gamma"], s["lam"]),
    "grpo": lambda r, m, ro, s: grpo(r, m, ro.uids, norm_adv_by_std=s["norm_adv_by_std"]),
    "grpo_vectorized": lambda r, m, ro, s: grpo_vectorized(r, m, ro.uids),
    "rloo": lambda r, m, ro, s: rloo(r, m, ro.uids),
    "rloo_vectorized": lambda r, m, ro, s: rloo_vectorized(r, m, ro.uids),
    "reinforce_plus_plus": lambda r, m, ro, s: reinforce_plus_plus(r, m, s["gamma"], s["rpp_mask_mode"]),
    "reinforce_plus_plus_baseline": lambda r, m, ro, s: reinforce_plus_plus_baseline(r, m, ro.uids),
    "grpo_passk": lambda r, m, ro, s: grpo_passk(r, m, ro.uids, norm_adv_by_std=s["norm_adv_by_std"]),
    "remax": lambda r, m, ro, s: remax(r, m, ro.reward_baselines),
    "opo": lambda r, m, ro, s: opo(r, m, ro.uids),
    "gpg": lambda r, m, ro, s: gpg(r, m, ro.uids),
    "optimal_token_baseline": lambda r, m, ro, s: optimal_token_baseline(r, m, ro.uids, ro.old_log_probs,
                                                                         ro.sum_pi_squared),
    "tir_optimal_token_baseline": lambda r, m, ro, s: tir_optimal_token_baseline(r, m, ro.uids, ro.old_log_probs,
                                                                                 ro.sum_pi_squared),
    "gdpo": lambda r, m, ro, s: gdpo(r, m, ro.uids),
    "grpo_loo": lambda r, m, ro, s: grpo_loo(r, m, ro.uids, norm_adv_by_std=s["norm_adv_by_std"],
                                             leave_one_out=s.get("leave_one_out", True)),
    "maxrl": lambda r, m, ro, s: maxrl(r, m, ro.uids),
    "grpo_norm": lambda r, m, ro, s: grpo_norm(r, m, ro.uids, None, s.get("mean_level", "group"),
                                               s.get("std_level", "group")),
    "pkpo": lambda r, m, ro, s: pkpo(r, m, ro.uids, s.get("k", 2)),
    "passk_analytic": lambda r, m, ro, s: passk_analytic(r, m, ro.uids, s.get("k", 2)),
    "vapo": lambda r, m, ro, s: vapo(r, ro.values, m, s["gamma"], s.get("vapo_alpha", 0.05), s.get("value_lam", 1.0)),
}


# --------------------------------------------------------------------------- token weights (docs/weights.md)


def token_weights(convention, mode, advantages, masks, loss_masks, steps, prompts=None, widths=None,
                  is_weights=None, mini=None, micro=None, factor=None, epsilon_high=None):
    """``w_t = A_t · ρ_t · m_t · c_i`` per row (float64), with each trainer's ``c_i`` recomputed from its loss in
    plain loops: rows of a step in order, cut into mini-batches of ``mini`` rows (the step without) and those
    into micro-batches of ``micro`` rows (the mini-batch without). ``masks``: the mask the loss selects with
    (after rollout rejection); ``loss_masks``: before it (verl's token-mean denominator); ``widths``: response
    positions without padding (verl's horizon)."""
    n = len(advantages)
    widths = widths or [len(m) for m in masks]
    u = [float(sum(m)) for m in masks]
    u0 = [float(sum(m)) for m in loss_masks]
    c = [0.0] * n
    by_step = {}
    for i, s in enumerate(steps):
        by_step.setdefault(s, []).append(i)
    for rows in by_step.values():
        N = mini or len(rows)
        M = micro or N
        ga, per_step = N // M, len(rows) // M
        step_tokens = sum(u[i] for i in rows)
        run, run_start = {}, {}  # SkyRL's prompt boundaries: runs of one prompt in the step's order
        for k, i in enumerate(rows):
            run[i] = run[rows[k - 1]] + (prompts[i] != prompts[rows[k - 1]]) if k and prompts is not None else (
                run[rows[k - 1]] if k else 0)
            run_start.setdefault(run[i], i)
        minis = [rows[k:k + N] for k in range(0, len(rows), N)]
        for mb in minis:
            micros = [mb[k:k + M] for k in range(0, len(mb), M)]
            tokens = sum(u[i] for i in mb)
            for mc in micros:
                mc_tokens = sum(u[i] for i in mc)
                for i in mc:
                    if convention == "verl":
                        c[i] = {"token-mean": lambda: 1 / sum(u0[j] for j in mb) if sum(u0[j] for j in mb) else 0.0,
                                "token-sum": lambda: 1.0,
                                "seq-mean-token-sum": lambda: 1 / N,
                                "seq-mean-token-mean": lambda: 1 / ((u[i] + 1e-8) * N),
                                "seq-mean-token-sum-norm": lambda: 1 / (N * (factor or max(widths[j] for j in mc))),
                                }[mode]()
                    elif convention == "trl":
                        dapo = per_step / (ga * max(step_tokens, 1))
                        c[i] = {"dapo": dapo, "vespo": dapo,
                                "cispo": min(1.0, 0.2 if epsilon_high is None else epsilon_high) * dapo,
                                "grpo": 1 / (ga * len(mc) * max(u[i], 1)), "sapo": 1 / (ga * len(mc) * max(u[i], 1)),
                                "bnpo": 1 / (ga * max(mc_tokens, 1)), "dr_grpo": 1 / (ga * len(mc) * (factor or 512)),
                                "luspo": 1 / (ga * len(mc))}[mode]
                    elif convention == "openrlhf":
                        with_tokens = sum(1 for j in mb if u[j] > 0)
                        c[i] = (1 / tokens if tokens else 0.0) if mode == "token-mean" else (
                            1 / ((u[i] + 1e-8) * with_tokens) if with_tokens else 0.0)
                    elif convention == "nemo_rl":
                        c[i] = 1 / (tokens + 1e-8) if mode == "token_level" else 1 / ((u[i] + 1e-8) * (len(mb) + 1e-8))
                    elif mode == "prompt_mean":  # skyrl: the runs of one prompt that start in this mini-batch
                        first = {}
                        for j in mb:
                            first.setdefault(run[j], j)
                        starts = [j for j in mb if j == run_start[run[j]]]
                        if run_start[run[i]] != first[run[i]]:  # the prompt started in an earlier mini-batch
                            c[i] = 0.0
                        else:
                            c[i] = 1 / (len(starts) * max(sum(u[k] for k in mb if run[k] == run[i]), 1))
                    else:  # skyrl
                        c[i] = {"token_mean": lambda: 1 / max(tokens, 1),
                                "token_mean_legacy": lambda: 1 / (max(mc_tokens, 1) * ga),
                                "sequence_mean": lambda: 1 / (len(mb) * max(u[i], 1)),
                                "seq_mean_token_sum_norm": lambda: 1 / (len(mb) * factor)}[mode]()
    out = []
    for i in range(n):
        a = np.asarray(advantages[i], dtype=np.float64)
        m = np.asarray(masks[i], dtype=np.float64)
        rho = np.ones_like(a) if is_weights is None else np.asarray(is_weights[i], dtype=np.float64)
        out.append(a * rho * m * c[i])
    return out
