"""AddressSanitizer runs of the compiled kernels (tools/asan_fuzz.py): an ASan build of the three
kernels, outside the tree, driven by the fuzz targets over the committed seed corpus
(tests/data/fuzz_seeds/) and seeded mutations of it.

The build is cached by the hash of its C sources and flags (``$TMPDIR/fpstore-asan-build``), and
made at ``-O0`` here: about 12 s cold on 2 cores against about 45 s at ``-O1``, with every memory
access instrumented all the same. Long runs: ``python tools/asan_fuzz.py --seconds 300``.
Skipped, saying why, only where there is no C compiler or no ASan runtime.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tools import asan_fuzz

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tools", "asan_fuzz.py")
#: Mutations per target (13 targets); the run is a pure function of this and the seed.
ITERATIONS = int(os.environ.get("FPSTORE_ASAN_ITERATIONS", "250"))
SEED = int(os.environ.get("FPSTORE_ASAN_SEED", "1"))


@pytest.fixture(scope="module")
def toolchain():
    problem = asan_fuzz.toolchain_problem()
    if problem:
        pytest.skip(f"no AddressSanitizer build possible here: {problem}")


def run_script(tmp_path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """The script at -O0; its temporary files (kept after a failure) go under ``tmp_path``, the
    build cache stays where it was."""
    env = dict(os.environ, TMPDIR=str(tmp_path), FPSTORE_ASAN_BUILD=asan_fuzz.CACHE_ROOT)
    return subprocess.run([sys.executable, SCRIPT, "--opt", "0", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_asan_kernels_survive_the_seed_corpus_and_its_mutations(toolchain, tmp_path):
    """The ASan-built kernels, loaded in place of the package's, replay every committed seed and run seeded mutations of each target without an ASan report, a crash or an untyped exception."""
    t0 = time.perf_counter()
    proc = run_script(
        tmp_path,
        "--iterations",
        str(ITERATIONS),
        "--seed",
        str(SEED),
        "--json",
        str(tmp_path / "run.json"),
        "--crash-dir",
        str(tmp_path / "crashes"),
    )
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-12000:]}\n{proc.stderr[-4000:]}"
    run = json.loads((tmp_path / "run.json").read_text())
    kernels = run["kernels"]
    assert kernels["backend"] == "cython"
    assert sorted(kernels["kernels"]) == [
        "fpstore._html_c",
        "fpstore._jpeg_c",
        "fpstore._runs_c",
        "fpstore._search_c",
        "fpstore._simhash_c",
    ]
    for name, k in kernels["kernels"].items():
        assert k["asan"] and os.path.dirname(k["file"]) == run["build_dir"], (name, k)
        assert not k["file"].startswith(os.path.join(ROOT, "fpstore")), f"{name} is the in-tree kernel"
    assert set(run["targets"]) == set(asan_fuzz.all_targets())
    corpus = asan_fuzz.read_corpus(asan_fuzz.SEED_DIR, asan_fuzz.all_targets())
    for target, t in run["targets"].items():
        assert t["seeds"] == len(corpus[target]) > 0, (target, t)
        assert t["mutations"] == ITERATIONS, (target, t)
        assert t["outcomes"].get("ok", 0) > 0, f"{target} never answered: the target is not reached ({t['outcomes']})"
    called = {c for t in run["targets"].values() for c in t["kernel_calls"]}
    for kernel in (
        "_runs_c.decode_blocks",
        "_runs_c.index_check",
        "_runs_c.probe_chunk",
        "_runs_c.probe_tables",
        "_runs_c.encode_chunk",
        "_search_c.unpack_bits",
        "_search_c.self_join",
        "_search_c.prefix_join",
        "_search_c.radix_sort",
        "_simhash_c.fingerprint",
        "_simhash_c.fingerprint_batch",
        "_simhash_c.nfkc",
        "_jpeg_c.decode_scan",
        "_jpeg_c.huffman_table",
        "_jpeg_c.next_marker",
    ):
        assert kernel in called, f"no target reached {kernel}"
    total = sum(t["seeds"] + t["mutations"] for t in run["targets"].values())
    build = "cached" if run["build"]["cached"] else f"built in {run['build']['build_seconds']} s"
    print(
        f"FIGURES asan: {total} inputs over {len(run['targets'])} targets in {run['seconds']} s under ASan, "
        f"{elapsed:.1f} s in all (kernels {build}), 0 reports"
    )


def test_an_asan_report_fails_the_run(toolchain, tmp_path):
    """A heap overflow in the child (a ctypes read past a buffer, under the same runtime and options) aborts it, and the script exits 1 with AddressSanitizer's report: a finding cannot pass silently."""
    proc = run_script(tmp_path, "--selftest-overflow", "--iterations", "0", "--targets", "packed")
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout[-6000:]}"
    assert "ERROR: AddressSanitizer: heap-buffer-overflow" in proc.stdout, proc.stdout[-6000:]
    assert "THE CHILD DIED" in proc.stdout


def test_committed_corpus_is_small_and_covers_every_target():
    """tests/data/fuzz_seeds holds inputs for every target, a few hundred KB at most."""
    corpus = asan_fuzz.read_corpus(asan_fuzz.SEED_DIR, asan_fuzz.all_targets())
    assert all(corpus[t] for t in asan_fuzz.all_targets()), {t: len(v) for t, v in corpus.items()}
    assert sum(len(d) for v in corpus.values() for _, d in v) < 300_000


def test_mutations_are_a_pure_function_of_seed_target_and_number():
    """The same (seed, target, number) gives the same input, so a run can be replayed exactly."""
    seeds = [d for _, d in asan_fuzz.read_corpus(asan_fuzz.SEED_DIR, ["run_chunk"])["run_chunk"]]
    first = [asan_fuzz.mutate(7, "run_chunk", i, seeds) for i in range(200)]
    assert first == [asan_fuzz.mutate(7, "run_chunk", i, seeds) for i in range(200)]
    assert first != [asan_fuzz.mutate(8, "run_chunk", i, seeds) for i in range(200)]
    assert len(set(first)) > 150
