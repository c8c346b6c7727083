"""A chunk as flat token tensors plus row offsets (``Batch``), the segmented kernels on them, group
statistics, and the optional C loops.
"""
