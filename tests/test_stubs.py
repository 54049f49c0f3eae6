"""The .pyi stubs of the compiled kernels name exactly what each kernel exports, and each name
exists in its specification twin (so that code type-checked against a stub runs on both)."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from fpstore._backend import TWINS

PKG = pathlib.Path(__file__).resolve().parent.parent / "fpstore"


def _stub_names(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


@pytest.mark.parametrize("kernel", sorted(TWINS))
def test_stub_names_the_kernels_exports(kernel):
    stub = PKG / f"_{kernel}_c.pyi"
    assert stub.exists(), f"no stub for the compiled kernel {kernel}"
    names = _stub_names(stub)
    twin = importlib.import_module(TWINS[kernel])
    missing_in_twin = sorted(n for n in names if not hasattr(twin, n))
    assert not missing_in_twin, f"{TWINS[kernel]} lacks {missing_in_twin}"
    compiled = pytest.importorskip(f"fpstore._{kernel}_c", reason="the compiled kernels are not built here")
    exported = {n for n in dir(compiled) if not n.startswith("_") and n != "np"}
    assert names == exported, f"stub {stub.name}: missing {sorted(exported - names)}, extra {sorted(names - exported)}"
