"""What each token weighs: the trainers' loss aggregation modes (``modes``) and the per-row scale that turns an
advantage into the token's coefficient on ``∇ log π`` (``scale``), as docs/weights.md states them. No torch here.
"""
