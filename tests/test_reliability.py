"""Reliability: kills at named points, power loss, full disks and I/O errors, damaged and hostile
files, fuzzed decoders, format compatibility (RELIABILITY.md's table; the random kill -9 test is in
tests/test_crash.py, readers and locks in tests/test_concurrency.py).

The oracle for the named-point tests is the scenario of tests/workers.py: seven operations (every
kind of write: add_many, a three-run bulk load, text adds, deletes that tombstone run entries,
replacements across tiers, partial and full compaction), each a few write transactions, with a
model (key -> fingerprint, checkpoint) after every transaction. After a kill the store must equal
the model after exactly the transactions that committed, answer every query and
``near_duplicate_pairs`` as brute force over that model does, pass LMDB's structural verifier, and
reach the model of the whole operation when the operation is run again.

Long versions: ``python tools/torture.py {kill,points,powerloss,damage,fuzz}``.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

import fpstore
from fpstore.errors import FpstoreError
from tests.workers import (
    FEED,
    SCENARIO_K,
    SCENARIO_OPS,
    CheckFailed,
    Child,
    ForkServer,
    check_model,
    layout,
    model_after,
    run_op,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POINT_ROUNDS = int(os.environ.get("FPSTORE_POINT_ROUNDS", "1"))


def lmdb_problems(path: str) -> list[str]:
    from lmdb import verify

    return verify.verify(path, subdir=True)


def copy_store(src: str, dst: str) -> str:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lock.mdb", "writer.lock"))
    return dst


# -- the scenario, built once per session -----------------------------------------------------------


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    """Closed copies of the scenario store before each operation (base0..base7) and each
    operation's census: mutations per write transaction, map reservations."""
    root = str(tmp_path_factory.mktemp("scenario"))
    child = Child("build-scenario", root)
    try:
        rc = child.finish(timeout=300)
        assert rc == 0, child.stderr()
    finally:
        child.close()
    census = {c["op"]: c for c in map(json.loads, child.lines)}
    layouts = []
    for op in range(len(SCENARIO_OPS) + 1):
        with fpstore.open(copy_store(os.path.join(root, f"base{op}"), os.path.join(root, f"probe{op}")), readonly=True) as s:
            layouts.append(layout(s))
    return {"root": root, "census": census, "layouts": layouts}


def _points(census: dict, rng: random.Random, rounds: int) -> list[tuple[int, str, int]]:
    """(op, point, committed write transactions expected after the kill)."""
    cases: list[tuple[int, str, int]] = []
    for op in range(len(SCENARIO_OPS)):
        writes = census[op]["writes"]
        n = len(writes)
        picks = {1, n} | ({2} if n > 2 else set())
        if SCENARIO_OPS[op] == "texts_deletes":
            picks |= {4, 5, 8}  # last text, first delete (incremental), a delete that tombstones a run entry
        for w in sorted(picks):
            cases.append((op, f"before_commit@{w}", w - 1))
            cases.append((op, f"after_commit@{w}", w))
        for w in sorted({1, n}):
            m = writes[w - 1]
            for at in sorted({1, max(1, m // 2), m}):
                cases.append((op, f"put@{w}.{at}", w - 1))
        for r in range(1, census[op]["reserves"] + 1):
            cases.append((op, f"after_reserve@{r}", r - 1))
        for _ in range(rounds - 1):  # longer runs: random mutations of random transactions
            w = rng.randint(1, n)
            cases.append((op, f"put@{w}.{rng.randint(1, max(1, writes[w - 1]))}", w - 1))
    return cases


def _check_after_kill(path: str, op: int, steps: int, scenario: dict, what: str) -> None:
    """The store holds exactly the model after ``steps`` transactions of ``op``; for compaction,
    the layout is the old one or the new one; LMDB's verifier finds nothing; running the operation
    again reaches the operation's full model."""
    problems = lmdb_problems(path)
    assert not problems, f"{what}: LMDB verifier: {problems[:3]}"
    with fpstore.open(path, readonly=True) as store:
        try:
            check_model(store, model_after(op, steps))
        except CheckFailed as exc:
            raise AssertionError(f"{what}: expected the model after {steps} committed transaction(s) of {SCENARIO_OPS[op]}: {exc}") from None
        got = layout(store)
    nwrites = len(scenario["census"][op]["writes"])
    if nwrites == 1:  # one transaction: the layout is exactly the old one or the new one
        want = scenario["layouts"][op + steps]
        assert got == want, f"{what}: layout {got}, expected {want} ({'new' if steps else 'old'} state)"
    with fpstore.open(path) as store:  # recovery: run the whole operation again
        run_op(store, op)
        try:
            check_model(store, model_after(op))
        except CheckFailed as exc:
            raise AssertionError(f"{what}: after running {SCENARIO_OPS[op]} again: {exc}") from None
        if SCENARIO_OPS[op].startswith("compact"):
            assert layout(store) == scenario["layouts"][op + 1], f"{what}: compaction again gives {layout(store)}"


def test_kill_at_named_points_leaves_old_or_new_state(scenario, tmp_path):
    """SIGKILL at named points of every write (before/after each commit, at puts, after map reservations) leaves exactly the committed transactions' state, which a rerun completes."""
    rng = random.Random(int(os.environ.get("FPSTORE_POINT_SEED", "3")))
    cases = _points(scenario["census"], rng, POINT_ROUNDS)
    server = ForkServer(str(tmp_path))
    t0 = time.perf_counter()
    try:
        for n, (op, point, steps) in enumerate(cases):
            path = copy_store(os.path.join(scenario["root"], f"base{op}"), str(tmp_path / f"case{n}"))
            rc, lines = server.call("crash-op", path, "--op", str(op), "--point", point)
            what = f"kill at {point} in {SCENARIO_OPS[op]}"
            assert rc == -signal.SIGKILL, f"{what}: the point was not reached (exit {rc}): {lines[-2:]}"
            _check_after_kill(path, op, steps, scenario, what)
            shutil.rmtree(path)
    finally:
        server.close()
    ops = sorted({SCENARIO_OPS[op] for op, _, _ in cases})
    print(f"FIGURES named points: {len(cases)} kills over {ops} in {time.perf_counter() - t0:.1f} s")
    assert len(cases) >= 50


def _strace() -> str:
    path = shutil.which("strace")
    if path is None:
        pytest.skip("strace is not installed (apt-get install strace): syscall-level kill and error injection need it")
    probe = subprocess.run([path, "-f", "-qq", "-o", "/dev/null", "-e", "trace=none", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"strace cannot trace here (no ptrace permission?): {probe.stderr.decode()[-200:]}")
    return path


#: Kills inside LMDB's commit: (operation, syscall, occurrence, committed transactions allowed after).
#: A commit writes its pages (writev/pwrite64), fdatasyncs them, then writes the meta page (pwrite64
#: on a descriptor opened O_DSYNC): a kill before the meta page leaves the old state.
SYSCALL_POINTS = [
    ("add_many_c", "writev", 1, {0}),
    ("add_many_c", "fdatasync", 1, {0}),
    ("add_many_c", "pwrite64", 1, {0, 1}),
    ("bulk_load_b", "fdatasync", 2, {1}),
    ("compact_full", "writev", 1, {0}),
    ("compact_full", "fdatasync", 1, {0}),
    ("compact_full", "pwrite64", 1, {0, 1}),
]


@pytest.mark.parametrize("op_name,syscall,when,allowed", SYSCALL_POINTS, ids=[f"{o}-{s}{w}" for o, s, w, _ in SYSCALL_POINTS])
def test_kill_inside_commit_syscalls(scenario, tmp_path, op_name, syscall, when, allowed):
    """SIGKILL delivered by strace at a write, sync or meta-page syscall of a commit leaves the old state (or the new one once the meta page is written)."""
    strace = _strace()
    op = SCENARIO_OPS.index(op_name)
    path = copy_store(os.path.join(scenario["root"], f"base{op}"), str(tmp_path / "s"))
    # (not --seccomp-bpf: strace 6.1 then ignores the injection)
    prefix = (strace, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
              "-e", f"inject={syscall}:signal=KILL:when={when}")
    child = Child("crash-op", path, "--op", str(op), "--point", "census", prefix=prefix)
    try:
        rc = child.finish(timeout=120)
    finally:
        child.close()
    what = f"kill at {syscall} #{when} in {op_name}"
    assert rc in (-signal.SIGKILL, 128 + signal.SIGKILL), f"{what}: not killed (exit {rc}): {child.lines}"
    with fpstore.open(path, readonly=True) as store:
        for steps in sorted(allowed):
            try:
                check_model(store, model_after(op, steps))
                break
            except CheckFailed as exc:
                err = exc
        else:
            raise AssertionError(f"{what}: the store is in none of the allowed states {sorted(allowed)}: {err}")
    _check_after_kill(path, op, steps, scenario, what)
