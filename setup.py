"""Builds the fused sum-tree kernels (csrc/tree_kernels.cc) as a plain shared library for XLA's FFI.

Everything else about the package is in pyproject.toml. The library is not a Python extension:
it exports C symbols that ``jaxdqn.buffers.tree_kernels`` loads with ctypes and registers with
``jax.ffi``, so it is named ``jaxdqn/buffers/libjaxdqn_kernels.so`` (no Python ABI tag) and a
wheel is tagged ``py3-none-<platform>``. The XLA FFI headers come from jaxlib (a build
requirement). Any C++17 compiler that GCC or clang are (GCC >= 6 for its function
multiversioning; tested with GCC 11 and 12 and clang 14) builds it. The kernels are optional:
where no compiler works (``CC=false CXX=false`` forces that path), the install goes on with a
warning and the prioritized buffer runs XLA's program instead; ``jaxdqn info`` says which.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

LIBRARY = "jaxdqn.buffers.libjaxdqn_kernels"


class SharedLibrary(build_ext):
    """``build_ext`` for a plain shared library that warns instead of failing when the kernels
    cannot be compiled."""

    def get_ext_filename(self, fullname: str) -> str:
        return os.path.join(*fullname.split(".")) + ".so"

    def get_export_symbols(self, ext: Extension) -> list[str]:
        return []  # no PyInit_*: the library is loaded with ctypes, not imported

    def build_extension(self, ext: Extension) -> None:
        try:
            import jaxlib  # noqa: F401  (the headers' home)
            from jax import ffi

            ext.include_dirs.append(ffi.include_dir())
            super().build_extension(ext)
        except Exception as error:  # any compiler or header problem: fall back to XLA's program
            print(f"WARNING: jaxdqn's fused tree kernels were not built ({error}); the prioritized "
                  "buffer will use XLA's program on the CPU (same results, slower at large "
                  "capacities). `jaxdqn info` reports it.", file=sys.stderr)


class PlatformWheel(bdist_wheel):
    """A wheel for any Python 3 on this platform: the library has no Python ABI."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    ext_modules=[
        Extension(
            LIBRARY,
            sources=["csrc/tree_kernels.cc"],
            language="c++",
            extra_compile_args=["-std=c++17", "-O3", "-Wno-attributes", "-Wno-return-type", "-Wno-psabi"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": SharedLibrary, "bdist_wheel": PlatformWheel},
)
