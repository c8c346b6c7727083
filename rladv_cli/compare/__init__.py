"""``rladv compare``: several runs' advantages over one batch, side by side (docs/compare.md).

``runs`` turns ``--run "NAME: options"`` strings into named option lists parsed by the compute command's own
parameters; ``metrics`` holds the comparison's arithmetic as pure functions and accumulators over numpy arrays;
``engine`` runs every configuration over one read of the dataset and streams the comparison chunk by chunk
(``compare_runs``); ``model`` is the result (JSON, terminal) and ``html`` its self-contained page.
"""
