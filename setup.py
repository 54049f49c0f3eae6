"""Build the Cython kernels in ``cext/`` into the ``fpstore`` package.

The kernels are required: a compile error fails the build. ``FPSTORE_PUREPYTHON=1`` builds a
package without them, on purpose, and ``fpstore.backend`` then says ``"python"``.
"""

import os
import sys

from setuptools import Extension, setup

PURE = os.environ.get("FPSTORE_PUREPYTHON", "") not in ("", "0")

KERNELS = ["_simhash_c", "_runs_c", "_search_c", "_html_c", "_jpeg_c"]


def popcount_flags():
    """``-mpopcnt`` when building on an x86-64 CPU that has the instruction (every one since
    2008): the candidate checks are popcounts, and without it GCC calls a libgcc routine for each
    (query_many at 10^7, design r4, went from 0.82M/s to 1.38M/s with this and a prefix-only
    sort: docs/benchmarks.md).
    ``FPSTORE_PORTABLE=1`` leaves it out, for a build meant for older CPUs."""
    import platform

    if os.environ.get("FPSTORE_PORTABLE", "") not in ("", "0"):
        return []
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return []  # other architectures' baselines have a cheap popcount, or no such flag
    try:
        with open("/proc/cpuinfo") as f:
            has = any(line.startswith("flags") and " popcnt" in line for line in f)
    except OSError:
        return []
    return ["-mpopcnt"] if has else []


def extensions():
    if PURE:
        return []
    from Cython.Build import cythonize

    if sys.platform == "win32":
        flags = ["/O2"]
    else:
        flags = ["-O3", "-fno-strict-aliasing"] + popcount_flags()
    exts = [
        Extension(f"fpstore.{name}", [f"cext/{name}.pyx"], extra_compile_args=flags)
        for name in KERNELS
        if os.path.exists(f"cext/{name}.pyx")
    ]
    return cythonize(
        exts,
        include_path=["cext"],  # cext/_common.pxd, cimported by the kernels
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )


setup(ext_modules=extensions())
