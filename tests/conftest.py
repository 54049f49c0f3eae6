"""Shared fixtures: kernel twins, and hypothesis settings sized for CI on 2 cores."""

from __future__ import annotations

import importlib
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def load_twins(name: str) -> tuple[object, object]:
    """(compiled, python) kernel modules ``fpstore._{name}_c`` and its twin (``_backend.TWINS``).
    Skips the calling module where the kernels were never compiled (the twins then run alone)."""
    from fpstore._backend import TWINS

    compiled = pytest.importorskip(f"fpstore._{name}_c", reason="the compiled kernels are not built here")
    return compiled, importlib.import_module(TWINS[name])


def expected_kernel(name: str) -> str:
    """The module ``_backend.load(name)`` must return: the twin under FPSTORE_PUREPYTHON=1, else
    the compiled kernel."""
    from fpstore._backend import PURE_PYTHON, TWINS

    return TWINS[name] if PURE_PYTHON else f"fpstore._{name}_c"


@pytest.fixture
def store(tmp_path):
    """A new store (k = 3, the default pipeline), closed after the test."""
    import fpstore

    with fpstore.open(tmp_path / "s", k=3) as s:
        yield s


@pytest.fixture(params=["c", "py"])
def simhash_kernel(request):
    """Each fingerprint-kernel twin in turn, with the v1 fold and NFKC tables installed."""
    from fpstore._backend import TWINS
    from fpstore.fingerprint import text

    if request.param == "c":
        mod = pytest.importorskip("fpstore._simhash_c", reason="the compiled kernels are not built here")
    else:
        mod = importlib.import_module(TWINS["simhash"])
    mod.set_fold_table(text.FOLD)
    mod.set_active_table(text.ACTIVE_BITS)
    return mod
