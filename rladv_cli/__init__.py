"""rladv: verl's reward-to-advantage step, offline, on saved rollout Parquet files.

Public API (torch is imported only for a run on CUDA, or to read a ``.pt`` dump; docs/arrays.md)::

    import rladv_cli
    cfg = rladv_cli.Config(estimator="grpo")
    out_table, report = rladv_cli.compute(table, cfg)            # in memory, an Arrow table
    report = rladv_cli.compute_file(["rollouts.parquet"], cfg, output="out.parquet")
    runs = {"grpo": cfg, "rloo": rladv_cli.Config(estimator="rloo")}
    comparison = rladv_cli.compare_runs(["rollouts.parquet"], runs)  # rladv compare (docs/compare.md)
    report = rladv_cli.compute_ray(["shards/"], cfg, output_dir="shards.adv")   # on Ray: pip install -e ".[ray]"
    rladv_cli.validate(["rollouts.parquet"], estimator="gae")   # raises InputError on bad data
    rladv_cli.inspect(["rollouts.parquet"]).checks               # the debugger's checklist, no torch
    rladv_cli.group_view("rollouts.parquet", "prompt-7", estimator="grpo")   # one group, member by member
    rladv_cli.row_view("rollouts.parquet", 12, estimator="gae")  # one row, token by token
    rladv_cli.dump_batch(data_proto, "step_120.parquet", step=120)  # a trainer's batch, in the contract's layout
"""
from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "compute": "api",
    "compute_file": "api",
    "compare_runs": "compare.engine",
    "compute_ray": "pipeline.ray_engine",
    "validate": "api",
    "inspect": "diagnose.checklist",
    "row_view": "diagnose.views",
    "group_view": "diagnose.views",
    "dump_batch": "io.dump",
    "Config": "config.settings",
    "Report": "report.model",
    "RladvError": "errors",
    "ConfigError": "errors",
    "InputError": "errors",
    "ComputeError": "errors",
    "OutputError": "errors",
    "ESTIMATORS": "estimators",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    """The public names above, and the subpackages (``rladv_cli.tensors``, ``rladv_cli.estimators``, ...),
    imported on first use."""
    import importlib
    import importlib.util

    if name in _LAZY:
        return getattr(importlib.import_module(f"rladv_cli.{_LAZY[name]}"), name)
    if not name.startswith("_") and importlib.util.find_spec(f"rladv_cli.{name}") is not None:
        return importlib.import_module(f"rladv_cli.{name}")
    raise AttributeError(f"module 'rladv_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) - {"annotations"} | set(__all__))
