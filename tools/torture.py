"""Long versions of the reliability tests (the CI versions are in tests/). Run them niced.

    python tools/torture.py kill --cycles 2000 [--seed 1] [--per-store 250] [--dir DIR]
    python tools/torture.py fuzz --seconds 1800 [--targets run_index,...] [--dir DIR]
    python tools/torture.py snapshot --seconds 3600 [--batches 150] [--readers 4]
    python tools/torture.py powerloss --cycles 100
    python tools/torture.py points --rounds 5
    python tools/torture.py damage --cases 5000
    python tools/torture.py syscalls --cases 300

``kill``: SIGKILL a feed writer at random points, ``--per-store`` cycles on each fresh store, then
resume it once to the end and check every document (tests/test_crash.py has the checks).
``fuzz``: coverage-guided fuzzing (atheris, when installed; hypothesis otherwise) of every decoder
of on-disk bytes (tests/support/fuzz.py ``FUZZ_TARGETS``), the time split evenly between the targets.
Any exception other than an FpstoreError, a broken decoder promise, or a crash is a finding.
``snapshot``: rounds of a writer committing ``--batches`` batches while reader processes check, in
every snapshot, that all tables agree with the count and checkpoint (tests/test_concurrency.py).
``powerloss``, ``points``, ``damage`` and ``syscalls`` repeat the power-loss, named crash point,
damaged-file (byte damage and garbled values) and strace kill tests of tests/test_reliability.py
with more cycles and other seeds.

Each prints one line of figures per store, target or round and a ``SUMMARY`` line (JSON) at the end;
exits 1 on the first failure (the failure's message is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

if __name__ == "__main__" and sys.argv[1:2] == ["fuzz-target"]:
    # Atheris instruments only modules imported after it starts: import nothing of fpstore before.
    import atheris

    with atheris.instrument_imports(include=["fpstore", "tests"]):
        import fpstore.fingerprint.pipeline  # noqa: F401
        import fpstore.index.runs  # noqa: F401
        import fpstore.store.store  # noqa: F401
        import fpstore.index.tiers  # noqa: F401
        import tests.support.fuzz  # noqa: F401, E402

import fpstore  # noqa: E402
from tests.test_concurrency import _feed, _run_writer_with_readers  # noqa: E402
from tests.test_crash import MAX_DELAY, MIN_DELAY, finish_feed, run_kill_cycles, verify_exact  # noqa: E402
from tests.support.fuzz import FUZZ_TARGETS  # noqa: E402
from tests.support.oracle import check_snapshot, snapshot  # noqa: E402


def summary(**figures: object) -> None:
    print("SUMMARY " + json.dumps(figures), flush=True)


def kill(args: argparse.Namespace, root: str) -> None:
    done, n = 0, 0
    totals: dict[str, float] = {}
    recovery_max = 0.0
    t0 = time.perf_counter()
    while done < args.cycles:
        cycles = min(args.per_store, args.cycles - done)
        path = os.path.join(root, f"kill{n}")
        fpstore.open(path, k=3).close()
        stats = run_kill_cycles(path, cycles, args.seed + n, log=lambda *_: None, min_delay=args.min_delay, max_delay=args.max_delay)
        last = finish_feed(path, stats["checkpoint"], extra=3)
        verify_exact(path, last)
        print(f"store {n}: {stats}", flush=True)
        recovery_max = max(recovery_max, stats["recovery_max_ms"])
        for key, value in stats.items():
            if isinstance(value, (int, float)) and key not in ("checkpoint", "per_cycle_ms", "spawn_to_ready_ms", "verify_ms", "recovery_max_ms"):
                totals[key] = totals.get(key, 0) + value
        shutil.rmtree(path)
        done += cycles
        n += 1
    elapsed = time.perf_counter() - t0
    summary(
        test="kill",
        cycles=int(totals.get("cycles", 0)),
        kills=int(totals.get("kills", 0)),
        stores=n,
        acknowledged_batches=int(totals.get("acked", 0)),
        acknowledged_batches_lost=0,  # any loss fails run_kill_cycles before this line
        corruptions=0,  # LMDB verifier and the oracle passed on every store
        lmdb_verifier_runs=int(totals.get("lmdb_verified", 0)),
        where={k: int(totals.get(k, 0)) for k in ("before_first_batch", "inside_add_many", "after_commit_before_ack", "between_batches")},
        recovery_max_ms=recovery_max,
        seconds=round(elapsed),
        ms_per_cycle=round(1000 * elapsed / max(args.cycles, 1)),
    )


# -- fuzzing ---------------------------------------------------------------------------------------


def _atheris_target(args: argparse.Namespace) -> None:
    """One target under atheris (this process never returns: libFuzzer exits)."""
    import atheris

    from tests.support.fuzz import fuzz_one

    findings_path = args.findings
    seen: set[str] = set()

    def one(data: bytes) -> None:
        try:
            fuzz_one(args.target, data)
        except Exception as exc:  # noqa: BLE001 - a finding: record it (once per place) and go on
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            key = f"{type(exc).__name__} {where.filename}:{where.lineno}"
            if key not in seen:
                seen.add(key)
                with open(findings_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"target": args.target, "where": key, "error": str(exc)[:300], "input": data[:200].hex()}) + "\n")

    argv = [sys.argv[0], f"-max_total_time={int(args.seconds)}", "-timeout=30", "-rss_limit_mb=3072", "-print_final_stats=1",
            f"-artifact_prefix={args.artifacts}/", args.corpus]
    atheris.Setup(argv, one)
    atheris.Fuzz()


def fuzz(args: argparse.Namespace, root: str) -> None:
    targets = args.targets.split(",") if args.targets else list(FUZZ_TARGETS)
    try:
        import atheris  # noqa: F401 - only whether it is installed

        engine = "atheris"
    except ImportError:
        engine = "hypothesis"
    per = args.seconds / len(targets)
    findings = os.path.join(root, "findings.jsonl")
    totals = {"engine": engine, "seconds": 0.0, "executions": 0, "crashes": 0, "targets": {}}
    t_all = time.perf_counter()
    for target in targets:
        t0 = time.perf_counter()
        if engine == "atheris":
            corpus = os.path.join(root, "corpus", target)
            artifacts = os.path.join(root, "artifacts", target)
            os.makedirs(corpus, exist_ok=True)
            os.makedirs(artifacts, exist_ok=True)
            from tests.support.fuzz import fuzz_seeds

            for i, seed in enumerate(fuzz_seeds()[target]):
                with open(os.path.join(corpus, f"seed{i}"), "wb") as f:
                    f.write(seed)
            runs_done, crashes = 0, 0
            # libFuzzer stops at a crash (a signal: the interpreter died); start it again until the
            # target's time is used, keeping the corpus, and count the crash.
            while (left := per - (time.perf_counter() - t0)) > 5:
                proc = subprocess.run(
                    [sys.executable, os.path.abspath(__file__), "fuzz-target", target, "--seconds", str(int(left)),
                     "--corpus", corpus, "--artifacts", artifacts, "--findings", findings],
                    cwd=ROOT, capture_output=True, text=True,
                )
                m = re.search(r"Done (\d+) runs", proc.stderr) or re.search(r"stat::number_of_executed_units:\s*(\d+)", proc.stderr)
                runs_done += int(m.group(1)) if m else 0
                if proc.returncode != 0:
                    crashes += 1
                    tail = "\n".join(proc.stderr.splitlines()[-15:])
                    print(f"  {target}: fuzzer exited {proc.returncode}:\n{tail}", flush=True)
                    if crashes >= 5:
                        break
            outcome = {"executions": runs_done, "crashes": crashes, "corpus": len(os.listdir(corpus))}
        else:
            proc = subprocess.run([sys.executable, "-m", "tests.workers", "fuzz", "--seconds", str(per), "--targets", target],
                                  cwd=ROOT, capture_output=True, text=True)
            counts = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
            for line in proc.stdout.splitlines():
                if line.startswith("FINDING"):
                    with open(findings, "a", encoding="utf-8") as f:
                        f.write(json.dumps({"target": target, "where": line}) + "\n")
            execs = sum(counts.get(target, {}).values())
            outcome = {"executions": execs, "crashes": 0 if proc.returncode == 0 else 1, "outcomes": counts.get(target)}
        outcome["seconds"] = round(time.perf_counter() - t0)
        print(f"fuzz {target}: {outcome}", flush=True)
        totals["targets"][target] = outcome
        totals["executions"] += outcome["executions"]
        totals["crashes"] += outcome["crashes"]
    totals["seconds"] = round(time.perf_counter() - t_all)
    found = []
    if os.path.exists(findings):
        with open(findings, encoding="utf-8") as f:
            found = [json.loads(line) for line in f]
    for item in found:
        print(f"FINDING {item}", flush=True)
    totals["findings"] = len(found)
    summary(test="fuzz", **totals)
    if found or totals["crashes"]:
        raise AssertionError(f"{len(found)} findings and {totals['crashes']} crashes")


# -- soaks ------------------------------------------------------------------------------------------


def snapshots(args: argparse.Namespace, root: str) -> None:
    deadline = time.monotonic() + args.seconds if args.seconds else None
    r = 0
    checked = 0
    t_all = time.perf_counter()
    while (deadline is None and r < args.rounds) or (deadline is not None and time.monotonic() < deadline):
        path = os.path.join(root, f"snap{r}")
        with fpstore.open(path, k=3) as store:
            _feed(store, range(3))
        t0 = time.perf_counter()
        _, stats = _run_writer_with_readers(path, args.batches, args.readers)
        with fpstore.open(path, readonly=True) as store:
            snap = snapshot(store)
            check_snapshot(snap)
            assert snap["ckpt"] == args.batches - 1
        iterations = sum(s["iterations"] for s in stats)
        checked += iterations
        print(f"round {r}: {time.perf_counter() - t0:.1f} s, {iterations} snapshots checked by {args.readers} readers", flush=True)
        shutil.rmtree(path)
        r += 1
    summary(test="snapshot", rounds=r, readers=args.readers, snapshots_checked=checked, inconsistencies=0,
            seconds=round(time.perf_counter() - t_all))


def _pytest_long(args: argparse.Namespace, root: str, test: str, env: dict[str, str]) -> None:
    """Run tests of tests/test_reliability.py (names separated by commas) with bigger figures
    (through their environment knobs)."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *(f"tests/test_reliability.py::{t}" for t in test.split(","))],
        cwd=ROOT, env={**os.environ, **env}, text=True, capture_output=True,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("FIGURES", "SKIP", "FAIL"))]
    for line in lines:
        print(line, flush=True)
    print("\n".join(proc.stdout.splitlines()[-3:]), flush=True)
    if proc.returncode != 0:
        print(proc.stdout[-6000:])
        raise AssertionError(f"{test} failed")


# The long runs of tests/test_reliability.py: command -> (tests, {option: (environment knob, default, help)}).
LONG_TESTS: dict[str, tuple[str, dict[str, tuple[str, object, str | None]]]] = {
    "powerloss": ("test_power_loss_keeps_every_acknowledged_batch",
                  {"--cycles": ("FPSTORE_POWERLOSS_CYCLES", 100, None), "--seed": ("FPSTORE_POWERLOSS_SEED", 7, None)}),
    "points": ("test_kill_at_named_points_leaves_old_or_new_state",
               {"--rounds": ("FPSTORE_POINT_ROUNDS", 5, None)}),
    "syscalls": ("test_kill_at_random_syscalls_of_every_operation",
                 {"--cases": ("FPSTORE_SYSCALL_RANDOM", 300, None), "--seed": ("FPSTORE_SYSCALL_SEED", 9, None)}),
    "damage": ("test_damaged_store_files_raise_typed_errors_or_answer,test_garbage_in_every_sub_database_raises_typed_errors_or_answers",
               {"--cases": ("FPSTORE_DAMAGE_CASES", 5000, "per test: byte damage, then garbled values"),
                "--seed": ("FPSTORE_DAMAGE_SEED", 11, None),
                "--kinds": ("FPSTORE_DAMAGE_KINDS", "flip,flip_page,truncate,truncate_page",
                            "byte damage kinds (zero_page aborts LMDB unless the store is opened with verify=True)")}),
}


def long_test(args: argparse.Namespace, root: str) -> None:
    tests, options = LONG_TESTS[args.command]
    env = {knob: str(getattr(args, option[2:].replace("-", "_"))) for option, (knob, _, _) in options.items()}
    _pytest_long(args, root, tests, env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("kill")
    p.add_argument("--cycles", type=int, default=2000)
    p.add_argument("--per-store", type=int, default=250)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-delay", type=float, default=MIN_DELAY)
    p.add_argument("--max-delay", type=float, default=MAX_DELAY)
    p.set_defaults(fn=kill)
    p = sub.add_parser("fuzz")
    p.add_argument("--seconds", type=float, default=1800)
    p.add_argument("--targets", default=None, help=f"comma-separated, from {','.join(FUZZ_TARGETS)}")
    p.set_defaults(fn=fuzz)
    p = sub.add_parser("fuzz-target", help="(internal) one target under atheris")
    p.add_argument("target", choices=FUZZ_TARGETS)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--artifacts", required=True)
    p.add_argument("--findings", required=True)
    p = sub.add_parser("snapshot")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--seconds", type=float, default=0, help="run rounds for this long instead of --rounds")
    p.add_argument("--batches", type=int, default=150)
    p.add_argument("--readers", type=int, default=4)
    p.set_defaults(fn=snapshots)
    for command, (_, options) in LONG_TESTS.items():
        p = sub.add_parser(command)
        for option, (_, default, help_text) in options.items():
            p.add_argument(option, type=type(default), default=default, help=help_text)
        p.set_defaults(fn=long_test)
    for name, p in sub.choices.items():
        if name != "fuzz-target":
            p.add_argument("--dir", default=None, help="where to make the stores (default: a temporary directory)")
    args = parser.parse_args()
    if args.command == "fuzz-target":
        _atheris_target(args)
        return 0
    root = args.dir or tempfile.mkdtemp(prefix="fpstore-torture-")
    os.makedirs(root, exist_ok=True)
    try:
        args.fn(args, root)
    except AssertionError as exc:
        print(f"FAILED: {exc}", flush=True)
        return 1
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
