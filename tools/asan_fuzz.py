#!/usr/bin/env python3
"""AddressSanitizer runs of the compiled kernels, driven by the fuzz targets.

    python tools/asan_fuzz.py --seconds 300                  # a long run (ASan build at -O1)
    python tools/asan_fuzz.py --iterations 300 --opt 0       # what tests/test_asan.py runs
    python tools/asan_fuzz.py --corpus DIR --iterations 0    # replay a directory of inputs only
    python tools/asan_fuzz.py --write-seeds                  # regenerate tests/data/fuzz_seeds/

The Cython kernels (setup.py's ``KERNELS``: ``_simhash_c``, ``_runs_c``, ``_search_c``, ``_html_c``,
``_jpeg_c``) are
compiled with ``-fsanitize=address -fno-omit-frame-pointer -O1 -g`` (``--opt`` changes the level)
into a build cache outside the tree, ``$TMPDIR/fpstore-asan-build/<hash>/``, keyed by the C sources,
the flags and the compiler: the in-tree ``fpstore/*.so`` are never touched. The C sources are the
ones setup.py's cythonize wrote to ``cext/`` (what the in-tree kernels were compiled from) when they
are at least as new as their ``.pyx`` and ``cext/*.pxd``; otherwise Cython (``python -m cython`` or
``cython`` on the PATH) is run here with setup.py's compiler directives, read from setup.py itself.

A child interpreter then runs with the ASan runtime preloaded (``LD_PRELOAD`` of
``gcc -print-file-name=libasan.so``), ``ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:
allocator_may_return_null=1`` and ``PYTHONMALLOC=malloc`` (so that every Python object, bytes
included, is its own heap block with ASan redzones: pymalloc's arenas would hide small overruns).
An import hook makes ``fpstore._*_c`` load from the ASan build; the child checks and prints that
``fpstore.backend == "cython"``, that each kernel module in use is the ASan build's file, and that
the file references ``__asan_init``. It then runs, for each target, (a) every input of the seed
corpus (``tests/data/fuzz_seeds/<target>/*.bin``), replayed exactly, and (b) ``--iterations``
mutations of it (bit flips, bytes and words set to edge values, insertions, deletions, splices,
truncations, a few random byte strings), each a pure function of ``(--seed, target, number)``,
or as many as fit in the target's share of ``--seconds``.

Targets: the decoder fuzz targets of tests/support/fuzz.py (``fuzz_one``: run index, run index with its
checksum made right, run chunks through every probe, state, header, record, key block, idf, packed
ids), which reach ``_runs_c`` (``index_check``, ``decode_blocks``, ``probe_chunk``, ``probe_tables``) and
``_search_c.unpack_bits``; and four of this script's own for the kernels that no decoder reaches:
``text`` (fingerprints of arbitrary text through ``Pipeline``: ``_simhash_c``), ``run_encode``
(arbitrary sorted keys encoded, decoded and probed: ``_runs_c.encode_chunk`` and the probes on
valid runs), ``search`` (radix sort, the self-join of ``pairs_within``, bit packing:
``_search_c``) and ``jpeg`` (any bytes as a JPEG through ``eighth_scale_grey``: ``_jpeg_c``). A target answers or raises an ``FpstoreError``; a result that breaks its promise
or any other exception is a finding, and so, above all, is an ASan report (the child aborts).

Exit status: 0 when every input passed; 1 with the ASan report (or the findings), the input that
was running saved under ``--crash-dir/<target>/`` (replay it with ``--corpus``); 2 when the kernels
cannot be built. Each run prints inputs, outcomes and kernel calls per target, and the seconds.
``--selftest-overflow`` reads past a heap buffer on purpose before fuzzing (through ctypes): the
run must then fail with a heap-buffer-overflow report, which shows the sanitizer is live.
"""

from __future__ import annotations

import argparse
import ast
import collections
import hashlib
import json
import os
import platform
import random
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SEED_DIR = os.path.join(ROOT, "tests", "data", "fuzz_seeds")
CACHE_ROOT = os.environ.get("FPSTORE_ASAN_BUILD") or os.path.join(tempfile.gettempdir(), "fpstore-asan-build")
#: Bumped when the way this script builds changes, so that old cache entries are not reused.
BUILD_VERSION = 2
KEEP_BUILDS = 4
ASAN_OPTIONS = "detect_leaks=0:abort_on_error=1:allocator_may_return_null=1:print_summary=1"
EXTRA_TARGETS = ("text", "run_encode", "search", "jpeg")
MAX_INPUT = 1 << 16


# -- the build ----------------------------------------------------------------------------------------


def setup_py_facts() -> tuple[list[str], dict[str, object], int]:
    """(KERNELS, compiler_directives, language_level) as setup.py states them (read, not run)."""
    with open(os.path.join(ROOT, "setup.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    kernels = directives = level = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KERNELS" for t in node.targets):
            kernels = ast.literal_eval(node.value)
        if isinstance(node, ast.keyword) and node.arg == "compiler_directives":
            directives = ast.literal_eval(node.value)
        if isinstance(node, ast.keyword) and node.arg == "language_level":
            level = ast.literal_eval(node.value)
    if not kernels or directives is None or level is None:
        raise RuntimeError(
            "setup.py no longer states KERNELS, compiler_directives and language_level "
            "where tools/asan_fuzz.py reads them (setup_py_facts): update this script"
        )
    return list(kernels), dict(directives), int(level)


def compiler() -> list[str]:
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def libasan() -> str | None:
    """Path of the ASan runtime the compiler links against, or None."""
    try:
        out = subprocess.run(compiler() + ["-print-file-name=libasan.so"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return os.path.realpath(out) if os.path.isabs(out) and os.path.exists(out) else None


def toolchain_problem() -> str | None:
    """Why no ASan build can be made here (no C compiler, no libasan), or None when one can."""
    cc = compiler()
    if not shutil.which(cc[0]):
        return f"no C compiler: {cc[0]!r} is not on the PATH"
    if libasan() is None:
        return f"{cc[0]} has no AddressSanitizer runtime (libasan.so); on Debian: apt-get install gcc (libasan8)"
    with tempfile.TemporaryDirectory(prefix="fpstore-asan-probe-") as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write("int probe(const int *p) { return p[1]; }\n")
        proc = subprocess.run(
            cc + ["-shared", "-fPIC", "-fsanitize=address", "-o", os.path.join(tmp, "probe.so"), src], capture_output=True, text=True
        )
        if proc.returncode:
            return f"{cc[0]} cannot build with -fsanitize=address: {proc.stderr.strip()[-300:]}"
    return None


def popcount_flags() -> list[str]:
    """``-mpopcnt`` exactly when setup.py passes it (x86-64 with the instruction, not FPSTORE_PORTABLE)."""
    if os.environ.get("FPSTORE_PORTABLE", "") not in ("", "0") or platform.machine().lower() not in ("x86_64", "amd64"):
        return []
    try:
        with open("/proc/cpuinfo") as f:
            return ["-mpopcnt"] if any(line.startswith("flags") and " popcnt" in line for line in f) else []
    except OSError:
        return []


def compile_flags(opt: str) -> list[str]:
    """The interpreter's CFLAGS less optimisation and debug levels, setup.py's extra flags, ASan's."""
    base = [f for f in shlex.split(sysconfig.get_config_var("CFLAGS") or "") if not re.fullmatch(r"-O.*|-g.*", f)]
    return (
        base
        + shlex.split(sysconfig.get_config_var("CCSHARED") or "-fPIC")
        + ["-fno-strict-aliasing"]
        + popcount_flags()
        + ["-fsanitize=address", "-fno-omit-frame-pointer", opt, "-g", "-I" + sysconfig.get_paths()["include"]]
    )


def cython_command() -> list[str] | None:
    import importlib.util

    if importlib.util.find_spec("Cython") is not None:
        return [sys.executable, "-m", "cython"]
    exe = shutil.which("cython")
    return [exe] if exe else None


def is_cplus(pyx: str) -> bool:
    """True when a kernel's .pyx asks for C++ (``# distutils: language = c++`` among its first lines)."""
    try:
        with open(pyx, encoding="utf-8") as f:
            head = [f.readline() for _ in range(5)]
    except OSError:
        return False
    return any(re.match(r"#\s*distutils:\s*language\s*=\s*c\+\+", line) for line in head)


def c_sources(cext: str, work: str, say) -> dict[str, str]:
    """Kernel name -> path of its C source copied into ``work`` (see the module docstring)."""
    kernels, directives, level = setup_py_facts()
    out = {}
    lock = None
    try:
        import fcntl

        # tools/build_inplace.sh rewrites cext/*.c under this lock: read them under it too.
        lock = open("/tmp/fpstore-build.lock", "a")  # noqa: SIM115 - held until the finally below
        fcntl.flock(lock, fcntl.LOCK_SH)
    except OSError:
        lock = None
    try:
        # The kernels cimport cext/*.pxd (_common.pxd): a .c is current only if no source is newer.
        pxds = [os.path.join(cext, n) for n in os.listdir(cext) if n.endswith(".pxd")]
        for name in kernels:
            pyx = os.path.join(cext, f"{name}.pyx")
            ext = ".cpp" if is_cplus(pyx) else ".c"  # cythonize writes a C++ kernel's source to .cpp
            c, dst = os.path.join(cext, name + ext), os.path.join(work, name + ext)
            newest = max([os.path.getmtime(p) for p in [pyx] + pxds if os.path.exists(p)], default=0.0)
            if os.path.exists(c) and os.path.getmtime(c) >= newest:
                shutil.copyfile(c, dst)
            else:
                cmd = cython_command()
                if cmd is None:
                    raise RuntimeError(
                        f"{c} is missing or older than {pyx}, and Cython is not installed here "
                        "(pip install Cython, or build the package once: pip install -e .)"
                    )
                say(f"cythonizing {pyx} (no up-to-date {c})")
                opts = ",".join(f"{k}={v}" for k, v in directives.items())
                proc = subprocess.run(
                    cmd
                    + (["--cplus"] if ext == ".cpp" else [])
                    + [f"-{level}", "-I", cext, "--module-name", f"fpstore.{name}", "-X", opts, "-o", dst, pyx],
                    capture_output=True,
                    text=True,
                )
                if proc.returncode:
                    raise RuntimeError(f"Cython failed on {pyx}:\n{proc.stdout}{proc.stderr}")
            out[name] = dst
    finally:
        if lock is not None:
            lock.close()
    return out


def build(opt: str = "-O1", cext: str | None = None, say=print) -> tuple[str, dict]:
    """Build (or find in the cache) the ASan kernels: (directory, build facts). The directory also
    keeps the C sources, which the kernels' debug information and so ASan's reports name."""
    cext = os.path.abspath(cext or os.path.join(ROOT, "cext"))
    os.makedirs(CACHE_ROOT, exist_ok=True)
    work = tempfile.mkdtemp(prefix="tmp-", dir=CACHE_ROOT)
    try:
        sources = c_sources(cext, work, say)
        cc, flags = compiler(), compile_flags(opt)
        version = subprocess.run(cc + ["--version"], capture_output=True, text=True).stdout.splitlines()[:1]
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        h = hashlib.sha256(json.dumps([BUILD_VERSION, cc, flags, version, suffix, sys.version]).encode())
        for name in sorted(sources):
            with open(sources[name], "rb") as f:
                h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
        key = h.hexdigest()[:20]
        final = os.path.join(CACHE_ROOT, key)
        if os.path.exists(os.path.join(final, "build.json")):
            with open(os.path.join(final, "build.json")) as f:
                facts = json.load(f)
            facts["cached"] = True
            os.utime(final)
            return final, facts
        t0 = time.perf_counter()
        procs = {}
        jobs = max(1, min(len(sources), os.cpu_count() or 1))
        pending = sorted(sources)
        while pending or procs:
            while pending and len(procs) < jobs:
                name = pending.pop(0)
                so = os.path.join(work, name + suffix)
                # Debug info names the C source where the cache keeps it, so a report's file:line opens.
                remap = [f"-fdebug-prefix-map={work}={final}"]
                cplus = ["-lstdc++"] if sources[name].endswith(".cpp") else []  # the driver compiles .cpp as C++
                procs[name] = subprocess.Popen(
                    cc + ["-shared"] + flags + remap + ["-o", so, sources[name]] + cplus,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            for name, p in list(procs.items()):
                if p.poll() is not None:
                    text = p.stdout.read()
                    del procs[name]
                    if p.returncode:
                        for q in procs.values():
                            q.kill()
                        raise RuntimeError(f"compiling {name} with ASan failed:\n{text[-4000:]}")
            time.sleep(0.05)
        facts = {
            "opt": opt,
            "cc": cc,
            "cc_version": version,
            "flags": flags,
            "cext": cext,
            "kernels": {n: n + suffix for n in sorted(sources)},
            "build_seconds": round(time.perf_counter() - t0, 1),
        }
        with open(os.path.join(work, "build.json"), "w") as f:
            json.dump(facts, f, indent=1)
        try:
            os.rename(work, final)
        except OSError:  # another run built the same key at the same time: use its copy
            shutil.rmtree(work, ignore_errors=True)
        work = None
        _prune()
        facts["cached"] = False
        return final, facts
    finally:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)


def _prune() -> None:
    """Keep the KEEP_BUILDS most recently used builds of the cache (only directories it made)."""
    entries = []
    for name in os.listdir(CACHE_ROOT):
        path = os.path.join(CACHE_ROOT, name)
        if re.fullmatch(r"[0-9a-f]{20}", name) and os.path.exists(os.path.join(path, "build.json")):
            entries.append((os.path.getmtime(path), path))
    for _, path in sorted(entries, reverse=True)[KEEP_BUILDS:]:
        shutil.rmtree(path, ignore_errors=True)
    for name in os.listdir(CACHE_ROOT):  # builds that died a day ago or more
        path = os.path.join(CACHE_ROOT, name)
        if name.startswith("tmp-") and time.time() - os.path.getmtime(path) > 86400:
            shutil.rmtree(path, ignore_errors=True)


# -- the script's own targets (the kernels no decoder reaches) ------------------------------------------


class _DictTxn:
    def __init__(self, values: dict) -> None:
        self.values = values

    def get(self, key, db=None):  # noqa: ANN001 - mirrors lmdb.Transaction.get
        return self.values.get(bytes(key))


_pipes: list = []


def _pipelines() -> list:
    if not _pipes:
        from fpstore import IdfTable, Pipeline

        idf = IdfTable({"the": 0, "fox": 40, "über": 200, "dog": 255}, 16)
        for kind in ("minhash1", "simhash64"):
            for shingle in (1, 3, 16):
                _pipes.append(Pipeline(kind=kind, shingle=shingle, html="off"))
            _pipes.append(Pipeline(kind=kind, shingle=2))  # html="main-v1"
        _pipes.append(Pipeline(kind="simhash64", shingle=3, weighting="idf", idf=idf, html="off"))
    return _pipes


def _fz_text(data: bytes) -> None:
    """Arbitrary text through a pipeline: the fingerprint kernel, one text and a batch, must agree;
    and the kernel's NFKC must equal unicodedata's."""
    if not data:
        return
    op, body = data[0], data[1:]
    mode = op & 3
    if mode == 0:
        text: object = body.decode("utf-8", "replace")
    elif mode == 1:
        text = body  # bytes: the pipeline decodes them
    else:  # any code point, surrogates and unassigned ones included
        text = "".join(chr(int.from_bytes(body[i : i + 3], "little") % 0x110000) for i in range(0, len(body) - 2, 3))
        if mode == 3:
            text = " ".join([text] * 3)
    if isinstance(text, str):  # the kernel's NFKC (no GIL, its own tables) against unicodedata's
        import unicodedata

        from fpstore.fingerprint import text as _text

        if _text.nfkc(text) != unicodedata.normalize("NFKC", text):
            raise AssertionError("text.nfkc disagrees with unicodedata")
    pipe = _pipelines()[(op >> 2) % len(_pipelines())]
    sig = pipe.signature(text)
    half = text[: len(text) // 2]
    fps = pipe.fingerprint_many([text, half, text], threads=1)
    if int(fps[0]) != sig.fingerprint or int(fps[2]) != sig.fingerprint or int(fps[1]) != pipe.fingerprint(half):
        raise AssertionError("fingerprint_many disagrees with signature/fingerprint")


def _keys_from(data: bytes, op: int) -> object:
    import numpy as np

    n = len(data) // 8
    keys = np.frombuffer(data[: 8 * n], "<u8").copy()
    if op & 1:  # clustered: small gaps from the first key
        keys = (np.uint64(keys[0] if n else 0) + np.cumsum(keys & np.uint64(0xFFF), dtype=np.uint64)).astype(np.uint64)
    if op & 2 and n:  # narrow: many duplicates
        keys >>= np.uint64(int(data[0]) % 64)
    return np.sort(keys)


def _fz_run_encode(data: bytes) -> None:
    """Sorted keys made from the bytes, encoded, decoded and probed: every answer equals the keys'."""
    import numpy as np

    from fpstore.index import runs

    if len(data) < 3:
        return
    op, be_sel, q = data[0], data[1], data[2]
    keys = _keys_from(data[3:], op)
    be = (1, 2, 3, 4, 7, 16, 64, 255, 256, 4096, 65535)[be_sel % 11]
    cap = runs.max_block_bytes(be) * (1 + (op >> 2) % 3)
    index, chunks = runs.encode_run(keys, block_entries=be, chunk_bytes=cap)
    get = chunks.__getitem__
    if not np.array_equal(runs.decode_run(get, index, checksum=True), keys):
        raise AssertionError("decode_run(encode_run(keys)) != keys")
    again = runs.RunIndex.from_bytes(index.to_bytes())
    if not np.array_equal(runs.decode_run(get, again), keys):
        raise AssertionError("the index did not survive to_bytes/from_bytes")
    if not len(keys):
        return
    rng = random.Random(data)
    for _ in range(3):
        a, b = sorted(int(rng.choice(keys)) ^ rng.getrandbits(rng.choice((0, 4, 16, 64))) for _ in range(2))
        want = keys[(keys >= np.uint64(a)) & (keys <= np.uint64(b))]
        if not np.array_equal(runs.probe(get, index, a, b), want):
            raise AssertionError(f"probe({a}, {b}) != brute force")
        k = q % 65
        table = runs.probe_table(index, list(range(index.nchunks)))
        got = sorted(key for _, key, _ in runs.probe_tables([table], get, [(0, a, b, a)], k))
        near = sorted(int(x) for x in want if bin(int(x) ^ a).count("1") <= k)
        if got != near:
            raise AssertionError(f"probe_tables({a}, {b}, k={k}) != brute force")
    # Exact lookups of a few keys (one of them stored, the others a bit away): one row per
    # (query, stored copy) pair.
    qs = np.sort(np.array([int(rng.choice(keys)) ^ (1 << rng.randrange(64)) for _ in range(4)] + [int(keys[0])], np.uint64))
    _, found, _ = runs.probe_batch_run(get, index, qs, 64, 0)
    want = sorted(int(q) for q in qs for _ in range(int((keys == q).sum())))
    if sorted(found.tolist()) != want:
        raise AssertionError("probe_batch_run exact lookups != brute force")


def _fz_search(data: bytes) -> None:
    """Fingerprints made from the bytes: radix sort, stable argsort, pairs_within and prefix_join
    (against brute force), and a packed column's round trip."""
    import numpy as np

    from fpstore.index import search, tiers

    if len(data) < 2:
        return
    op, k = data[0], data[1] % 6  # the first call at each k builds its design catalogue: ~0.2 s (k 0..5)
    fps = np.frombuffer(data[2 : 2 + 8 * ((len(data) - 2) // 8)], "<u8").copy()
    if op & 1 and len(fps):  # near duplicates of the first: a few bits flipped
        fps = fps[0] ^ (fps & np.uint64(0x0101_0000_0000_0101))
    if not np.array_equal(search.sort_u64(fps), np.sort(fps)):
        raise AssertionError("sort_u64 != np.sort")
    if not np.array_equal(search.argsort_u64(fps), np.argsort(fps, kind="stable")):
        raise AssertionError("argsort_u64 != stable np.argsort")
    if len(fps) <= 256:
        i, j, d = search.pairs_within(fps, k)
        a, b = np.triu_indices(len(fps), 1)
        dist = np.bitwise_count(fps[a] ^ fps[b])
        keep = dist <= k
        order = np.lexsort((j, i))
        if not (np.array_equal(i[order], a[keep]) and np.array_equal(j[order], b[keep]) and np.array_equal(d[order], dist[keep])):
            raise AssertionError(f"pairs_within(k={k}) != brute force")
        # prefix_join (the streamed join's multi-probe kernel): one array with itself, and two halves.
        p = op % 65
        pre = fps >> np.uint64(64 - p) if p else np.zeros(len(fps), np.uint64)
        srt, spre = fps[np.argsort(pre, kind="stable")], np.sort(pre)
        masks = np.array(sorted({0, 1, (op >> 2) & 7}), np.uint64)
        for same in (True, False):
            a_keys, b_keys = (srt, srt) if same else (srt[::2].copy(), srt[1::2].copy())
            a_pre, b_pre = (spre, spre) if same else (spre[::2], spre[1::2])
            i, j, d = search._search.prefix_join(a_keys, b_keys, p, masks, k, same)
            want = set()
            for x in range(len(a_keys)):
                for y in range(len(b_keys)):
                    m = int(a_pre[x]) ^ int(b_pre[y])
                    if same and (x == y or (m == 0 and y < x) or (m and a_pre[x] > b_pre[y])):
                        continue
                    dist_xy = (int(a_keys[x]) ^ int(b_keys[y])).bit_count()
                    if m in masks.tolist() and dist_xy <= k:
                        want.add((x, y, dist_xy))
            if set(zip(i.tolist(), j.tolist(), d.tolist())) != want or len(want) != len(i):
                raise AssertionError(f"prefix_join(p={p}, same={same}) != brute force")
    vals = fps >> np.uint64(op % 64)
    blobs, rec = tiers.packed_blobs(b"p", vals)
    if len(vals):
        pos = np.arange(len(vals), dtype=np.int64)
        if not np.array_equal(tiers.read_packed(_DictTxn(dict(blobs)), None, b"p", rec, pos), vals):
            raise AssertionError("read_packed(packed_blobs(v)) != v")


def _fz_jpeg(data: bytes) -> None:
    """Any bytes as a JPEG through the DC decoder (``_jpeg_c``): None, or libjpeg's grey at 1/8 in
    the shape the frame header declares."""
    from fpstore.fingerprint.jpeg import eighth_scale_grey

    grey = eighth_scale_grey(data)
    if grey is not None and (grey.dtype.name != "uint8" or grey.ndim != 2 or 0 in grey.shape):
        raise AssertionError(f"eighth_scale_grey gave {grey.dtype} {grey.shape}")


_EXTRA = {"text": _fz_text, "run_encode": _fz_run_encode, "search": _fz_search, "jpeg": _fz_jpeg}


def extra_seeds() -> dict[str, list[bytes]]:
    """Valid inputs for the script's own targets."""
    import numpy as np

    rng = np.random.default_rng(20251201)
    texts = [
        b"\x00" + b"The quick brown fox jumps over the lazy dog. " * 3,
        b"\x05"
        + b"<html><head><title>t</title></head><body><nav>menu</nav><article><p>"
        + b"Crawled text with a paragraph long enough to be the main content of the page. " * 4
        + b"</p></article></body></html>",
        b"\x09" + "ﬁ ＡＢＣ Straße İstanbul e\u0301 한국어 日本語のテキスト \U0001f600 \u200b\u00ad".encode(),
        b"\x0e"
        + b"".join(
            int(c).to_bytes(3, "little")
            for c in [0x61, 0x301, 0x20, 0xD800, 0x20, 0xAC00, 0x1100, 0x1161, 0x20, 0xFF21, 0x10FFFF, 0x20, 0xFDD0]
        ),
        b"\x11" + bytes(range(256)),
        b"\x13" + ("word " * 200).encode(),
    ]
    keys = [
        b"\x00\x05\x07" + rng.integers(0, 1 << 63, 64, dtype=np.uint64).tobytes(),
        b"\x01\x02\x03" + rng.integers(0, 1 << 63, 200, dtype=np.uint64).tobytes(),
        b"\x06\x00\x40" + rng.integers(0, 1 << 63, 40, dtype=np.uint64).tobytes(),
        b"\x08\x09\x00" + (np.arange(1, 20, dtype=np.uint64) << np.uint64(45)).tobytes(),
    ]
    search_in = [
        b"\x00\x03" + rng.integers(0, 1 << 63, 50, dtype=np.uint64).tobytes(),
        b"\x01\x04" + rng.integers(0, 1 << 63, 80, dtype=np.uint64).tobytes(),
        b"\x22\x08" + np.repeat(rng.integers(0, 1 << 63, 10, dtype=np.uint64), 3).tobytes(),
    ]
    return {"text": texts, "run_encode": keys, "search": search_in, "jpeg": _jpeg_seeds()}


def _jpeg_seeds() -> list[bytes]:
    """Small JPEGs of every kind the DC decoder follows (made by Pillow, from a seeded picture)."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(7)
    yy, xx = np.mgrid[0:40, 0:56]
    rgb = np.stack([xx * 4, yy * 5, (xx + yy) * 2], axis=-1) + rng.integers(0, 30, (40, 56, 3))
    picture = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))
    out = []
    for mode, options in (
        ("RGB", {"quality": 75}),
        ("RGB", {"quality": 90, "progressive": True}),
        ("RGB", {"quality": 60, "subsampling": 0, "restart_marker_blocks": 2}),
        ("L", {"quality": 80, "progressive": True, "restart_marker_rows": 1}),
        ("RGB", {"quality": 85, "optimize": True, "subsampling": "4:1:1"}),
    ):
        buf = io.BytesIO()
        picture.convert(mode).save(buf, "JPEG", **options)
        out.append(buf.getvalue())
    return out


def all_seeds() -> dict[str, list[bytes]]:
    from tests.support.fuzz import fuzz_seeds

    seeds = fuzz_seeds()
    seeds.update(extra_seeds())
    return seeds


def all_targets() -> tuple[str, ...]:
    from tests.support.fuzz import FUZZ_TARGETS

    return tuple(FUZZ_TARGETS) + EXTRA_TARGETS


def write_seeds(directory: str = SEED_DIR) -> dict[str, int]:
    """Write the generators' seeds as ``directory/<target>/<n>.bin`` (other ``<n>.bin`` removed)."""
    counts = {}
    for target, seeds in all_seeds().items():
        d = os.path.join(directory, target)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if re.fullmatch(r"\d+\.bin", name):
                os.remove(os.path.join(d, name))
        for n, data in enumerate(seeds):
            with open(os.path.join(d, f"{n}.bin"), "wb") as f:
                f.write(data)
        counts[target] = len(seeds)
    return counts


def read_corpus(directory: str, targets) -> dict[str, list[tuple[str, bytes]]]:
    out = {}
    for target in targets:
        d = os.path.join(directory, target)
        names = sorted((n for n in os.listdir(d) if n.endswith(".bin")), key=lambda n: (len(n), n)) if os.path.isdir(d) else []
        out[target] = []
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                out[target].append((name, f.read()))
    return out


# -- mutations ----------------------------------------------------------------------------------------

_BYTES = (0, 1, 2, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF)
_WORDS = (
    0,
    1,
    2,
    0x7F,
    0xFF,
    0x100,
    0x7FFF,
    0x8000,
    0xFFFF,
    0x10000,
    0x7FFF_FFFF,
    0x8000_0000,
    0xFFFF_FFFF,
    1 << 32,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
)


def mutate(seed: int, target: str, number: int, corpus: list[bytes]) -> bytes:
    """Mutation ``number`` of ``target``'s corpus: a pure function of its arguments."""
    rng = random.Random(f"{seed}/{target}/{number}")
    if not corpus or rng.random() < 0.04:
        return rng.randbytes(rng.randrange(257))
    data = bytearray(rng.choice(corpus))
    for _ in range(min(16, 1 + int(rng.expovariate(0.6)))):
        n = len(data)
        op = rng.randrange(11)
        if op == 0 and n:
            data[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            data[rng.randrange(n)] = rng.randrange(256)
        elif op == 2 and n:
            data[rng.randrange(n)] = rng.choice(_BYTES)
        elif op == 3 and n:
            i = rng.randrange(n)
            data[i] = (data[i] + rng.randint(-8, 8)) & 0xFF
        elif op == 4 and n >= 2:
            w = rng.choice([x for x in (2, 4, 8) if x <= n])
            v = (rng.choice(_WORDS) + rng.randint(-2, 2)) % (1 << (8 * w))
            i = rng.randrange(n - w + 1)
            data[i : i + w] = v.to_bytes(w, rng.choice(("little", "big")))
        elif op == 5 and n:
            i = rng.randrange(n)
            del data[i : i + 1 + int(rng.expovariate(0.1))]
        elif op == 6:
            i = rng.randrange(n + 1)
            m = 1 + rng.randrange(16)
            data[i:i] = rng.randbytes(m) if rng.random() < 0.5 else bytes([rng.randrange(256)]) * m
        elif op == 7 and n:
            a = rng.randrange(n)
            b = min(n, a + 1 + rng.randrange(64))
            data[rng.randrange(n + 1) : rng.randrange(n + 1)] = data[a:b]
        elif op == 8:
            other = rng.choice(corpus)
            data = data[: rng.randrange(n + 1)] + other[rng.randrange(len(other) + 1) :]
        elif op == 9 and n:
            del data[rng.randrange(n) :]
        elif op == 10:
            data += rng.randbytes(rng.randrange(1, 65))
    return bytes(data[:MAX_INPUT])


# -- the child: runs under ASan -------------------------------------------------------------------------


class _AsanKernels:
    """Meta path finder: ``fpstore._<kernel>`` from the ASan build instead of the package."""

    def __init__(self, paths: dict[str, str]) -> None:
        self.paths = paths

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 - importlib protocol
        import importlib.util

        where = self.paths.get(fullname)
        return importlib.util.spec_from_file_location(fullname, where) if where else None


def _say(tag: str, obj: object) -> None:
    sys.stdout.write(f"{tag} {json.dumps(obj)}\n")
    sys.stdout.flush()


def child(args: argparse.Namespace) -> int:
    import faulthandler

    faulthandler.enable()  # the Python stack of the call that aborted, after ASan's report
    with open(os.path.join(args.build, "build.json")) as f:
        facts = json.load(f)
    paths = {f"fpstore.{n}": os.path.join(args.build, so) for n, so in facts["kernels"].items()}
    sys.meta_path.insert(0, _AsanKernels(paths))
    with open("/proc/self/maps") as f:
        maps = f.read()
    if "libasan" not in maps:
        raise SystemExit("the ASan runtime is not loaded in the child (LD_PRELOAD)")

    import fpstore
    from fpstore.fingerprint import jpeg, pipeline, text
    from fpstore.index import runs, search

    if fpstore.backend != "cython":
        raise SystemExit(f"fpstore.backend is {fpstore.backend!r}, not 'cython' (FPSTORE_PUREPYTHON set?)")
    kernels = {}
    for name, path in paths.items():
        mod = sys.modules[name]
        with open(mod.__file__, "rb") as f:
            instrumented = b"__asan_init" in f.read()
        if os.path.realpath(mod.__file__) != os.path.realpath(path) or not instrumented:
            raise SystemExit(f"{name} was loaded from {mod.__file__}, not the ASan build {path}")
        kernels[name] = {"file": mod.__file__, "asan": instrumented}
    users = {
        "runs._kernel": runs._kernel,
        "pipeline._kernel": pipeline._kernel,
        "search._search": search._search,
        "text._kernel": getattr(text, "_kernel", None),
        "jpeg._kernel": jpeg._kernel,
    }
    for where, mod in users.items():
        if mod is not None and mod.__name__ in paths and mod is not sys.modules[mod.__name__]:
            raise SystemExit(f"fpstore.{where} is not the ASan kernel")
    _say(
        "KERNELS",
        {
            "backend": fpstore.backend,
            "kernels": kernels,
            "asan_options": os.environ.get("ASAN_OPTIONS"),
            "pythonmalloc": os.environ.get("PYTHONMALLOC"),
        },
    )

    from fpstore.errors import FpstoreError
    from tests.support.fuzz import fuzz_one

    # Count kernel calls per target: each module-level function of a kernel becomes a counting
    # wrapper (callers look them up on the module at every call).
    current = [""]
    calls: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for name in paths:
        mod = sys.modules[name]
        short = name.split(".", 1)[1]
        for attr in dir(mod):
            fn = getattr(mod, attr)
            if attr.startswith("_") or isinstance(fn, type) or not callable(fn):
                continue

            def counted(*a, _fn=fn, _key=f"{short}.{attr}", **kw):
                calls[current[0]][_key] += 1
                return _fn(*a, **kw)

            setattr(mod, attr, counted)

    if args.selftest_overflow:
        import ctypes

        src, dst = ctypes.create_string_buffer(16), ctypes.create_string_buffer(64)
        ctypes.memmove(dst, src, 40)  # reads 24 bytes past src: ASan must abort here
        _say("SELFTEST", "the overflow was not caught: ASan is not active")
        return 3

    fd = os.open(args.current, os.O_WRONLY | os.O_CREAT, 0o600)

    def run_one(target: str, label: str, data: bytes) -> str:
        head = f"{target}\n{label}\n".encode()
        os.pwrite(fd, head + data, 0)
        os.ftruncate(fd, len(head) + len(data))
        try:
            if target in _EXTRA:
                try:
                    _EXTRA[target](data)
                except FpstoreError as exc:
                    return type(exc).__name__
                return "ok"
            return fuzz_one(target, data)
        except Exception as exc:  # noqa: BLE001 - a finding: note it and go on
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            _say(
                "FINDING",
                {
                    "target": target,
                    "input": label,
                    "error": f"{type(exc).__name__}: {exc}"[:500],
                    "at": f"{where.filename}:{where.lineno}",
                    "data": data.hex(),
                },
            )
            return "FINDING:" + type(exc).__name__

    corpus = read_corpus(args.corpus, args.targets)
    per_target = args.seconds / len(args.targets) if args.seconds else None
    for target in args.targets:
        current[0] = target
        t0 = time.perf_counter()
        outcomes: collections.Counter = collections.Counter()
        for name, data in corpus[target]:
            outcomes[run_one(target, f"seed {name}", data)] += 1
        seeds = [d for _, d in corpus[target]]
        i = 0
        while (args.iterations is None or i < args.iterations) and (per_target is None or time.perf_counter() - t0 < per_target):
            outcomes[run_one(target, f"mutation {i} of seed {args.seed}", mutate(args.seed, target, i, seeds))] += 1
            i += 1
        _say(
            "TARGET",
            {
                "target": target,
                "seeds": len(corpus[target]),
                "mutations": i,
                "seconds": round(time.perf_counter() - t0, 2),
                "outcomes": dict(outcomes),
                "kernel_calls": dict(calls.pop(target, {})),
            },
        )
    os.close(fd)
    _say("DONE", {})
    return 0


# -- the parent -----------------------------------------------------------------------------------------


def asan_report(stderr: str) -> str:
    """ASan's report (from its ERROR line) and the Python stack after it, at most 200 lines."""
    m = re.search(r"^=+\d+=+ERROR: AddressSanitizer.*", stderr, re.M) or re.search(r"^.*AddressSanitizer.*$", stderr, re.M)
    text = stderr[m.start() :] if m else stderr[-6000:]
    lines = text.splitlines()
    return "\n".join(lines[:200] + ([f"... ({len(lines) - 200} more lines)"] if len(lines) > 200 else []))


def run(args: argparse.Namespace) -> int:
    t_all = time.perf_counter()
    say = lambda *a: print(*a, flush=True)  # noqa: E731
    problem = toolchain_problem()
    if problem:
        say(f"cannot build ASan kernels: {problem}")
        return 2
    try:
        build_dir, facts = build(args.opt, args.cext, say)
    except RuntimeError as exc:
        say(f"ASan build failed: {exc}")
        return 2
    how = "cached" if facts["cached"] else f"built in {facts['build_seconds']} s"
    say(f"ASan kernels ({how}, {facts['opt']} -g -fsanitize=address -fno-omit-frame-pointer): {build_dir}")
    targets = args.targets.split(",") if args.targets else list(all_targets())
    unknown = set(targets) - set(all_targets())
    if unknown:
        say(f"unknown targets {sorted(unknown)}; known: {','.join(all_targets())}")
        return 2
    corpus = os.path.abspath(args.corpus)
    if args.corpus == SEED_DIR and not args.targets:
        stale = [t for t, seeds in all_seeds().items() if [d for _, d in read_corpus(corpus, [t])[t]] != seeds]
        if stale:
            say(
                f"note: the committed corpus differs from the generators for {','.join(stale)} "
                "(regenerate with --write-seeds if the format changed)"
            )
    iterations = args.iterations if args.iterations is not None or args.seconds else 2000
    work = tempfile.mkdtemp(prefix="fpstore-asan-run-")
    current = os.path.join(work, "current-input")
    env = dict(os.environ)
    env.pop("FPSTORE_PUREPYTHON", None)
    env["LD_PRELOAD"] = " ".join(x for x in (libasan(), env.get("LD_PRELOAD")) if x)
    env["ASAN_OPTIONS"] = ":".join(x for x in (ASAN_OPTIONS, os.environ.get("ASAN_OPTIONS")) if x)
    env["PYTHONMALLOC"] = "malloc"
    env["PYTHONPATH"] = os.pathsep.join(x for x in (ROOT, env.get("PYTHONPATH")) if x)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        "--build",
        build_dir,
        "--corpus",
        corpus,
        "--current",
        current,
        "--seed",
        str(args.seed),
        "--targets",
        ",".join(targets),
        "--seconds",
        str(args.seconds or 0),
    ]
    if iterations is not None:
        cmd += ["--iterations", str(iterations)]
    if args.selftest_overflow:
        cmd.append("--selftest-overflow")
    say(
        f"LD_PRELOAD={env['LD_PRELOAD']} ASAN_OPTIONS={env['ASAN_OPTIONS']} PYTHONMALLOC=malloc; seed {args.seed}, "
        f"{f'{iterations} mutations' if iterations is not None else 'no mutation limit'}"
        f"{f', {args.seconds:g} s' if args.seconds else ''} per run over {len(targets)} targets"
    )
    stderr_path = os.path.join(work, "stderr")
    results: dict = {"targets": {}, "findings": [], "kernels": None}
    t0 = time.perf_counter()
    with open(stderr_path, "w+") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True)

        def reader() -> None:
            for line in proc.stdout:
                tag, _, body = line.rstrip("\n").partition(" ")
                try:
                    obj = json.loads(body)
                except ValueError:
                    say(f"child: {line.rstrip()}")
                    continue
                if tag == "KERNELS":
                    results["kernels"] = obj
                    say(f"child: fpstore.backend = {obj['backend']}")
                    for name, k in obj["kernels"].items():
                        say(f"  {name}: {k['file']} ({'references __asan_init' if k['asan'] else 'NOT instrumented'})")
                elif tag == "TARGET":
                    results["targets"][obj["target"]] = obj
                    calls = ", ".join(f"{k} {v:,}" for k, v in sorted(obj["kernel_calls"].items())) or "none"
                    outs = ", ".join(f"{k} {v:,}" for k, v in sorted(obj["outcomes"].items(), key=lambda kv: -kv[1]))
                    say(
                        f"{obj['target']:>13}: {obj['seeds']} seeds + {obj['mutations']:,} mutations in {obj['seconds']} s; "
                        f"{outs}; kernel calls: {calls}"
                    )
                elif tag == "FINDING":
                    results["findings"].append(obj)
                    say(f"FINDING {obj['target']} ({obj['input']}): {obj['error']} at {obj['at']}")
                elif tag == "DONE":
                    results["done"] = True
                else:
                    say(f"child: {line.rstrip()}")

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        hang = None
        while proc.poll() is None:
            time.sleep(0.5)
            if os.path.exists(current) and time.time() - os.path.getmtime(current) > args.hang_seconds:
                hang = f"no progress for {args.hang_seconds} s: the input below hangs"
                proc.kill()
        proc.wait()
        thread.join(timeout=10)
        err.seek(0)
        stderr = err.read()
    elapsed = time.perf_counter() - t0
    results.update(
        seconds=round(elapsed, 1),
        returncode=proc.returncode,
        build=facts,
        build_dir=build_dir,
        seed=args.seed,
        iterations=iterations,
        asan_options=env["ASAN_OPTIONS"],
    )
    crashed = proc.returncode != 0 or not results.get("done")
    total = sum(t["seeds"] + t["mutations"] for t in results["targets"].values())
    status = 0
    if crashed:
        status = 1
        say(f"\nTHE CHILD DIED (exit status {proc.returncode}){': ' + hang if hang else ''}")
        report = asan_report(stderr)
        say(report)
        results["report"] = report
        if os.path.exists(current):
            with open(current, "rb") as f:
                raw = f.read()
            target, label, data = raw.split(b"\n", 2)
            target_s = target.decode()
            crash_dir = os.path.join(os.path.abspath(args.crash_dir or work), target_s)
            os.makedirs(crash_dir, exist_ok=True)
            saved = os.path.join(crash_dir, hashlib.sha256(data).hexdigest()[:16] + ".bin")
            with open(saved, "wb") as f:
                f.write(data)
            results["crash_input"] = {"target": target_s, "input": label.decode(), "file": saved, "hex": data[:512].hex()}
            say(f"\nthe input that was running: target {target_s}, {label.decode()}, {len(data)} bytes, saved as {saved}")
            say(f"  {data[:200].hex()}{'...' if len(data) > 200 else ''}")
            cext = f" --cext {args.cext}" if args.cext else ""
            say(
                f"replay it: python tools/asan_fuzz.py --corpus {os.path.dirname(crash_dir)} --targets {target_s} --iterations 0 "
                f"--opt {args.opt[2:]}{cext}"
            )
    if results["findings"]:
        status = 1
        if args.crash_dir:
            for n, f in enumerate(results["findings"]):
                d = os.path.join(os.path.abspath(args.crash_dir), f["target"])
                os.makedirs(d, exist_ok=True)
                with open(os.path.join(d, f"finding-{n}.bin"), "wb") as out:
                    out.write(bytes.fromhex(f["data"]))
    say(
        f"\n{total:,} inputs over {len(results['targets'])} completed targets in {elapsed:.1f} s under ASan "
        f"({time.perf_counter() - t_all:.1f} s with the build): {'1 ASan report/crash' if crashed else '0 ASan reports'}, "
        f"{len(results['findings'])} findings"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if status == 0:
        shutil.rmtree(work, ignore_errors=True)
    else:
        say(f"child's stderr and last input kept in {work}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=0, help="split this among the targets (mutations until each's share is used)")
    parser.add_argument("--iterations", type=int, default=None, help="mutations per target (default 2000 unless --seconds)")
    parser.add_argument("--seed", type=int, default=1, help="the mutations are a pure function of this, the target and their number")
    parser.add_argument("--targets", default=None, help="comma-separated (default: all)")
    parser.add_argument("--corpus", default=SEED_DIR, help="directory of <target>/*.bin inputs replayed and mutated")
    parser.add_argument(
        "--opt",
        default="1",
        type=lambda v: "-O" + v.removeprefix("-O"),
        help="optimisation level of the ASan build: 1 (the default) or 0 (builds 4x faster)",
    )
    parser.add_argument("--cext", default=None, help="build the kernels from this directory instead of cext/ (a scratch copy)")
    parser.add_argument("--crash-dir", default=None, help="save the crashing input and findings here (default: the run's temp dir)")
    parser.add_argument("--json", default=None, help="write the run's figures here")
    parser.add_argument("--hang-seconds", type=float, default=120, help="an input running longer than this is a finding")
    parser.add_argument("--selftest-overflow", action="store_true", help="read past a heap buffer first: the run must fail")
    parser.add_argument("--write-seeds", action="store_true", help="regenerate the committed corpus and exit")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the ASan kernels, print where, and exit")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--build", help=argparse.SUPPRESS)
    parser.add_argument("--current", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.targets = args.targets.split(",")
        return child(args)
    if args.write_seeds:
        counts = write_seeds(os.path.abspath(args.corpus))
        total = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(args.corpus) for f in fs if f.endswith(".bin"))
        print(f"wrote {sum(counts.values())} seeds ({total:,} bytes) to {args.corpus}: {counts}")
        return 0
    if args.build_only:
        problem = toolchain_problem()
        if problem:
            print(f"cannot build ASan kernels: {problem}")
            return 2
        build_dir, facts = build(args.opt, args.cext)
        print(build_dir, json.dumps(facts))
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
