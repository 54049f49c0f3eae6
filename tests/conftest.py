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
    """(compiled, python) kernel modules ``fpstore._{name}_c`` and its twin (``_backend.TWINS``)."""
    from fpstore._backend import TWINS

    return importlib.import_module(f"fpstore._{name}_c"), importlib.import_module(TWINS[name])


@pytest.fixture(params=["c", "py"])
def simhash_kernel(request):
    """Each fingerprint-kernel twin in turn, with the v1 fold and NFKC tables installed."""
    from fpstore.fingerprint import text

    from fpstore._backend import TWINS

    mod = importlib.import_module("fpstore._simhash_c" if request.param == "c" else TWINS["simhash"])
    mod.set_fold_table(text.FOLD)
    mod.set_active_table(text.ACTIVE_BITS)
    return mod
