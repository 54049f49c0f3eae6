"""Build the Cython kernels in ``cext/`` into the ``fpstore`` package.

The kernels are required: a compile error fails the build. ``FPSTORE_PUREPYTHON=1`` builds a
package without them, on purpose, and ``fpstore.backend`` then says ``"python"``.
"""

import os
import sys

from setuptools import Extension, setup

PURE = os.environ.get("FPSTORE_PUREPYTHON", "") not in ("", "0")

KERNELS = ["_simhash_c", "_runs_c", "_search_c"]


def extensions():
    if PURE:
        return []
    from Cython.Build import cythonize

    if sys.platform == "win32":
        flags = ["/O2"]
    else:
        flags = ["-O3", "-fno-strict-aliasing"]
    exts = [
        Extension(f"fpstore.{name}", [f"cext/{name}.pyx"], extra_compile_args=flags)
        for name in KERNELS
        if os.path.exists(f"cext/{name}.pyx")
    ]
    return cythonize(
        exts,
        language_level=3,
        compiler_directives={
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    )


setup(ext_modules=extensions())
