"""The data contract of a rollout dataset: the column schema, the torch-free Arrow row checks, columns as
flat numpy arrays, and dense batch/group labels.
"""
