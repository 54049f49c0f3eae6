"""Reliability: kills at named points, power loss, full disks and I/O errors, damaged and hostile
files, fuzzed decoders, format compatibility (docs/reliability.md's table; the random kill -9 test is in
tests/test_crash.py, readers and locks in tests/test_concurrency.py).

The oracle for the named-point tests is the scenario of tests/support/scenario.py: ten operations (every
kind of write: add_many, a three-run bulk load, text adds, deletes that tombstone run entries,
replacements across tiers, a redesign, partial and full compaction, file compaction), each a few write
transactions (or, for the file compaction, the steps of a file switch), with a
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
import time

import numpy as np
import pytest

import fpstore
from fpstore.errors import CorruptionError
from tests.support.oracle import FEED, CheckFailed
from tests.support.processes import Child, ForkServer
from tests.support.scenario import SCENARIO_OPS, check_model, layout, leftovers, model_after, model_steps, run_op

#: Minutes of kills, crash points and damaged files: the slow tier (docs/development.md).
pytestmark = pytest.mark.slow

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
        if SCENARIO_OPS[op] == "compact_file":
            # The file switch: copy, fsync copy and directory, rename over data.mdb, fsync the store
            # directory. No transaction commits (the logical compaction before it has nothing to do).
            assert census[op]["fsyncs"] == 3, census[op]
            for fpoint in ("before_fsync@1", "after_fsync@1", "after_fsync@2", "before_replace", "after_replace", "after_fsync@3"):
                cases.append((op, fpoint, 0))
            continue
        # Short operations at every commit (a merge's reserve, blob writes, switch and collection).
        picks = set(range(1, n + 1)) if n <= 6 else {1, 2, n}
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
            cases.append((op, f"after_reserve@{r}", census[op]["reserved_after"][r - 1]))
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
            raise AssertionError(
                f"{what}: expected the model after {steps} committed transaction(s) of {SCENARIO_OPS[op]}: {exc}"
            ) from None
        got = layout(store)
    nwrites = len(scenario["census"][op]["writes"])
    if SCENARIO_OPS[op] == "compact_file":
        assert got == scenario["layouts"][op], f"{what}: layout {got}, expected {scenario['layouts'][op]}"
    elif nwrites == 1:  # one transaction: the layout is exactly the old one or the new one
        want = scenario["layouts"][op + steps]
        assert got == want, f"{what}: layout {got}, expected {want} ({'new' if steps else 'old'} state)"
    with fpstore.open(path, merges="inline") as store:  # recovery: run the whole operation again
        assert not leftovers(store), f"{what}: the writer's open left what a dead merge wrote: {leftovers(store)}"
        run_op(store, op)
        try:
            check_model(store, model_after(op))
        except CheckFailed as exc:
            raise AssertionError(f"{what}: after running {SCENARIO_OPS[op]} again: {exc}") from None
        if SCENARIO_OPS[op].startswith("compact"):
            assert layout(store) == scenario["layouts"][op + 1], f"{what}: compaction again gives {layout(store)}"
    stale = [n for n in os.listdir(path) if n.startswith("compact-")]
    assert not stale, f"{what}: the writer's open left a dead compaction's copy behind: {stale}"


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


def _strace_kill(scenario, tmp_path, op: int, syscall: str, when: int, allowed: set[int] | None) -> str:
    """Run operation ``op`` under strace, SIGKILLed at the ``when``-th ``syscall``; check the store is
    in one of the ``allowed`` states (counts of committed transactions; None: any, and the whole
    operation when the syscall never came), then that a rerun completes it. Returns the outcome."""
    strace = _strace()
    op_name = SCENARIO_OPS[op]
    path = copy_store(os.path.join(scenario["root"], f"base{op}"), str(tmp_path / f"s-{op}-{syscall}-{when}"))
    # (not --seccomp-bpf: strace 6.1 then ignores the injection)
    prefix = (strace, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}", "-e", f"inject={syscall}:signal=KILL:when={when}")
    child = Child("crash-op", path, "--op", str(op), "--point", "census", prefix=prefix)
    try:
        rc = child.finish(timeout=120)
    finally:
        child.close()
    what = f"kill at {syscall} #{when} in {op_name}"
    nsteps = len(model_steps(op))
    if allowed is None:
        killed = rc in (-signal.SIGKILL, 128 + signal.SIGKILL)
        assert killed or rc == 0, f"{what}: exit {rc}: {child.lines}"
        allowed = set(range(nsteps + 1)) if killed else {nsteps}
    else:
        assert rc in (-signal.SIGKILL, 128 + signal.SIGKILL), f"{what}: not killed (exit {rc}): {child.lines}"
    one_write = len(scenario["census"][op]["writes"]) == 1
    with fpstore.open(path, readonly=True) as store:
        got = layout(store)
        for steps in sorted(allowed, reverse=True):
            if one_write and got != scenario["layouts"][op + steps]:
                err = f"layout {got}"  # a compaction's model is the same before and after: the layout tells
                continue
            try:
                check_model(store, model_after(op, steps))
                break
            except CheckFailed as exc:
                err = exc
        else:
            raise AssertionError(f"{what}: the store is in none of the allowed states {sorted(allowed)}: {err}")
    _check_after_kill(path, op, steps, scenario, what)
    shutil.rmtree(path)
    return "not reached" if rc == 0 else f"{steps} of {nsteps} committed"


@pytest.mark.parametrize("op_name,syscall,when,allowed", SYSCALL_POINTS, ids=[f"{o}-{s}{w}" for o, s, w, _ in SYSCALL_POINTS])
def test_kill_inside_commit_syscalls(scenario, tmp_path, op_name, syscall, when, allowed):
    """SIGKILL delivered by strace at a write, sync or meta-page syscall of a commit leaves the old state (or the new one once the meta page is written)."""
    _strace_kill(scenario, tmp_path, SCENARIO_OPS.index(op_name), syscall, when, allowed)


SYSCALL_RANDOM = int(os.environ.get("FPSTORE_SYSCALL_RANDOM", "4"))
_WRITE_SYSCALLS = ("writev", "pwrite64", "fdatasync", "fsync", "rename", "renameat", "renameat2")


def _syscall_census(scenario, tmp_path, op: int) -> dict[str, int]:
    """How many times operation ``op`` makes each write, sync and rename syscall (one strace run)."""
    strace = _strace()
    path = copy_store(os.path.join(scenario["root"], f"base{op}"), str(tmp_path / f"census{op}"))
    log = str(tmp_path / f"census{op}.log")
    child = Child(
        "crash-op",
        path,
        "--op",
        str(op),
        "--point",
        "census",
        prefix=(strace, "-f", "-qq", "-o", log, "-e", "trace=" + ",".join(_WRITE_SYSCALLS)),
    )
    try:
        assert child.finish(timeout=120) == 0, child.stderr()
    finally:
        child.close()
    shutil.rmtree(path)
    counts: dict[str, int] = {}
    with open(log) as f:
        for line in f:
            name = line.split(None, 1)[1].split("(", 1)[0] if " " in line else ""
            if name in _WRITE_SYSCALLS:
                counts[name] = counts.get(name, 0) + 1
    return counts


def test_kill_at_random_syscalls_of_every_operation(scenario, tmp_path):
    """SIGKILL by strace at a random write, sync or rename syscall of a random scenario operation leaves exactly the state after the transactions that committed."""
    _strace()
    rng = random.Random(int(os.environ.get("FPSTORE_SYSCALL_SEED", "9")))
    census: dict[int, dict[str, int]] = {}
    outcomes = []
    for _ in range(SYSCALL_RANDOM):
        op = rng.randrange(len(SCENARIO_OPS))
        if op not in census:
            census[op] = _syscall_census(scenario, tmp_path, op)
        counts = census[op]
        syscall = rng.choice(sorted(counts))
        when = rng.randint(1, counts[syscall])
        outcomes.append(
            (SCENARIO_OPS[op], f"{syscall} {when}/{counts[syscall]}", _strace_kill(scenario, tmp_path, op, syscall, when, None))
        )
    print(f"FIGURES random syscall kills: {len(outcomes)}: {outcomes}")
    assert all(o[2] != "not reached" for o in outcomes), outcomes


# -- power loss: an ext4 image on a loop device, copied while the writer is stopped ---------------

POWERLOSS_CYCLES = int(os.environ.get("FPSTORE_POWERLOSS_CYCLES", "30"))
POWERLOSS_PER_STORE = 40


def _run(*cmd: str, ok: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode not in ok:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr[-800:]}")
    return proc


@pytest.fixture
def ext4(tmp_path):
    """A function mounting a new (or given) ext4 image on a loop device; everything unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("power-loss emulation needs root (loop devices and mount)")
    for tool in ("mkfs.ext4", "e2fsck", "mount", "umount"):
        if shutil.which(tool) is None:
            pytest.skip(f"power-loss emulation needs {tool} (e2fsprogs, mount)")
    if not os.path.exists("/dev/loop-control"):
        pytest.skip("power-loss emulation needs loop devices (/dev/loop-control is missing)")
    mounted: list[str] = []

    def mount(image: str, where: str, *, new: bool = False) -> str:
        if new:
            with open(image, "wb") as f:
                f.truncate(96 << 20)
            _run("mkfs.ext4", "-q", "-F", image)
        os.makedirs(where, exist_ok=True)
        # noauto_da_alloc: ext4 then does not flush a file renamed over another by itself, so a
        # missing fsync before a rename shows up as a torn file instead of being papered over.
        proc = subprocess.run(["mount", "-o", "loop,noauto_da_alloc", image, where], capture_output=True, text=True)
        if proc.returncode != 0:
            if new and not mounted:
                pytest.skip(f"cannot mount an ext4 image on a loop device here: {proc.stderr.strip()}")
            raise AssertionError(f"mount {image} failed: {proc.stderr}")
        mounted.append(where)
        return where

    def umount(where: str) -> None:
        _run("umount", where)
        mounted.remove(where)

    mount.umount = umount  # type: ignore[attr-defined]
    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", where], capture_output=True)


def _wait_stopped(pid: int, timeout: float = 10.0) -> None:
    """Until the kernel reports ``pid`` stopped (a syscall in flight, an fsync say, completes first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                return
        time.sleep(0.001)
    raise AssertionError(f"writer {pid} did not stop within {timeout} s")


@pytest.mark.parametrize("durability", ["full", "process", "interval"])
def test_power_loss_keeps_every_acknowledged_batch(ext4, tmp_path, durability):
    """A crash-consistent copy of an ext4 image taken while the writer is stopped (power cut) fscks,
    mounts and holds every acknowledged batch, exactly; with ``durability="process"`` every one
    but possibly the last (its commit's meta page is written unsynced), and never a damaged store."""
    may_lose = 1 if durability == "process" else 0
    from tests.test_crash import verify_oracle

    seed = int(os.environ.get("FPSTORE_POWERLOSS_SEED", "5"))
    rng = random.Random(seed)
    image = str(tmp_path / "disk.img")
    live = ext4(image, str(tmp_path / "live"), new=True)
    snap_img, snap_dir = str(tmp_path / "snap.img"), str(tmp_path / "snap")
    # (A lost acknowledged batch fails the test at once, so the figures never need to count one.)
    figures = {"cycles": 0, "acked": 0, "in_flight_survived": 0, "last_ack_undone": 0, "fsck_journal_replays": 0, "recover_ms_max": 0.0}
    server = None
    path = ""
    store_no = -1
    t0 = time.perf_counter()
    try:
        for cycle in range(POWERLOSS_CYCLES):
            if cycle % POWERLOSS_PER_STORE == 0:  # a fresh store now and then: the image is 96 MiB
                if server is not None:
                    server.close()
                    shutil.rmtree(path)
                store_no += 1
                path = os.path.join(live, f"store{store_no}")
                fpstore.open(path, k=3).close()
                server = ForkServer(path)
                ckpt = None
            pid, resumed = server.start_feed(durability=durability)
            assert resumed == ckpt or (resumed is not None and ckpt is not None and resumed >= ckpt), (resumed, ckpt)
            time.sleep(rng.uniform(0.005, 0.200))
            os.kill(pid, signal.SIGSTOP)  # the power goes: nothing more reaches the disk from the writer
            _wait_stopped(pid)
            shutil.copyfile(image, snap_img)  # what the disk holds now (the host page cache of the image)
            os.kill(pid, signal.SIGKILL)
            rc, lines = server.reap()
            assert rc == -signal.SIGKILL, f"cycle {cycle}: writer exited {rc}: {lines[-3:]}"
            acks = [int(line.split()[1]) for line in lines if line.startswith("ack ")]
            acked = acks[-1] if acks else resumed
            figures["acked"] += len(acks)
            # Power back: fsck replays the journal, then the copy is mounted and opened.
            t1 = time.perf_counter()
            fsck = _run("e2fsck", "-fy", snap_img, ok=(0, 1))
            figures["fsck_journal_replays"] += fsck.returncode == 1
            ext4(snap_img, snap_dir)
            spath = os.path.join(snap_dir, f"store{store_no}")
            got = verify_oracle(spath, rng)  # count, tables and sampled keys agree with batches 0..got
            figures["recover_ms_max"] = max(figures["recover_ms_max"], round(1000 * (time.perf_counter() - t1), 1))
            problems = lmdb_problems(spath)
            ext4.umount(snap_dir)
            os.remove(snap_img)
            assert not problems, f"cycle {cycle}: LMDB verifier on the power-cut copy: {problems[:3]}"
            lo = -1 if acked is None else acked
            assert (got if got is not None else -1) >= lo - may_lose, (
                f"cycle {cycle}: batch {acked} was acknowledged, the power-cut copy has {got}"
            )
            assert (got if got is not None else -1) <= lo + 1, (
                f"cycle {cycle}: copy has {got}, beyond the one batch in flight after {acked}"
            )
            figures["in_flight_survived"] += (got if got is not None else -1) == lo + 1
            figures["last_ack_undone"] += (got if got is not None else -1) == lo - 1
            with fpstore.open(path, readonly=True) as s:  # the live store (process crash): the same rule
                ckpt = s.checkpoint(FEED)
            figures["cycles"] += 1
    finally:
        if server is not None:
            server.close()
    figures["seconds"] = round(time.perf_counter() - t0, 1)
    print(f"FIGURES power loss: {figures}")
    assert figures["acked"] >= POWERLOSS_CYCLES // 2, f"too few batches were acknowledged to prove anything: {figures}"


def test_power_loss_keeps_staged_adds_up_to_a_point_at_or_after_the_last_sync(ext4, tmp_path):
    """``durability="interval"``: an adder (one ``add()`` at a time, ``sync()`` every 25 adds) on an
    ext4 image loses power at random moments: the fscked copy holds exactly the adds up to some
    point at or after the last ``sync()`` (with the checkpoint at that point), and no later one."""
    from tests.support.oracle import check_interval_adds

    rng = random.Random(int(os.environ.get("FPSTORE_POWERLOSS_SEED", "5")))
    image = str(tmp_path / "disk.img")
    live = ext4(image, str(tmp_path / "live"), new=True)
    snap_img, snap_dir = str(tmp_path / "snap.img"), str(tmp_path / "snap")
    path = os.path.join(live, "store")
    fpstore.open(path, k=3).close()
    figures = {"cycles": 0, "acked": 0, "synced_last": 0, "undone": 0}
    for cycle in range(max(4, POWERLOSS_CYCLES // 4)):
        child = Child("interval-adder", path, "--interval", "0.05", "--sync-every", "25")
        try:
            first = child.line(timeout=120)
            assert first.startswith("ready"), first
            time.sleep(rng.uniform(0.05, 0.4))
            os.kill(child.pid, signal.SIGSTOP)  # the power goes
            _wait_stopped(child.pid)
            shutil.copyfile(image, snap_img)
        finally:
            child.kill()
            child.close()
        acks = [int(line.split()[1]) for line in child.lines if line.startswith("ack ")]
        syncs = [int(line.split()[1]) for line in child.lines if line.startswith("synced ")]
        _run("e2fsck", "-fy", snap_img, ok=(0, 1))
        ext4(snap_img, snap_dir)
        spath = os.path.join(snap_dir, "store")
        try:
            j = check_interval_adds(spath, acks, syncs, f"cycle {cycle}, the power-cut copy")
            problems = lmdb_problems(spath)
        finally:
            ext4.umount(snap_dir)
            os.remove(snap_img)
        assert not problems, f"cycle {cycle}: LMDB verifier on the power-cut copy: {problems[:3]}"
        if acks:
            figures["acked"] += len(acks)
            figures["undone"] += acks[-1] - j
        figures["synced_last"] += bool(syncs) and j == syncs[-1]
        figures["cycles"] += 1
    print(f"FIGURES power loss, staged adds: {figures}")
    assert figures["acked"] >= 100, f"too few adds were acknowledged to prove anything: {figures}"


# -- full disks and I/O errors ------------------------------------------------------------------------


def _fill_and_recover(path: str, *, stop: int, extra: tuple[str, ...] = (), prefix: tuple[str, ...] = (), free=None) -> dict:
    """Run fill-writer until its write fails; check the failed batch is absent (in a second process,
    while the writer still holds the store); free the space; let it feed on to ``stop``; check every
    batch. Returns what happened."""
    from tests.test_crash import verify_exact, verify_oracle

    child = Child("fill-writer", path, "--stop", str(stop), *extra, *(("--wait",) if free else ()), stdin=bool(free), prefix=prefix)
    try:
        ready = child.line(timeout=120)
        assert ready.startswith("ready"), ready
        while not (line := child.line(timeout=120)).startswith(("error", "no-error")):
            assert line.startswith("ack "), line
        assert line.startswith("error"), f"no write failed: {child.lines}"
        _, etype, failed, *msg = line.split(" ", 3)
        failed = int(failed)
        again = child.line(timeout=120)
        if free:
            assert child.line(timeout=120) == "waiting"
            # The failed batch is absent and the store is consistent, seen from another process.
            got = verify_oracle(path, random.Random(1))
            want = failed if again == "again ok" else (failed - 1 if failed else None)  # a retry may succeed
            assert got == want, f"batch {failed} failed ({etype}), then {again}, but the checkpoint is {got}"
            free()
            child.send("go")
        rc = child.finish(timeout=180)
        assert rc == 0, f"the writer did not recover ({rc}): {child.lines[-4:]} {child.stderr()}"
    finally:
        child.close()
    recovered = [x for x in child.lines if x.startswith(("same-store", "reopened"))]
    verify_exact(path, stop - 1)
    assert not lmdb_problems(path)
    return {"error": etype, "batch": failed, "again": again, "recovery": recovered[0] if recovered else None, "message": msg}


def test_full_tmpfs_raises_store_full_error_and_recovers(ext4, tmp_path):
    """On a full tmpfs a batch fails with StoreFullError and is absent; once the filesystem grows, the same writer carries on and loses nothing."""
    mnt = str(tmp_path / "small")
    os.makedirs(mnt)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", mnt], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        path = os.path.join(mnt, "store")
        fpstore.open(path, k=3).close()
        out = _fill_and_recover(path, stop=30, free=lambda: _run("mount", "-o", "remount,size=128m", mnt))
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    print(f"FIGURES full tmpfs: {out}")
    # LMDB reports the short write at a full filesystem as EIO; fpstore must still say StoreFullError.
    assert out["error"] == "StoreFullError", out
    assert out["again"] == "again StoreFullError", out


def test_full_ext4_raises_store_full_error_and_recovers(ext4, tmp_path):
    """On a full ext4 filesystem a batch fails with StoreFullError and is absent; once a ballast file is deleted, the same writer carries on and loses nothing."""
    mnt = ext4(str(tmp_path / "small.img"), str(tmp_path / "small"), new=True)
    path = os.path.join(mnt, "store")
    fpstore.open(path, k=3).close()
    st = os.statvfs(mnt)
    ballast = os.path.join(mnt, "ballast")
    with open(ballast, "wb") as f:  # leave ~3 MiB free
        os.posix_fallocate(f.fileno(), 0, max(0, st.f_bavail * st.f_frsize - (3 << 20)))
    out = _fill_and_recover(path, stop=150, free=lambda: os.remove(ballast))
    print(f"FIGURES full ext4: {out}")
    assert out["error"] == "StoreFullError", out


def test_file_size_limit_raises_store_full_error_and_recovers(tmp_path):
    """With RLIMIT_FSIZE reached (EFBIG) a batch fails with StoreFullError and is absent; once the limit is lifted the same writer carries on."""
    path = str(tmp_path / "store")
    fpstore.open(path, k=3).close()
    size = os.path.getsize(os.path.join(path, "data.mdb"))
    out = _fill_and_recover(path, stop=30, extra=("--fsize", str(size + (2 << 20))), free=lambda: None)
    print(f"FIGURES file size limit: {out}")
    # errors.py: StoreFullError is "the disk or the configured size limit is full". LMDB reports
    # the short write at the limit as EIO, which fpstore passes on as a plain StorageError.
    assert out["error"] == "StoreFullError", f"a file size limit (EFBIG) was reported as {out['error']}: {out['message']}"


#: Errors injected into LMDB's commit syscalls: (syscall, occurrence, errno, expected error class).
IO_ERRORS = [
    ("writev", 3, "ENOSPC", "StoreFullError"),
    ("writev", 3, "EIO", "StorageError"),
    ("fdatasync", 3, "EIO", "StorageError"),
    ("fdatasync", 3, "ENOSPC", "StoreFullError"),
    ("pwrite64", 2, "EIO", "StorageError"),
]


@pytest.mark.parametrize("syscall,when,err,want", IO_ERRORS, ids=[f"{s}{w}-{e}" for s, w, e, _ in IO_ERRORS])
def test_injected_io_errors_raise_typed_errors_and_lose_nothing(tmp_path, syscall, when, err, want):
    """An I/O error injected (strace) into a commit's writes, sync or meta page raises a typed StorageError, leaves the batch absent, and the writer recovers."""
    strace = _strace()
    path = str(tmp_path / "store")
    fpstore.open(path, k=3).close()
    prefix = (strace, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}", "-e", f"inject={syscall}:error={err}:when={when}")
    out = _fill_and_recover(path, stop=8, prefix=prefix, free=lambda: None)
    print(f"FIGURES injected {err} at {syscall} #{when}: {out}")
    assert out["error"] == want, out


# -- damaged and hostile files -------------------------------------------------------------------------

DAMAGE_CASES = int(os.environ.get("FPSTORE_DAMAGE_CASES", "120"))
#: Damage kinds drawn by the random test. Truncation and zeroed pages crash the process today; they
#: have exhaustive tests of their own below, so that this one keeps checking byte flips.
KINDS = os.environ.get("FPSTORE_DAMAGE_KINDS", "flip,flip_page").split(",")


def _damage_bytes(path: str, rng: random.Random) -> str:
    """Damage ``path``/data.mdb in place: flipped bytes, a zeroed page, a truncation or a torn tail."""
    data_path = os.path.join(path, "data.mdb")
    size = os.path.getsize(data_path)
    kind = rng.choice(KINDS)
    with open(data_path, "r+b") as f:
        if kind == "flip":
            for _ in range(rng.randint(1, 8)):
                pos = rng.randrange(size)
                f.seek(pos)
                b = f.read(1)
                f.seek(pos)
                f.write(bytes([b[0] ^ rng.randint(1, 255)]))
        elif kind == "flip_page":  # several flips inside one page beyond the two meta pages
            page = rng.randrange(2, size // 4096)
            for _ in range(rng.randint(1, 16)):
                pos = page * 4096 + rng.randrange(4096)
                f.seek(pos)
                b = f.read(1)
                f.seek(pos)
                f.write(bytes([b[0] ^ rng.randint(1, 255)]))
        elif kind == "zero_page":
            f.seek(rng.randrange(size // 4096) * 4096)
            f.write(bytes(4096))
        elif kind == "truncate":
            f.truncate(rng.randrange(size))
        else:
            f.truncate(rng.randrange(size // 4096) * 4096)
    return kind


def _garbage_value(path: str, rng: random.Random) -> str:
    """Replace one value (or add one bad key) in one of the store's sub-databases, through LMDB."""
    import lmdb
    import msgpack

    env = lmdb.open(path, subdir=True, lib_version=0, max_dbs=256, map_size=0)
    try:
        names = [bytes(k) for k, _ in env.begin().cursor()]
        name = rng.choice(names)
        db = env.open_db(name)
        with env.begin(write=True, db=db) as txn:
            stat = txn.stat(db)
            keys = [bytes(k) for k in txn.cursor().iternext(values=False)]
            key = rng.choice(keys) if keys else b"x"
            old = bytes(txn.get(key) or b"")
            choice = rng.choice(["random", "truncate", "flip", "empty", "msgpack", "bad_key", "delete"])
            if choice == "random":
                value = rng.randbytes(rng.choice([1, 7, 8, 16, 100, 5000]))
            elif choice == "truncate":
                value = old[: rng.randrange(len(old))] if old else b"\x00"
            elif choice == "flip" and old:
                pos = rng.randrange(len(old))
                value = old[:pos] + bytes([old[pos] ^ rng.randint(1, 255)]) + old[pos + 1 :]
            elif choice == "msgpack":
                value = msgpack.packb(rng.choice([None, 1 << 63, -1, "s", [1, 2], {"v": 2}, {"runs": 1}, b"\x00" * 9]))
            else:
                value = b""
            if choice == "bad_key":
                txn.put(rng.randbytes(rng.choice([1, 9, 15, 17, 30])), value or b"", db=db)
            elif choice == "delete" and keys:
                txn.delete(key)
            elif name in (b"meta", b"docs", b"keys", b"blobs") or stat["entries"] == 0:
                txn.put(key, value, db=db)
            else:  # index tables and sets: the damage is in the keys (their values are empty)
                txn.delete(key)
                txn.put(value[:500] or b"\x01", b"", db=db)
        return f"{choice} {name.decode(errors='replace')}:{key[:12]!r}"
    finally:
        env.close()


def _run_damage_cases(scenario: dict, tmp_path, cases: int, seed: int, make) -> dict:
    """``cases`` damaged copies of the scenario stores, each opened and used (reads, and writes on
    every third) in a forked child: an answer or an FpstoreError, never another exception, a hang
    or a signal."""
    rng = random.Random(seed)
    server = ForkServer(str(tmp_path))
    outcomes: dict[str, int] = {}
    failures: list[str] = []
    try:
        for n in range(cases):
            base = rng.choice([3, 7])
            path = copy_store(os.path.join(scenario["root"], f"base{base}"), str(tmp_path / f"d{n}"))
            what = make(path, rng)
            write = n % 3 == 0
            rc, lines = server.call("exercise", path, *(["--write"] if write else []), "--seconds", "30")
            if rc < 0:
                failures.append(
                    f"case {n} ({what}, base{base}, {'write' if write else 'read'}): killed by signal {-rc}"
                    f"{' (a hang: SIGALRM)' if -rc == signal.SIGALRM else ''}; last lines {lines[-2:]}"
                )
            elif rc != 0:
                failures.append(f"case {n} ({what}, base{base}): " + "; ".join(x for x in lines if x.startswith(("BUG", "FAIL")))[:600])
            else:
                result = json.loads(lines[-1])
                key = "opened" if result.get("open") == "ok" else f"refused ({result.get('open')})"
                outcomes[key] = outcomes.get(key, 0) + 1
                for name, res in result.items():
                    if res != "ok":
                        outcomes[res] = outcomes.get(res, 0) + 1
            shutil.rmtree(path)
    finally:
        server.close()
    return {"cases": cases, "failures": failures, "outcomes": outcomes}


def test_damaged_store_files_raise_typed_errors_or_answer(scenario, tmp_path):
    """Copies of a store with runs, segments and tombstones with random bytes flipped (anywhere, or many in one page) answer or raise FpstoreError: never another exception, a hang or a crash."""
    seed = int(os.environ.get("FPSTORE_DAMAGE_SEED", "11"))
    t0 = time.perf_counter()
    out = _run_damage_cases(scenario, tmp_path, DAMAGE_CASES, seed, _damage_bytes)
    print(
        f"FIGURES damaged files: {len(out['failures'])} failures in {out['cases']} cases, {time.perf_counter() - t0:.1f} s, outcomes {out['outcomes']}"
    )
    assert not out["failures"], f"{len(out['failures'])} of {out['cases']} damaged files broke the process:\n" + "\n".join(
        out["failures"][:12]
    )


def test_garbage_in_every_sub_database_raises_typed_errors_or_answers(scenario, tmp_path):
    """A garbage, truncated, flipped, empty or wrongly typed value (or a bad key) in any sub-database gives an answer or an FpstoreError, never another exception or a crash."""
    seed = int(os.environ.get("FPSTORE_DAMAGE_SEED", "11")) + 1
    t0 = time.perf_counter()
    out = _run_damage_cases(scenario, tmp_path, DAMAGE_CASES, seed, _garbage_value)
    print(
        f"FIGURES garbage values: {len(out['failures'])} failures in {out['cases']} cases, {time.perf_counter() - t0:.1f} s, outcomes {out['outcomes']}"
    )
    assert not out["failures"], f"{len(out['failures'])} of {out['cases']} damaged values broke the process:\n" + "\n".join(
        out["failures"][:12]
    )


def _each_page_case(scenario, tmp_path, base: int, damage, *options: str) -> list[str]:
    """For every page of the closed scenario store ``base``: damage a copy with ``damage(f, page,
    npages)``, open it and read everything in a forked child; the failures."""
    src = os.path.join(scenario["root"], f"base{base}")
    npages = os.path.getsize(os.path.join(src, "data.mdb")) // 4096
    server = ForkServer(str(tmp_path))
    failures: list[str] = []
    try:
        for page in range(npages):
            path = copy_store(src, str(tmp_path / f"p{page}"))
            with open(os.path.join(path, "data.mdb"), "r+b") as f:
                what = damage(f, page, npages)
            if what:
                rc, lines = server.call("exercise", path, "--seconds", "30", *options)
                if rc != 0:
                    why = (
                        f"signal {-rc} ({signal.Signals(-rc).name})" if rc < 0 else "; ".join(x for x in lines if x.startswith("BUG"))[:300]
                    )
                    failures.append(f"{what}: {why}")
            shutil.rmtree(path)
    finally:
        server.close()
    return failures


def test_truncated_store_file_is_refused_not_a_crash(scenario, tmp_path):
    """data.mdb cut at any page boundary (an interrupted copy) opens with an FpstoreError or answers: never SIGBUS."""

    def cut(f, page, npages):
        if page < 2:
            return None
        f.truncate(page * 4096)
        return f"data.mdb cut to {page} of {npages} pages"

    failures = _each_page_case(scenario, tmp_path, 7, cut)
    print(f"FIGURES truncation: {len(failures)} crashes")
    assert not failures, f"{len(failures)} truncated copies broke the process, e.g.:\n" + "\n".join(failures[:8])


def test_zeroed_page_is_reported_not_a_crash(scenario, tmp_path):
    """A store file with any one page zeroed (a lost disk block), opened with verify=True, answers or raises FpstoreError: never an LMDB assertion abort."""
    # Without verify=True LMDB trusts its pages: a zeroed B-tree page aborts the process in
    # mdb_cursor_next (7 of the 94 pages of this store); docs/reliability.md says so.

    def zero(f, page, npages):
        f.seek(page * 4096)
        f.write(bytes(4096))
        return f"page {page} of {npages} zeroed"

    failures = _each_page_case(scenario, tmp_path, 7, zero, "--verify")
    print(f"FIGURES zeroed pages: {len(failures)} crashes")
    assert not failures, f"{len(failures)} copies with a zeroed page broke the process, e.g.:\n" + "\n".join(failures[:8])


# -- format compatibility ------------------------------------------------------------------------------

GOLDEN = os.path.join(ROOT, "tests", "golden_stores")


def _golden_names() -> list[str]:
    return sorted(n for n in os.listdir(GOLDEN) if os.path.exists(os.path.join(GOLDEN, n, "reference.json")))


def _key(item: list) -> object:
    tag, value = item
    return value if tag in ("s", "i") else bytes.fromhex(value)


def _kj(key: object) -> list:
    return ["s", key] if isinstance(key, str) else ["i", key] if isinstance(key, int) else ["b", bytes(key).hex()]


@pytest.mark.parametrize("name", _golden_names())
def test_golden_store_answers_reference_queries(name, tmp_path):
    """A committed golden store (runs, segments, tombstones, texts, default pipeline) opens and answers its reference queries, and this build can write to it."""
    with open(os.path.join(GOLDEN, name, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)
    path = copy_store(os.path.join(GOLDEN, name), str(tmp_path / name))
    with fpstore.open(path, readonly=True) as store:
        assert store.header["format"] == ref["format"]
        assert store.pipeline.id == ref["pipeline_id"] and store.pipeline.config == ref["pipeline"]
        assert store.design.name == ref["design"] and store.k == ref["k"]
        assert len(store) == ref["count"]
        for cname, position in ref["checkpoints"].items():
            assert store.checkpoint(cname) == position
        documents = {_key(k): (fp, short) for k, fp, short in ref["documents"]}
        assert sorted(map(_kj, store)) == sorted(map(_kj, documents))
        for key, (fp, short) in documents.items():
            doc = store.get(key)
            assert doc is not None and doc.fingerprint == fp and doc.short == short, (key, doc)
        for q in ref["queries"]:
            got = sorted([_kj(m.key), m.distance] for m in store.query(fingerprint=q["fingerprint"], pipeline_id=store.pipeline.id))
            assert got == q["matches"], q["fingerprint"]
        for q in ref["text_queries"]:
            got = sorted([_kj(m.key), m.distance] for m in store.query(text=q["text"]))
            assert got == q["matches"], q["text"][:60]
        a, b, d = store.near_duplicate_pairs()
        keys = store.keys_of(np.concatenate([a, b]).tolist())
        got_pairs = sorted(sorted([_kj(x), _kj(y)]) + [int(z)] for x, y, z in zip(keys[: len(a)], keys[len(a) :], d))
        assert got_pairs == ref["pairs"]
    with fpstore.open(path) as store:  # this build writes the format it reads
        store.add_many(["new-doc"], fingerprints=[12345], pipeline_id=store.pipeline.id)
        assert [m.key for m in store.query(fingerprint=12345, pipeline_id=store.pipeline.id)] == ["new-doc"]
        assert len(store) == ref["count"] + 1


def _edit(path: str, db: bytes, key_filter, fn) -> int:
    """Rewrite values of sub-database ``db`` whose key passes ``key_filter`` with ``fn(value)``."""
    import lmdb

    env = lmdb.open(path, subdir=True, lib_version=0, max_dbs=256, map_size=0)
    try:
        handle = env.open_db(db)
        n = 0
        with env.begin(write=True, db=handle) as txn:
            for key, value in list(txn.cursor()):
                if key_filter(bytes(key)):
                    txn.put(bytes(key), fn(bytes(value)))
                    n += 1
        return n
    finally:
        env.close()


def test_newer_format_is_refused(tmp_path):
    """A store whose header names a newer format or an unknown required feature is refused on open (reading or writing); a newer run index version is refused on use."""
    import msgpack
    import zlib

    from fpstore.errors import FormatError
    from fpstore.store.header import FORMAT_VERSION

    src = os.path.join(GOLDEN, _golden_names()[-1])

    def header_edit(fn):
        def edit(raw: bytes) -> bytes:
            header = msgpack.unpackb(raw, raw=False)
            fn(header)
            return msgpack.packb(header, use_bin_type=True)

        return edit

    cases = {
        "newer format": header_edit(lambda h: h.update(format=FORMAT_VERSION + 1)),
        "unknown feature": header_edit(lambda h: h.update(features=h["features"] + ["fancy-runs-v9"])),
    }
    for what, edit in cases.items():
        path = copy_store(src, str(tmp_path / what.replace(" ", "-")))
        assert _edit(path, b"meta", lambda k: k == b"header", edit) == 1
        for readonly in (True, False):
            with pytest.raises(FormatError, match="upgrade fpstore"):
                fpstore.open(path, readonly=readonly, create=False)

    def newer_run_index(raw: bytes) -> bytes:
        body = raw[:4] + (2).to_bytes(2, "little") + raw[6:-4]
        return body + zlib.crc32(body).to_bytes(4, "little")

    path = copy_store(src, str(tmp_path / "run-index-v2"))
    assert _edit(path, b"blobs", lambda k: k.startswith(b"r") and k.endswith(b"I"), newer_run_index) > 0
    with fpstore.open(path, readonly=True) as store:
        with pytest.raises(FormatError, match="upgrade fpstore"):
            store.query(fingerprint=1, pipeline_id=store.pipeline.id)
        with pytest.raises(FormatError):
            store.near_duplicate_pairs()


def test_files_of_other_formats_are_refused(tmp_path):
    """A directory holding random bytes, an empty file, an LMDB file of the other bundled format, or a foreign LMDB environment is refused with an FpstoreError, in a child that must not crash."""
    import lmdb

    cases = {}
    p = tmp_path / "random"
    p.mkdir()
    (p / "data.mdb").write_bytes(random.Random(1).randbytes(64 << 10))
    cases["random bytes"] = p
    p = tmp_path / "empty"
    p.mkdir()
    (p / "data.mdb").write_bytes(b"")
    cases["empty data.mdb"] = p
    p = tmp_path / "text"
    p.mkdir()
    (p / "data.mdb").write_text("SQLite format 3\x00 not an lmdb file\n" * 200)
    cases["another file format"] = p
    env = lmdb.open(str(tmp_path / "lmdb1"), lib_version=1, max_dbs=4)
    with env.begin(write=True) as txn:
        txn.put(b"k", b"v")
    env.close()
    cases["LMDB 1.0 format"] = tmp_path / "lmdb1"
    env = lmdb.open(str(tmp_path / "foreign"), lib_version=0, max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(b"meta", b"not ours")
    env.open_db(b"docs")
    env.close()
    cases["foreign LMDB environment"] = tmp_path / "foreign"
    server = ForkServer(str(tmp_path))
    try:
        for what, path in cases.items():
            for write in (False, True):
                rc, lines = server.call("exercise", str(path), *(["--write"] if write else []))
                assert rc == 0, f"{what}: the child died ({rc}): {lines[-3:]}"
                opened = json.loads(lines[-1])["open"]
                # An empty data.mdb opened read-only gives StorageError (LMDB's EBADF), typed if not apt.
                assert opened in ("NotAStoreError", "FormatError", "CorruptionError", "StorageError"), f"{what}: open gave {opened}"
    finally:
        server.close()


# -- security ------------------------------------------------------------------------------------------


def test_store_directory_and_files_are_private(tmp_path):
    """A new store's directory is mode 0700 and its files 0600, whatever the umask."""
    old = os.umask(0o022)
    try:
        path = tmp_path / "store"
        fpstore.open(path, k=3).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
    for name in os.listdir(path):
        mode = stat.S_IMODE(os.stat(path / name).st_mode)
        assert mode & 0o077 == 0, f"{name} is mode {oct(mode)}"


def test_no_code_is_evaluated_from_store_files_or_input():
    """No module of fpstore imports pickle, marshal or shelve, or calls eval, exec or compile: nothing read from a store or a command line can run code."""
    import ast

    banned_modules = {"pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "jsonpickle"}
    banned_calls = {"eval", "exec", "compile", "__import__"}
    pkg = os.path.join(ROOT, "fpstore")
    found = []
    for name in sorted(os.listdir(pkg)):
        if not name.endswith(".py"):
            continue
        tree = ast.parse(open(os.path.join(pkg, name), encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [f"{name}: import {a.name}" for a in node.names if a.name.split(".")[0] in banned_modules]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in banned_modules:
                found.append(f"{name}: from {node.module} import ...")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in banned_calls:
                found.append(f"{name}:{node.lineno}: {node.func.id}()")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("unpackb", "Unpacker"):
                # msgpack must never be asked to build objects through hooks
                bad = [kw.arg for kw in node.keywords if kw.arg in ("object_hook", "object_pairs_hook", "ext_hook", "list_hook")]
                found += [f"{name}:{node.lineno}: msgpack {b}" for b in bad]
    assert not found, found


# -- fuzzed decoders ---------------------------------------------------------------------------------

#: Inputs per decoder; derandomized, so a run is reproducible (tools/torture.py fuzz runs for hours).
FUZZ_EXAMPLES = int(os.environ.get("FPSTORE_FUZZ_EXAMPLES", "1500"))


def test_fuzzed_decoders_raise_only_typed_errors():
    """Every decoder of on-disk bytes (run index, chunks, state, header, records, key blocks, idf, packed ids), fed mutated and random bytes in a child process, answers or raises FpstoreError."""
    child = Child("fuzz", "--examples", str(FUZZ_EXAMPLES))
    t0 = time.perf_counter()
    try:
        rc = child.finish(timeout=600)
    finally:
        child.close()
    assert rc == 0, f"the fuzzing process died ({rc}): {child.lines[-3:]} {child.stderr()}"
    findings = [line for line in child.lines if line.startswith("FINDING")]
    counts = json.loads(child.lines[-1])
    total = sum(sum(c.values()) for c in counts.values())
    print(f"FIGURES fuzz: {total} inputs in {time.perf_counter() - t0:.1f} s, {len(findings)} findings, {counts}")
    assert not findings, "\n".join(findings[:10])
    for target, c in counts.items():
        assert sum(c.values()) >= FUZZ_EXAMPLES // 2, f"{target} ran only {c}"
        assert c.get("ok", 0) and len(c) > 1, f"{target} saw only one outcome, so the fuzzer is not reaching it: {c}"


# -- what the oracle found -----------------------------------------------------------------------------


@pytest.mark.parametrize("per_chunk", [0, 10**9])  # the merge, and one probe per query (SMALL_BATCH_BASE)
def test_query_many_reports_each_match_once_when_a_run_holds_repeated_fingerprints(tmp_path, monkeypatch, per_chunk):
    """query_many returns each (query, document) pair once, also when a run holds two documents with the same fingerprint."""
    from fpstore.store import catalog

    monkeypatch.setattr(catalog, "SMALL_BATCH_BASE", per_chunk)
    monkeypatch.setattr(catalog, "SMALL_BATCH_PER_CHUNK", 0)
    with fpstore.open(tmp_path / "s", k=3) as store:
        pid = store.pipeline.id
        store.add_many(["x", "y", "z"], fingerprints=[5, 5, 0xFFFF_FFFF_0000_0000], pipeline_id=pid)
        before = sorted(zip(*(a.tolist() for a in store.query_many([5], pipeline_id=pid))))
        store.compact()  # both copies of 5 now live in one run
        after = sorted(zip(*(a.tolist() for a in store.query_many([5], pipeline_id=pid))))
        ids = sorted(store.get(k).id for k in ("x", "y"))
        assert before == [(0, ids[0], 0), (0, ids[1], 0)]
        assert after == before, f"after compaction query_many repeats rows: {after}"


#: A zstd frame whose header declares 466 TB of content (found by the fuzzer, target key_block).
HOSTILE_ZSTD = b"(\xb5/\xfd\xd4)\xc5\x00\x00\x80I\xa8\x01\x00\x02\x00\x03\x00\x04\x00\x00\xe5\x00\x00\x00\xbc\x04P\x02"


def _store_with_zstd_key_blocks(path: str) -> str:
    """The scenario's bulk load of integer keys in a store made before the integer key column
    (its header lacks ``int_key_column``), so its keys are zstd blocks, as such stores keep them."""
    import msgpack

    from tests.support.scenario import BULK_MAX_RUN, scenario_data

    fpstore.open(path, k=3).close()
    assert (
        _edit(
            path,
            b"meta",
            lambda k: k == b"header",
            lambda v: msgpack.packb(
                {**(h := msgpack.unpackb(v, raw=False)), "features": [f for f in h["features"] if f != "int_key_column"]}, use_bin_type=True
            ),
        )
        == 1
    )
    keys, fps = scenario_data()["b"]
    with fpstore.open(path) as store:
        store.bulk_load(keys, fps, pipeline_id=store.pipeline.id, max_run=BULK_MAX_RUN)
    return path


def test_key_block_declaring_a_huge_size_raises_corruption_error(tmp_path):
    """A key block whose zstd frame header declares a huge content size raises CorruptionError (the decompression bound holds), not MemoryError."""
    path = _store_with_zstd_key_blocks(str(tmp_path / "s"))
    assert _edit(path, b"blobs", lambda k: k.startswith(b"s") and b"kK" in k, lambda v: HOSTILE_ZSTD) > 0
    server = ForkServer(str(tmp_path))
    try:
        rc, lines = server.call("exercise", path)
    finally:
        server.close()
    assert rc in (0, 3), f"the child died ({rc}): {lines[-2:]}"
    outcome = json.loads(lines[-1])
    bugs = [line for line in lines if line.startswith("BUG")]
    assert outcome["get"] == "CorruptionError" and not bugs, bugs


#: The file switch of Store.compact_file, where a power cut may fall (the process is stopped there).
FILE_SWITCH_POINTS = ["before_fsync@1", "after_fsync@2", "before_replace", "after_replace", "after_fsync@3"]


def test_power_loss_during_file_compaction_leaves_old_or_new_file(ext4, scenario, tmp_path):
    """A power cut at each step of the file switch (copy, fsyncs, rename over data.mdb, directory fsync) leaves a store that fscks, opens and holds the same documents (the old file or the new one)."""
    op = SCENARIO_OPS.index("compact_file")
    image = str(tmp_path / "disk.img")
    live = ext4(image, str(tmp_path / "live"), new=True)
    snap_img, snap_dir = str(tmp_path / "snap.img"), str(tmp_path / "snap")
    sizes = {}
    for n, point in enumerate(FILE_SWITCH_POINTS):
        path = copy_store(os.path.join(scenario["root"], f"base{op}"), os.path.join(live, f"s{n}"))
        before = os.path.getsize(os.path.join(path, "data.mdb"))
        _run("sync", "-f", path)  # the store to compact is on the disk before the power cut
        child = Child("crash-op", path, "--op", str(op), "--point", f"stop:{point}")
        try:
            assert child.line(timeout=120).startswith("running")
            _wait_stopped(child.pid, timeout=120)
            # Another process fsyncs a file of its own: ext4 commits its journal, the rename in it,
            # but not the data of files nobody synced. Then the power goes.
            with open(os.path.join(live, "other.log"), "ab") as other:
                other.write(b"x")
                other.flush()
                os.fsync(other.fileno())
            shutil.copyfile(image, snap_img)
        finally:
            child.close()  # SIGKILL
        _run("e2fsck", "-fy", snap_img, ok=(0, 1))
        ext4(snap_img, snap_dir)
        try:
            spath = os.path.join(snap_dir, f"s{n}")
            size = os.path.getsize(os.path.join(spath, "data.mdb"))
            assert not lmdb_problems(spath), f"power cut at {point}: LMDB verifier"
            with fpstore.open(spath, readonly=True) as store:
                check_model(store, model_after(op))
            with fpstore.open(spath) as store:  # the writer's open clears a dead compaction's copy
                pass
            assert not [x for x in os.listdir(spath) if x.startswith("compact-")], os.listdir(spath)
            sizes[point] = "old" if size == before else f"new ({size} of {before} bytes)"
        finally:
            ext4.umount(snap_dir)
            os.remove(snap_img)
    print(f"FIGURES power cut during file compaction: {sizes}")


def test_overflow_page_with_damaged_flags_raises_typed_errors(scenario, tmp_path):
    """An overflow page (a run chunk, a key block) whose type flags are damaged, which LMDB reports as MDB_CORRUPTED, gives FpstoreError in every read and write: never another exception."""
    import struct

    def damage_flags(f, page, npages):
        if page < 2:
            return None
        f.seek(page * 4096 + 10)  # LMDB 0.9 page header: pgno (8 bytes), pad (2), flags (2)
        (flags,) = struct.unpack("<H", f.read(2))
        if flags != 0x04:  # P_OVERFLOW only: damaged B-tree pages can abort LMDB (see the zeroed-page test)
            return None
        f.seek(page * 4096 + 10)
        f.write(struct.pack("<H", 0x13))  # branch | leaf | leaf2: the byte a damaged disk gave (found by torture damage)
        return f"overflow page {page} of {npages} flagged 0x13"

    failures = _each_page_case(scenario, tmp_path, 7, damage_flags, "--write")
    print(f"FIGURES damaged overflow flags: {len(failures)} failures")
    assert not failures, f"{len(failures)} copies with a damaged overflow page broke the process, e.g.:\n" + "\n".join(failures[:8])


def _exercise(tmp_path, path: str, *options: str) -> dict:
    """Run the exercise worker on ``path`` in a forked child; fail on a crash or an untyped error."""
    server = ForkServer(str(tmp_path))
    try:
        rc, lines = server.call("exercise", path, *options)
    finally:
        server.close()
    assert rc >= 0, f"the child died with signal {-rc}: {lines[-2:]}"
    bugs = [line for line in lines if line.startswith("BUG")]
    assert rc == 0 and not bugs, "\n".join(bugs) or lines[-2:]
    return json.loads(lines[-1])


def test_incremental_table_keys_out_of_order_raise_corruption_error(scenario, tmp_path):
    """A damaged key in an incremental table (keys no longer in order on their page) makes query_many raise CorruptionError or answer, never a numpy ValueError."""
    from fpstore.index.design import Design
    from tests.support.scenario import scenario_data

    op = SCENARIO_OPS.index("add_many_c")  # base3: add_many_a's documents are in the incremental tables
    path = copy_store(os.path.join(scenario["root"], f"base{op}"), str(tmp_path / "s"))
    with fpstore.open(path, readonly=True) as store:
        design: Design = store.design
    data_path = os.path.join(path, "data.mdb")
    raw = bytearray(open(data_path, "rb").read())
    fps = scenario_data()["a"][1]
    for fp in fps[5:15].tolist():  # keys of table 1 that the exercise's queries reach
        at = raw.find(design.permute_one(fp, 1).to_bytes(8, "big"))
        assert at > 0
        raw[at] ^= 0x71  # the top byte: the key now sorts far from its neighbours
    open(data_path, "wb").write(bytes(raw))
    outcome = _exercise(tmp_path, path)
    assert outcome["query_many"] in ("ok", "CorruptionError"), outcome


def test_document_id_beyond_int64_in_a_run_raises_corruption_error(scenario, tmp_path):
    """A run's id column whose stored minimum is damaged (ids past 2**63) makes clusters and the key lookups raise CorruptionError or answer, never struct.error."""
    import msgpack

    path = copy_store(os.path.join(scenario["root"], f"base{len(SCENARIO_OPS)}"), str(tmp_path / "s"))

    def damage_state(raw: bytes) -> bytes:
        state = msgpack.unpackb(raw, raw=False)
        packed = [r for r in state["runs"] if "prefix" in r["ids"]]
        assert packed, "the scenario's full compaction makes a run with a packed id column"
        packed[0]["ids"]["min"] = (1 << 63) + 7
        state.pop("crc")  # forged as a record written before the CRC, so the checks behind it are reached
        return msgpack.packb(state, use_bin_type=True)

    assert _edit(path, b"meta", lambda k: k == b"state", damage_state) == 1
    outcome = _exercise(tmp_path, path)
    assert outcome["clusters"] in ("ok", "CorruptionError"), outcome


def test_damaged_document_count_raises_corruption_error(scenario, tmp_path):
    """A document count damaged to a huge value (found by the long garbled-values run) makes len() and list(store) raise CorruptionError or answer, never MemoryError."""
    path = copy_store(os.path.join(scenario["root"], f"base{len(SCENARIO_OPS)}"), str(tmp_path / "s"))
    # list(store) asks len() for a size hint first: a count past the ids ever given out is damage.
    assert _edit(path, b"meta", lambda k: k == b"count", lambda v: (1 << 62).to_bytes(8, "big")) == 1
    outcome = _exercise(tmp_path, path)
    assert outcome["iter"] in ("ok", "CorruptionError") and outcome["len"] in ("ok", "CorruptionError"), outcome
