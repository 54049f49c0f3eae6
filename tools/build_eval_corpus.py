"""Build fpstore's evaluation corpus from real documents, pinned by version and checksum.

    cd /work/main && python tools/build_eval_corpus.py --out ~/.cache/fpstore/eval-corpus

The corpus is several releases of the same documentation, so it holds real edits (pages that changed
a little or a lot between releases), unchanged pages (byte-identical pairs), and many unrelated pages:

* **HTML, raw**: the Clang user documentation (Sphinx HTML) of six releases, from Debian's
  ``clang-N-doc`` packages (bookworm and bookworm-backports, fetched with ``apt-get download``).
  Each page's reStructuredText source (``_sources/*.rst.txt``, shipped beside it) is recorded as its
  ``truth``: the author's text of the page, so the ground truth does not depend on any HTML
  extractor under test.
* **HTML, other generators**: one release each of the Python 3.11 documentation (Sphinx, a theme
  with sidebars) and of Git's documentation (AsciiDoc), with their sources as ``truth`` the same
  way: unrelated pages whose boilerplate differs from Clang's.
* **Plain text**: the documentation of three Django releases (``docs/**/*.txt``, reStructuredText),
  from the PyPI sdists (``pip download --no-deps --no-binary :all:``); 347 release-note files per
  release are short, template-like and mostly identical across releases: hard negatives and
  byte-identical pairs.

Every archive is checked against the SHA-256 pinned below before it is read; a mismatch stops the
build. Needs ``apt-get`` (Debian or a derivative with bookworm sources) and ``pip``; nothing else
is fetched. Output (about 60 MB, not committed):

* ``OUT/corpus.jsonl``: one JSON object per document: ``id``, ``source``, ``version``, ``path``,
  ``format`` (``"html"`` or ``"text"``), ``text`` (the raw file) and, for HTML pages, ``truth``.
* ``OUT/files/<source>/<version>/<path>``: the same raw files, for ``fpstore-admin calibrate OUT/files``.
* ``OUT/MANIFEST.json``: the pins, counts and the SHA-256 of ``corpus.jsonl``.

Archives are cached in ``OUT/cache``; a second run fetches nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

# (package, exact Debian version, SHA-256 of the .deb). Versions as served by the bookworm snapshot
# of 2025-05-20; releases 13..22 of the same documents.
DEBS = [
    ("clang-13-doc", "1:13.0.1-11", "b1b95c34151ddbc2c4ffe4ec0c584887f7a8a6281ae5a668539ef9219346303b"),
    ("clang-14-doc", "1:14.0.6-12", "9d4160c5cdb3e240fc676eacba163481002363f9532f854bc09e3eb566eb5c0f"),
    ("clang-15-doc", "1:15.0.6-4", "6090efd4128984a1abf423a7827e4c4f9f342e2f90fc8b1dcca0dc49eabe653d"),
    ("clang-16-doc", "1:16.0.6-15~deb12u1", "8d35e21608cdb313495c4bd6d1c0b212137ff6a88af67e841ac506948cb64e3d"),
    ("clang-19-doc", "1:19.1.7-3~deb12u1", "2f1eba32d001953792ccf0ec7d47cd6df6a835e29b63559da04e671b143552f7"),
    ("clang-22-doc", "1:22.1.8-1~deb12u1", "81c738346209479423184cde1ce9a0bbea14196cc4a3047ab5821b1cd4027632"),
    # One release each, other HTML generators and themes (Sphinx with sidebars; AsciiDoc): many
    # unrelated pages whose navigation and boilerplate differ from Clang's, to test the extractor.
    ("python3.11-doc", "3.11.2-6+deb12u8", "50eb63e7f636c4281e9ce1b8f10386f1def42159eddce34fc1f41c46261df71b"),
    ("git-doc", "1:2.39.5-0+deb12u2", "0d2f73d674b55178cca1974ae3cd6de06a618017b916451bc71d30e4aeeded3a"),
]

# Where each package keeps its HTML, and where the source of page STEM is (relative to that root).
_LAYOUT = {
    "clang": ("usr/share/doc/clang-{release}/html/", ("_sources/{stem}.rst.txt", "_sources/{stem}.txt")),
    "python3.11": ("usr/share/doc/python3.11/html/", ("_sources/{stem}.rst.txt", "_sources/{stem}.txt")),
    "git": ("usr/share/doc/git-doc/", ("{stem}.txt",)),
}

# (PyPI project, version, SHA-256 of the sdist).
SDISTS = [
    ("Django", "4.2.20", "92bac5b4432a64532abb73b2ac27203f485e40225d2640a7fbef2b62b876e789"),
    ("Django", "5.1.8", "42e92a1dd2810072bcc40a39a212b693f94406d0ba0749e68eb642f31dc770b4"),
    ("Django", "5.2", "1a47f7a7a3d43ce64570d350e008d2949abe8c7e21737b351b6a1611277c6d89"),
]

# Sphinx pages that are not documents: generated indexes and the search page.
_SKIP_HTML = {"genindex.html", "search.html", "py-modindex.html"}


class BuildError(RuntimeError):
    pass


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _checked(path: pathlib.Path, want: str) -> pathlib.Path:
    got = sha256(path)
    if got != want:
        raise BuildError(f"{path.name}: SHA-256 {got} does not match the pinned {want}; refusing to use it")
    return path


def fetch_deb(cache: pathlib.Path, package: str, version: str, digest: str) -> pathlib.Path:
    found = [p for p in cache.glob(f"{package}_*.deb") if sha256(p) == digest]
    if found:
        return found[0]
    if shutil.which("apt-get") is None:
        raise BuildError("apt-get is not available: the HTML part of the corpus comes from Debian packages")
    r = subprocess.run(["apt-get", "download", f"{package}={version}"], cwd=cache, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"apt-get download {package}={version} failed (run apt-get update first?): {r.stderr.strip()}")
    for p in cache.glob(f"{package}_*.deb"):
        if sha256(p) == digest:
            return p
    raise BuildError(f"{package}={version}: downloaded, but no file matches the pinned SHA-256 {digest}")


def fetch_sdist(cache: pathlib.Path, project: str, version: str, digest: str) -> pathlib.Path:
    for p in cache.glob("*.tar.gz"):
        if p.name.lower().startswith(f"{project.lower()}-{version}.tar") and sha256(p) == digest:
            return p
    r = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", f"{project}=={version}", "-d", str(cache)],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        raise BuildError(f"pip download {project}=={version} failed: {r.stderr.strip()[-500:]}")
    for p in cache.glob("*.tar.gz"):
        if p.name.lower().startswith(f"{project.lower()}-{version}.tar"):
            return _checked(p, digest)
    raise BuildError(f"pip download {project}=={version} left no sdist in {cache}")


def deb_members(deb: pathlib.Path) -> dict[str, bytes]:
    """Regular files of a .deb's data archive, by path (read through ``dpkg-deb --fsys-tarfile``)."""
    if shutil.which("dpkg-deb") is None:
        raise BuildError("dpkg-deb is not available")
    data = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar:
            if m.isfile():
                out[m.name.lstrip("./")] = tar.extractfile(m).read()
    return out


def html_docs(deb: pathlib.Path, package: str, version: str) -> list[dict]:
    """The HTML pages of a documentation package that have an authored source, with it as ``truth``."""
    project = package.rsplit("-", 2)[0] if package.startswith("clang-") else package[: -len("-doc")]
    release = package.split("-")[1] if package.startswith("clang-") else version.split(":")[-1].split("-")[0]
    files = deb_members(deb)
    root, patterns = _LAYOUT[project]
    prefix = root.format(release=release)
    docs = []
    for name, data in sorted(files.items()):
        if not name.startswith(prefix) or not name.endswith(".html"):
            continue
        rel = name[len(prefix):]
        if rel.startswith(("_", "search")) or os.path.basename(rel) in _SKIP_HTML:
            continue
        stem = rel[: -len(".html")]
        truth = next((files[prefix + p.format(stem=stem)] for p in patterns if prefix + p.format(stem=stem) in files), None)
        if truth is None:
            continue  # a page without a source is generated (an index), not authored
        docs.append({
            "source": f"{project}-doc", "version": release, "path": rel, "format": "html",
            "text": data.decode("utf-8", errors="replace"), "truth": truth.decode("utf-8", errors="replace"),
        })
    return docs


def django_docs(sdist: pathlib.Path, version: str) -> list[dict]:
    docs = []
    with tarfile.open(sdist) as tar:
        for m in sorted(tar.getmembers(), key=lambda m: m.name):
            parts = m.name.split("/", 2)
            if not m.isfile() or len(parts) < 3 or parts[1] != "docs" or not m.name.endswith(".txt"):
                continue
            if parts[2].startswith("_") or parts[2] == "requirements.txt":
                continue
            data = tar.extractfile(m).read()
            docs.append({"source": "django-docs", "version": version, "path": parts[2], "format": "text",
                         "text": data.decode("utf-8", errors="replace")})
    return docs


def build(out: pathlib.Path) -> dict:
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    docs: list[dict] = []
    pins = []
    for package, version, digest in DEBS:
        deb = fetch_deb(cache, package, version, digest)
        got = html_docs(deb, package, version)
        pins.append({"kind": "deb", "name": package, "version": version, "sha256": digest, "documents": len(got)})
        docs += got
        print(f"{package} {version}: {len(got)} HTML pages", flush=True)
    for project, version, digest in SDISTS:
        sd = fetch_sdist(cache, project, version, digest)
        got = django_docs(sd, version)
        pins.append({"kind": "sdist", "name": project, "version": version, "sha256": digest, "documents": len(got)})
        docs += got
        print(f"{project} {version}: {len(got)} text documents", flush=True)

    files = out / "files"
    if files.exists():
        shutil.rmtree(files)
    corpus = out / "corpus.jsonl"
    with open(corpus, "w", encoding="utf-8") as f:
        for d in docs:
            d["id"] = f"{d['source']}/{d['version']}/{d['path']}"
            f.write(json.dumps({k: d[k] for k in ("id", "source", "version", "path", "format", "text", "truth") if k in d},
                               ensure_ascii=False) + "\n")
            p = files / d["id"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(d["text"], encoding="utf-8")
    manifest = {
        "documents": len(docs),
        "html": sum(d["format"] == "html" for d in docs),
        "text": sum(d["format"] == "text" for d in docs),
        "bytes": sum(len(d["text"].encode()) for d in docs),
        "corpus_sha256": sha256(corpus),
        "pins": pins,
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "fpstore" / "eval-corpus"
    ap.add_argument("--out", type=pathlib.Path, default=default, help=f"output directory (default {default})")
    args = ap.parse_args(argv)
    try:
        m = build(args.out)
    except (BuildError, subprocess.CalledProcessError) as exc:
        print(f"build_eval_corpus: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}/corpus.jsonl: {m['documents']} documents ({m['html']} HTML, {m['text']} text), "
          f"{m['bytes'] / 1e6:.1f} MB, sha256 {m['corpus_sha256']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
