"""A corpus of real text that every machine with Python has, for demos, tests and benchmarks.

Sources: the licence texts in ``/usr/share/common-licenses`` (Debian and its derivatives), the
licence files shipped in installed packages' ``*.dist-info`` folders (many MIT and BSD texts that
differ only in their copyright lines: real near-duplicates), and the topics of Python's own help
(``pydoc_data``). Every document is ``(name, text)``; names are unique.
"""

from __future__ import annotations

import os
import pathlib
import site
import sysconfig
from collections.abc import Iterator

__all__ = ["sample_corpus"]

_MAX_BYTES = 1 << 20  # skip anything larger: licence files are small, and a sample should be quick


def _read_once(path: pathlib.Path, seen: set[str]) -> str | None:
    """The text of ``path`` unless a file with the same real path was read already (licences are
    often links to one file)."""
    real = os.path.realpath(path)
    if real in seen:
        return None
    text = _read(path)
    if text:
        seen.add(real)
    return text


def _read(path: pathlib.Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return None
        return path.read_bytes().decode("utf-8", errors="replace")
    except OSError:
        return None


def _site_dirs() -> list[pathlib.Path]:
    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv's old site module
        pass
    return [pathlib.Path(d) for d in sorted(dirs) if os.path.isdir(d)]


def sample_corpus(*, licences: bool = True, packages: bool = True, pydoc: bool = True) -> Iterator[tuple[str, str]]:
    """Yield ``(name, text)`` documents of real English text found on this machine.

    Files reached through several paths (symlinks) are yielded once, under their first name.
    """
    seen: set[str] = set()
    if licences:
        root = pathlib.Path("/usr/share/common-licenses")
        if root.is_dir():
            for path in sorted(root.iterdir()):
                text = _read_once(path, seen)
                if text:
                    yield f"common-licenses/{path.name}", text
    if packages:
        for site_dir in _site_dirs():
            for dist in sorted(site_dir.glob("*.dist-info")):
                for path in sorted(dist.rglob("*")):
                    if not path.name.upper().startswith(("LICENSE", "LICENCE", "COPYING", "NOTICE", "AUTHORS")):
                        continue
                    text = _read_once(path, seen)
                    if text:
                        yield f"{dist.name}/{path.relative_to(dist)}", text
    if pydoc:
        topics: dict[str, str]
        try:
            from pydoc_data.topics import topics as pydoc_topics  # typeshed's is Final: not rebound below
        except ImportError:  # pragma: no cover - stripped Python builds
            topics = {}
        else:
            topics = pydoc_topics
        for name in sorted(topics):
            yield f"pydoc/{name}", topics[name]
