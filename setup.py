"""Build of the optional native scan (``rladv_cli/_scan.c``); everything else is in pyproject.toml.

The extension is optional: without a C compiler the build goes on and ``rladv_cli.kernels`` falls back to the
log-depth torch scan (same results within float32 rounding, slower on CPU).
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "rladv_cli._scan",
            sources=["rladv_cli/_scan.c"],
            # No fused multiply-add: the scan must round like verl's separate multiply and add.
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        )
    ]
)
