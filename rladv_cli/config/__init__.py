"""The settings of a run: ``Config``, verl's rollout-correction strings, the verl YAML reader, and flags
resolved over a YAML with the "no effect" refusals.
"""
