"""The passes of ``rladv compute``: the driver (passes and batch-wide reductions), the per-shard work,
the report summary, and the Ray mapper.
"""
