"""``rladv inspect`` and ``rladv explain``: the checklist and its findings, the row and group views, the
reproducer export, the step-by-step derivation and the rollout-rejection sweep.
"""
