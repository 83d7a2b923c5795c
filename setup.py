"""Builds the fused sum-tree kernels (csrc/tree_kernels.cc) as an XLA FFI library.

Everything else about the package is in pyproject.toml. The XLA FFI headers come from jaxlib
(a build requirement). The kernels are optional: where no C++17 compiler works, the install
goes on without them (with a warning) and the prioritized buffer runs XLA's program instead
(``jaxdqn.buffers.tree_kernels.available()`` says which).
"""

from __future__ import annotations

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """``build_ext`` that warns instead of failing when the kernels cannot be compiled."""

    def build_extension(self, ext: Extension) -> None:
        try:
            import jaxlib  # noqa: F401  (the headers' home)
            from jax import ffi

            ext.include_dirs.append(ffi.include_dir())
            super().build_extension(ext)
        except Exception as error:  # any compiler or header problem: fall back to XLA's program
            print(f"WARNING: jaxdqn's fused tree kernels were not built ({error}); the prioritized "
                  "buffer will use XLA's program on the CPU (same results, slower)", file=sys.stderr)


setup(
    ext_modules=[
        Extension(
            "jaxdqn.buffers._tree_kernels",
            sources=["csrc/tree_kernels.cc"],
            language="c++",
            extra_compile_args=["-std=c++17", "-O3", "-Wno-attributes", "-Wno-return-type", "-Wno-psabi"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
