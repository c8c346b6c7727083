"""Build of the optional C loops (``rladv_cli/tensors/_scan.c``, ``rladv_cli/tensors/_rows.c``); everything else is in
pyproject.toml.

The extensions are optional: without a C compiler the build goes on and ``rladv_cli.tensors.kernels`` falls back to
torch: the log-depth scan (same results within float32 rounding, slower on CPU) and segment reductions for
the report's row summaries (the same numbers).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rladv_cli.tensors._scan",
            sources=["rladv_cli/tensors/_scan.c"],
            # No fused multiply-add: the scan must round like verl's separate multiply and add.
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        ),
        Extension("rladv_cli.tensors._rows", sources=["rladv_cli/tensors/_rows.c"], extra_compile_args=["-O2", "-ffp-contract=off"],
                  optional=True),
    ]
)
