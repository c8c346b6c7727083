"""The named baseline: verl-style estimators on padded ``[B, T]`` tensors with a Python loop over time.

Written in the style of verl 0.9.1's reference functions (not imported from verl), so the benchmark runs
without verl installed. Only for timing; the numbers are checked against verl elsewhere.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch


def masked_whiten(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    n = m.sum()
    mean = (x * m).sum() / (n + 1e-8)
    var = (((x - mean) ** 2) * m).sum() / (n + 1e-8) * (n / (n - 1))
    return (x - mean) * torch.rsqrt(var + 1e-8)


def gae(r: torch.Tensor, values: torch.Tensor, m: torch.Tensor, gamma: float, lam: float):
    nextvalues = torch.zeros(r.shape[0])
    lastgaelam = torch.zeros(r.shape[0])
    advantages_reversed = []
    for t in reversed(range(r.shape[1])):
        delta = r[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * m[:, t] + (1 - m[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * m[:, t] + (1 - m[:, t]) * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values
    return masked_whiten(advantages, m), returns


def reinforce_plus_plus(r: torch.Tensor, m: torch.Tensor, gamma: float):
    returns = torch.zeros_like(r)
    running = torch.zeros(r.shape[0])
    for t in reversed(range(r.shape[1])):
        new = r[:, t] + gamma * running
        returns[:, t] = new * m[:, t]
        running = new * m[:, t] + running * (1 - m[:, t])
    return masked_whiten(returns, m) * m, returns


def grpo(r: torch.Tensor, m: torch.Tensor, index: np.ndarray, eps: float = 1e-6):
    scores = r.sum(dim=-1)
    groups = defaultdict(list)
    for i in range(scores.shape[0]):
        groups[index[i]].append(scores[i])
    mean, std = {}, {}
    for k, v in groups.items():
        if len(v) == 1:
            mean[k], std[k] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            t = torch.stack(v)
            mean[k], std[k] = t.mean(), t.std()
    for i in range(scores.shape[0]):
        scores[i] = (scores[i] - mean[index[i]]) / (std[index[i]] + eps)
    adv = scores.unsqueeze(-1) * m
    return adv, adv


def rloo(r: torch.Tensor, m: torch.Tensor, index: np.ndarray):
    scores = r.sum(dim=-1)
    groups = defaultdict(list)
    for i in range(scores.shape[0]):
        groups[index[i]].append(scores[i])
    mean = {k: torch.stack(v).mean() if len(v) > 1 else torch.tensor(0.0) for k, v in groups.items()}
    for i in range(scores.shape[0]):
        n = len(groups[index[i]])
        if n > 1:
            scores[i] = scores[i] * n / (n - 1) - mean[index[i]] * n / (n - 1)
    adv = scores.unsqueeze(-1) * m
    return adv, adv


def run(estimator: str, r, values, m, index):
    if estimator == "gae":
        return gae(r, values, m, 1.0, 0.95)
    if estimator == "reinforce_plus_plus":
        return reinforce_plus_plus(r, m, 1.0)
    if estimator == "grpo":
        return grpo(r, m, index)
    return rloo(r, m, index)
