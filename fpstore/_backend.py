"""Selects the kernels: the compiled Cython twins, or their pure-Python specifications.

Each kernel module ``fpstore._NAME_c`` (built from ``cext/_NAME_c.pyx``) has a pure-Python twin
beside the code that uses it (:data:`TWINS`) with the same functions and the same results, bit for
bit. The compiled one is
what runs. When it is missing the import fails loudly, because a silent fallback would make a
store hundreds of times slower without anyone noticing. ``FPSTORE_PUREPYTHON=1`` in the
environment selects the twins on purpose (for platforms without a compiler, and for debugging).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON: bool = os.environ.get("FPSTORE_PUREPYTHON", "") not in ("", "0")

#: ``"cython"`` or ``"python"``: which kernels this process runs.
BACKEND: str = "python" if PURE_PYTHON else "cython"

#: Kernel name -> its pure-Python twin, the specification the compiled kernel is tested against.
TWINS: dict[str, str] = {
    "simhash": "fpstore.fingerprint._simhash_py",
    "runs": "fpstore.index._runs_py",
    "search": "fpstore.index._search_py",
    "html": "fpstore.fingerprint._html_py",
    "jpeg": "fpstore.fingerprint._jpeg_py",
}


def load(name: str) -> ModuleType:
    """Return kernel module ``name`` (for example ``"simhash"``) for the selected backend."""
    if PURE_PYTHON:
        return importlib.import_module(TWINS[name])
    try:
        return importlib.import_module(f"fpstore._{name}_c")
    except ImportError as exc:  # pragma: no cover - exercised by a broken install only
        raise ImportError(
            f"fpstore's compiled kernel fpstore._{name}_c is missing or broken ({exc}). "
            "Reinstall with a C compiler available (pip install --force-reinstall fpstore), "
            "or set FPSTORE_PUREPYTHON=1 to run the much slower pure-Python kernels on purpose."
        ) from exc
