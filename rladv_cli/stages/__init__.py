"""The per-chunk chain that runs before the estimator, in verl's order: score assembly, overlong shaping,
KL shaping on the original mask, rollout rejection and importance weights.
"""
