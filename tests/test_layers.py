"""The package's layers, read from its source: the operator's tools use the store's public API only,
and lower layers never import higher ones (docs/architecture.md).

Layers, lowest first: the base (closing, errors, limits, mixing, parallel, hamming, _backend, _version);
fingerprint and index (which never import each other); store; admin, quality, spark and aio.
``fpstore/__init__.py`` and ``fpstore/__main__.py`` may import anything; the package root
(``import fpstore``, ``from fpstore import Store``) is the public API, which only the top layer uses.
"""

from __future__ import annotations

import ast
import pathlib

PKG = pathlib.Path(__file__).resolve().parent.parent / "fpstore"

BASE = {"closing", "errors", "limits", "mixing", "parallel", "hamming", "_backend", "_version"}
LAYER = {"base": 0, "fingerprint": 1, "index": 1, "store": 2, "admin": 3, "quality": 3, "spark": 3, "aio": 3, "root": 3}
#: Layers of equal rank that must not import each other all the same.
APART = {frozenset({"fingerprint", "index"})}

#: Imports that break the layer rule today, each with who removes it. (importer, imported) layers
#: or modules: keep this empty once they are gone.
KNOWN_LAYER_BREAKS: dict[tuple[str, str], str] = {}


def _modules() -> list[tuple[str, pathlib.Path]]:
    out = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((".".join(parts), path))
    return out


def _is_package(path: pathlib.Path) -> bool:
    return path.name == "__init__.py"


def _imports(name: str, path: pathlib.Path) -> list[tuple[str, int]]:
    """``(module imported, line)`` for every import in the file, lazy ones included; ``from fpstore
    import X`` names the submodule X when there is one, else the package root."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = name if _is_package(path) else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                is_module = (PKG.parent / pathlib.Path(*sub.split("."))).with_suffix(".py").exists() or (
                    PKG.parent / pathlib.Path(*sub.split(".")) / "__init__.py").exists()
                out.append((sub if is_module else mod, node.lineno))
    return [(m, line) for m, line in out if m == "fpstore" or m.startswith("fpstore.")]


def _layer(module: str) -> str | None:
    """The layer of an fpstore module; None for the top-level __init__ and __main__ (exempt)."""
    parts = module.split(".")
    if module == "fpstore":
        return "root"
    if parts[1] == "__main__":
        return None
    if parts[1] in BASE or parts[1].startswith("_") and parts[1].endswith("_c"):  # compiled kernels: base
        return "base"
    return parts[1]


def test_every_module_has_a_layer():
    """Every module under fpstore/ is in a known layer, so the layer rule below covers it."""
    unknown = [m for m, _ in _modules() if m not in ("fpstore", "fpstore.__main__") and _layer(m) not in LAYER]
    assert not unknown, f"modules outside every layer (add them to BASE or a subpackage): {unknown}"


def test_lower_layers_never_import_higher_ones():
    """No module imports a module of a higher layer, and fingerprint and index never import each other."""
    bad = []
    for name, path in _modules():
        if name in ("fpstore", "fpstore.__main__"):
            continue  # the package root and ``python -m fpstore`` may import anything
        mine = _layer(name)
        for target, line in _imports(name, path):
            theirs = _layer(target)
            if theirs is None or theirs == mine:
                continue
            if LAYER[theirs] > LAYER[mine] or frozenset({mine, theirs}) in APART:
                if (name, target) in KNOWN_LAYER_BREAKS:
                    continue
                bad.append(f"{path.relative_to(PKG.parent)}:{line}: {mine} imports {target} ({theirs})")
    assert not bad, "\n".join(bad)


def test_known_layer_breaks_are_still_there():
    """Each allowlisted layer break still exists: once removed, its entry goes too."""
    found = {(name, target) for name, path in _modules() for target, _ in _imports(name, path)}
    gone = [pair for pair in KNOWN_LAYER_BREAKS if pair not in found]
    assert not gone, f"remove these from KNOWN_LAYER_BREAKS: {gone}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_names(tree: ast.AST) -> set[str]:
    """Names a module defines itself (functions, classes, assignments, attributes set on self)."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
    return own


#: Private names fpstore/admin still uses because the store has no public one yet: (file, name) ->
#: why, and who removes it. Keep this empty once they are gone.
KNOWN_PRIVATE_USES: dict[tuple[str, str], str] = {}


def test_admin_uses_public_names_only():
    """No module of fpstore/admin/ reads a private attribute of anything but itself (``store._storage``)
    or imports a private name or private module of another fpstore module (``from fpstore.store.store
    import _x``, ``from fpstore.store import store as _s``)."""
    bad = []
    for path in sorted((PKG / "admin").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        own = _own_names(tree)
        # Modules of other packages (argparse._SubParsersAction): the rule is about fpstore's own.
        foreign = {
            (a.asname or a.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for a in node.names
            if not a.name.startswith("fpstore")
        }
        where = path.relative_to(PKG.parent)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", *foreign):
                    continue
                if node.attr in own or (str(where), node.attr) in KNOWN_PRIVATE_USES:
                    continue
                bad.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("fpstore")):
                segments = (node.module or "").split(".")
                if any(_private(s) for s in segments[1:]) and not (len(segments) == 2 and segments[1] in BASE):
                    bad.append(f"{where}:{node.lineno}: from {node.module} (a private module)")
                for a in node.names:
                    if _private(a.name) or (a.asname and _private(a.asname)):
                        bad.append(f"{where}:{node.lineno}: import {a.name}" + (f" as {a.asname}" if a.asname else ""))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("fpstore") and (
                        any(_private(s) for s in a.name.split(".")[1:]) or (a.asname and _private(a.asname))):
                        bad.append(f"{where}:{node.lineno}: import {a.name}")
    assert not bad, "private names used by fpstore/admin:\n" + "\n".join(bad)


def test_known_private_uses_are_still_there():
    """Each allowlisted private use still exists: once removed, its entry goes too."""
    gone = [(f, name) for f, name in KNOWN_PRIVATE_USES if f".{name}" not in (PKG.parent / f).read_text(encoding="utf-8")]
    assert not gone, f"remove these from KNOWN_PRIVATE_USES: {gone}"
