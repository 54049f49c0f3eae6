"""Edges of the operator's tools and of counts read from disk.

* Damaged store files (a zeroed page, a page of random bytes) under ``verify``, ``export`` and
  ``info``: LMDB's structural check runs before anything walks a B-tree, and damage is a finding
  (exit 1, one message), never a signal or a traceback (docs/reliability.md).
* A run index (with a valid checksum) claiming far more entries than its chunks can hold, and
  state records whose counts exceed what backs them: CorruptionError before any allocation sized
  by the count (rule 10).
* ``fpstore-admin``'s numeric options: negative or zero where meaningless is a usage error
  (exit 2) caught by argparse before anything is opened or created; SIGTERM during ``import``
  cleans up as Ctrl-C does.

The damaged-file cases run each command in a forked child of one helper process (an LMDB abort
shows as a negative exit code, as it would for the installed command, without paying the
interpreter's start-up for each of several hundred runs); a few run the installed command itself.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib

import lmdb
import msgpack
import numpy as np
import pytest

import fpstore
from fpstore.index import tiers
from fpstore.admin.cli import build_parser, main
from fpstore.errors import CorruptionError

REPO = pathlib.Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(REPO) + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def _admin() -> list[str]:
    exe = shutil.which("fpstore-admin")
    if exe and os.path.dirname(os.path.realpath(exe)) == os.path.dirname(os.path.realpath(sys.executable)):
        return [exe]
    return [sys.executable, "-m", "fpstore"]


def _copy(src: pathlib.Path, dst: pathlib.Path) -> pathlib.Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("lock.mdb", "writer.lock"))
    return dst


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> pathlib.Path:
    """A closed store with every kind of content: a compacted run (packed id column), a bulk
    load (run with implicit ids, and a key segment), incremental entries and tombstones."""
    path = tmp_path_factory.mktemp("edges") / "base.fps"
    rng = np.random.default_rng(17)
    with fpstore.open(path, k=3) as s:
        pid = s.pipeline.id
        fps = rng.integers(0, 1 << 64, size=800, dtype=np.uint64, endpoint=False)
        fps[250:300] = fps[:50] ^ np.uint64(5)  # near duplicates
        s.add_many([f"a{i}" for i in range(300)], fingerprints=fps[:300], pipeline_id=pid)
        s.compact()
        s.bulk_load(np.arange(10_000, 10_400, dtype=np.int64), fps[300:700], pipeline_id=pid)
        s.add_many([f"c{i}" for i in range(100)], fingerprints=fps[700:800], pipeline_id=pid)
        for key in ("a3", "a260", 10_005, "c7"):
            assert s.delete(key)
    return path


# -- case 5: damaged store files under verify, export and info ----------------------------------------

#: Runs each job (argv, stdout file, stderr file) as ``main(argv)`` in a forked child and prints
#: each child's exit code as os.waitstatus_to_exitcode gives it (negative: killed by a signal).
_FORK_DRIVER = r"""
import json, os, signal, sys, traceback
from fpstore.admin.cli import main
jobs = json.load(open(sys.argv[1]))
codes = []
for argv, out, err in jobs:
    pid = os.fork()
    if pid == 0:
        try:
            signal.alarm(120)  # a hang shows as SIGALRM
            for fd, name in ((1, out), (2, err)):
                os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            try:
                rc = main(argv)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 2
            except BaseException:
                traceback.print_exc()  # what the interpreter prints for an uncaught exception
                rc = 1
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(locals().get("rc", 99))
    _, status = os.waitpid(pid, 0)
    codes.append(os.waitstatus_to_exitcode(status))
print(json.dumps(codes))
"""


def _run_forked(jobs: list[list[str]], work: pathlib.Path) -> list[tuple[int, str, str]]:
    """(exit code, stdout, stderr) of ``main(argv)`` for each argv, each in its own forked child."""
    spec = []
    for n, argv in enumerate(jobs):
        spec.append([argv, str(work / f"job{n}.out"), str(work / f"job{n}.err")])
    job_file = work / "jobs.json"
    job_file.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, "-c", _FORK_DRIVER, str(job_file)], capture_output=True, text=True,
                          env=_env(), timeout=1800)
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout.splitlines()[-1])
    return [(rc, pathlib.Path(o).read_text(errors="replace"), pathlib.Path(e).read_text(errors="replace"))
            for rc, (_, o, e) in zip(codes, spec)]


def _structurally_damaged(path: pathlib.Path) -> bool:
    """What LMDB's pure-Python verifier (it never hands the file to LMDB) says of the copy."""
    from lmdb import verify

    try:
        return bool(verify.verify(str(path), subdir=True))
    except verify.VerifyError:
        return True


def _check_damage_cases(base: pathlib.Path, tmp: pathlib.Path, damages: list[tuple[str, int, bytes | None]]) -> None:
    """For each (label, page, bytes or None for zeros): damage a copy's page, run verify, export
    and info on it; every run ends with an exit code, no traceback; structural damage is a
    finding (exit 1) with one clear message, and export leaves no file behind."""
    cases = []
    jobs: list[list[str]] = []
    for n, (label, page, data) in enumerate(damages):
        path = _copy(base, tmp / f"d{n}")
        with open(path / "data.mdb", "r+b") as f:
            f.seek(page * 4096)
            f.write(data if data is not None else bytes(4096))
        out = tmp / f"d{n}.export"
        cases.append((label, path, out, _structurally_damaged(path)))
        jobs += [["verify", str(path)], ["export", str(path), "-o", str(out)], ["info", str(path)]]
    results = _run_forked(jobs, tmp)
    failures = []
    damaged_cases = 0
    for i, (label, path, out, damaged) in enumerate(cases):
        damaged_cases += damaged
        for cmd, (rc, stdout, stderr) in zip(("verify", "export", "info"), results[3 * i : 3 * i + 3]):
            what = f"{label}: {cmd} exit {rc}"
            if rc < 0:
                failures.append(f"{what} (killed by {signal.Signals(-rc).name}): {stderr.strip()[-200:]}")
            elif "Traceback" in stderr:
                failures.append(f"{what} printed a traceback: {stderr.strip().splitlines()[-1]}")
            elif damaged:
                if rc != 1:
                    failures.append(f"{what}, wanted 1 (structural damage): {(stderr or stdout).strip()[-200:]}")
                    continue
                # One clear message: verify's verdict on stdout, the others' error on stderr.
                message = stdout.strip().splitlines()[-1] if cmd == "verify" else stderr
                if "structural check" not in message or (cmd != "verify" and stderr.count("\n") != 1):
                    failures.append(f"{what}: unclear message {message!r}")
            elif rc not in (0, 1):
                failures.append(f"{what} on a store the verifier finds sound: {(stderr or stdout).strip()[-200:]}")
        if damaged and (out.exists() or any(p.name.startswith(out.name + ".partial") for p in tmp.iterdir())):
            failures.append(f"{label}: export of a damaged store left a file behind")
    assert damaged_cases, "no case damaged the store's structure: the test checks nothing"
    assert not failures, f"{len(failures)} failures, e.g.:\n" + "\n".join(failures[:12])


@pytest.mark.slow
def test_zeroed_page_verify_export_info_report_damage(base, tmp_path):
    """verify, export and info on a store with any one page zeroed: exit 1 with one clear message when the structure is damaged, never a signal (LMDB's IS_LEAF abort) or a traceback."""
    npages = os.path.getsize(base / "data.mdb") // 4096
    _check_damage_cases(base, tmp_path, [(f"page {p} of {npages} zeroed", p, None) for p in range(npages)])


@pytest.mark.slow
def test_random_page_verify_export_info_report_damage(base, tmp_path):
    """verify, export and info on a store with a page overwritten by random bytes: exit 1 with one clear message for structural damage, never a signal or a traceback."""
    rng = random.Random(5)
    npages = os.path.getsize(base / "data.mdb") // 4096
    pages = sorted(rng.sample(range(npages), min(24, npages)))
    _check_damage_cases(base, tmp_path, [(f"page {p} of {npages} random", p, rng.randbytes(4096)) for p in pages])


def _first_tree_page(base: pathlib.Path) -> int:
    """A page whose zeroing the structural verifier reports (a B-tree page of some table)."""
    from lmdb import verify

    npages = os.path.getsize(base / "data.mdb") // 4096
    for page in range(2, npages):
        data = bytearray((base / "data.mdb").read_bytes())
        data[page * 4096 : (page + 1) * 4096] = bytes(4096)
        probe = base.parent / "probe"
        shutil.rmtree(probe, ignore_errors=True)
        probe.mkdir()
        (probe / "data.mdb").write_bytes(bytes(data))
        if any("DB: page" in p for p in verify.verify(str(probe), subdir=True)):
            return page
    raise AssertionError("no B-tree page found")


@pytest.mark.slow
def test_installed_command_reports_a_zeroed_page(base, tmp_path):
    """The installed fpstore-admin (verify, verify --json, export, info) on a store with a zeroed B-tree page: exit 1, no traceback, the structural check named."""
    path = _copy(base, tmp_path / "z.fps")
    page = _first_tree_page(base)
    with open(path / "data.mdb", "r+b") as f:
        f.seek(page * 4096)
        f.write(bytes(4096))
    for args in (["verify", path], ["verify", path, "--json"], ["export", path, "-o", tmp_path / "z.out"], ["info", path]):
        p = subprocess.run(_admin() + [str(a) for a in args], capture_output=True, text=True, env=_env(), timeout=300)
        assert p.returncode == 1, (args, p.returncode, p.stderr)
        assert "Traceback" not in p.stderr, p.stderr
        if "--json" in args:
            data = json.loads(p.stdout)
            assert data["ok"] is False and any("structural check" in x for x in data["problems"])
        else:
            assert "structural check" in (p.stdout + p.stderr)
    assert not (tmp_path / "z.out").exists()


@pytest.mark.slow
def test_verify_of_a_sound_store_still_passes(base, tmp_path):
    """A sound store still verifies with exit 0 (with and without --no-copy), and export and info still work."""
    path = _copy(base, tmp_path / "ok.fps")
    res = _run_forked([["verify", str(path)], ["verify", str(path), "--no-copy"], ["info", str(path)],
                       ["export", str(path), "-o", str(tmp_path / "ok.out")]], tmp_path)
    for rc, out, err in res:
        assert rc == 0 and "Traceback" not in err, (rc, out, err)
    assert "LMDB verifier ok" in res[0][1]
    assert (tmp_path / "ok.out").stat().st_size > 0


# -- case 6: counts read from disk against the bytes behind them ------------------------------------------

_CLAIMED = 8_600_000_000  # entries a forged run index claims (69 GB of uint64)
_BE = 65535  # the largest block size: the fewest blocks for the claim


def _forged_index_bytes(count: int, *, spread: bool) -> bytes:
    """A run index in the on-disk layout (docs/format.md), checksum valid, claiming ``count``
    entries in one chunk. ``spread`` gives each block as many claimed bytes as its entries need
    (so only the chunk's real length can refute it); otherwise the blocks are one byte apart."""
    nb = -(-count // _BE)
    nentries = np.full(nb, _BE, "<u2")
    nentries[-1] = count - (nb - 1) * _BE
    step = 1 + -(-(_BE - 1) // 8) if spread else 1  # a block of n entries needs 1 + ceil((n-1)/8) bytes
    offsets = (np.arange(nb, dtype=np.int64) * step).astype("<u4")
    chunk_len = nb * step
    assert chunk_len < 1 << 32
    header = struct.pack("<4sHHIIQQQ", b"FPRI", 1, 0, _BE, 1, nb, count, 0)
    body = b"".join((header, np.zeros(nb, "<u8").tobytes(), offsets.tobytes(), nentries.tobytes(),
                     struct.pack("<III", 0, chunk_len, 0)))
    return body + struct.pack("<I", zlib.crc32(body))


def _forge_run(path: pathlib.Path, count: int, *, spread: bool, index: bool = True) -> None:
    """Replace the first run's table-0 index by a forged one (unless ``index`` is False) and make
    the state record claim ``count`` entries for that run, as a bad disk or an attacker could."""
    from fpstore.store.storage import MAX_DBS

    env = lmdb.open(str(path), subdir=True, lib_version=0, max_dbs=MAX_DBS, map_size=0)
    try:
        meta, blobs = env.open_db(b"meta"), env.open_db(b"blobs")
        with env.begin(write=True) as txn:
            raw = bytes(txn.get(tiers.STATE_KEY, db=meta))
            ntables = len(msgpack.unpackb(raw)["runs"][0]["tables"])
            state = tiers.State.from_bytes(raw, ntables)
            rec = state.runs[0]
            ids = dataclasses.replace(rec.ids, count=count) if rec.ids is not None else None
            rec = dataclasses.replace(rec, count=count, ids=ids)
            state = dataclasses.replace(state, runs=(rec,) + state.runs[1:])
            if index:
                txn.put(rec.tables[0] + b"I", _forged_index_bytes(count, spread=spread), db=blobs)
            txn.put(tiers.STATE_KEY, state.to_bytes(), db=meta)
    finally:
        env.close()


@pytest.mark.parametrize("spread", [False, True], ids=["blocks-too-short", "chunk-too-short"])
def test_run_index_claiming_billions_raises_corruption(base, tmp_path, spread):
    """A checksummed run index claiming 8.6 billion entries passes open(verify=True), then near_duplicate_pairs, clusters and exhaustive query raise CorruptionError (not MemoryError)."""
    path = _copy(base, tmp_path / "forged.fps")
    _forge_run(path, _CLAIMED, spread=spread)
    with fpstore.open(path, readonly=True, verify=True) as s:
        for call in (s.near_duplicate_pairs, s.clusters, lambda: s.query(fingerprint=1, pipeline_id=s.pipeline.id, exhaustive=True)):
            with pytest.raises(CorruptionError):
                call()


def test_verify_reports_a_run_index_claiming_billions(base, tmp_path):
    """fpstore-admin verify on a store with a forged, checksummed run index claiming 8.6 billion entries: exit 1, a problem line, no traceback."""
    path = _copy(base, tmp_path / "forged.fps")
    _forge_run(path, _CLAIMED, spread=True)
    p = subprocess.run(_admin() + ["verify", str(path)], capture_output=True, text=True, env=_env(), timeout=300)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "problem: " in p.stdout, p.stderr


def test_run_ids_are_bounded_by_the_table_behind_them(base, tmp_path):
    """A state record claiming 8.6 billion entries for a run whose tables hold a few hundred: reading its ids raises CorruptionError before allocating for the claim."""
    from fpstore.store.storage import MAX_DBS

    path = _copy(base, tmp_path / "count.fps")
    _forge_run(path, _CLAIMED, spread=False, index=False)
    env = lmdb.open(str(path), subdir=True, lib_version=0, max_dbs=MAX_DBS, map_size=0, readonly=True)
    try:
        meta, blobs = env.open_db(b"meta"), env.open_db(b"blobs")
        with env.begin() as txn:
            raw = bytes(txn.get(tiers.STATE_KEY, db=meta))
            rec = msgpack.unpackb(raw)["runs"][0]
            state = tiers.State.from_bytes(raw, len(rec["tables"]))
            for r in state.runs:
                if r["count"] == _CLAIMED:
                    with pytest.raises(CorruptionError):
                        tiers.Run(txn, blobs, tiers.TierCache(), r).all_ids()
    finally:
        env.close()


def test_state_refuses_a_segment_with_more_documents_than_key_blocks():
    """A state record whose key segment claims more documents than its key blocks can hold raises CorruptionError."""
    ordinals = {"prefix": b"o", "count": 0, "min": 0, "width": 0, "per_chunk": 65536}
    for count, blocks, ok in ((256, 1, True), (257, 2, True), (257, 1, False), (1 << 40, 1, False), (1, 0, False)):
        seg = {"id": 1, "base": 1, "count": count, "fps": b"f", "hashes": b"h", "keys": b"k", "key_blocks": blocks,
               "ordinals": dict(ordinals, count=count)}
        raw = tiers.State([], [seg], 1, 2).to_bytes()
        if ok:
            tiers.State.from_bytes(raw, 4)
        else:
            with pytest.raises(CorruptionError):
                tiers.State.from_bytes(raw, 4)


# -- case 17: numeric options and signals --------------------------------------------------------------


def _main(argv: list[str]) -> tuple[int, str]:
    """``main(argv)`` in this process: (exit code, stderr)."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, err.getvalue()


BAD_OPTIONS = [
    ("ingest", "--max-bytes", "-1"), ("ingest", "--max-bytes", "0"), ("ingest", "--batch-size", "0"),
    ("ingest", "-k", "-1"), ("ingest", "--expected-size", "-1"), ("ingest", "--expected-size", "0"),
    ("ingest", "--shingle", "0"), ("ingest", "--min-tokens", "-1"), ("ingest", "--seed", "-1"),
    ("create", "-k", "-1"), ("create", "--expected-size", "0"), ("create", "--shingle", "-2"),
    ("stats", "--sample", "-3"), ("stats", "--sample", "0"), ("stats", "--seed", "-1"),
    ("query", "--limit", "-1"), ("query", "--limit", "0"), ("query", "-k", "-1"),
    ("dedup", "-k", "-1"), ("dedup", "--min-size", "0"), ("dedup", "--min-size", "-5"),
    ("export", "--level", "0"), ("export", "--level", "23"), ("export", "--level", "-5"),
    ("import", "--batch-size", "0"), ("import", "--batch-size", "-1"),
    ("demo", "-k", "-1"), ("demo", "--limit", "0"), ("demo", "--limit", "-1"), ("demo", "--members", "-1"),
    ("ingest", "-k", "11"), ("create", "-k", "11"), ("dedup", "-k", "11"), ("query", "-k", "65"),
    ("ingest", "--batch-size", "x"),
]


@pytest.mark.parametrize("cmd,option,value", BAD_OPTIONS, ids=[" ".join(c) for c in BAD_OPTIONS])
def test_meaningless_numbers_are_usage_errors(base, tmp_path, cmd, option, value):
    """A negative or zero number where it means nothing is a usage error (exit 2, the option named) before any store is opened or made."""
    new = tmp_path / "new.fps"
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps({"id": "x", "text": "some words that make a document of a few tokens"}) + "\n")
    stream = tmp_path / "s.out"
    stream.write_bytes(b"")
    argv = {
        "ingest": ["ingest", str(new), str(src)],
        "create": ["create", str(new)],
        "stats": ["stats", str(base)],
        "query": ["query", str(base), "--fingerprint", "1"],
        "dedup": ["dedup", str(base)],
        "export": ["export", str(base), "-o", str(tmp_path / "x.out")],
        "import": ["import", str(new), str(stream)],
        "demo": ["demo", "--store", str(new)],
    }[cmd] + [option, value]
    code, err = _main(argv)
    assert code == 2, (argv, code, err)
    assert "usage:" in err and option in err and "Traceback" not in err, err
    assert not new.exists() and not (tmp_path / "x.out").exists()


def test_every_numeric_option_uses_the_checked_type():
    """No command's numeric option is a bare int or float: each goes through the shared range-checked argparse type."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    bare = []
    for name, p in sub.choices.items():
        for action in p._actions:
            if action.type in (int, float):
                bare.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert not bare, bare


def test_valid_numbers_still_work(base):
    """Positive values of the checked options work as before (query --limit 1 prints one match)."""
    with fpstore.open(base, readonly=True) as s:
        fp = s.get("a0").fingerprint
    code, _ = _main(["query", str(base), "--fingerprint", f"{fp:x}", "--limit", "1", "-k", "3"])
    assert code == 0
    assert _main(["stats", str(base), "--sample", "5", "--seed", "0"])[0] == 0


@pytest.fixture(scope="module")
def big_stream(tmp_path_factory) -> pathlib.Path:
    """An export stream of 20,000 documents: enough that an import of one document per
    transaction (each a durable commit) is still running when a signal arrives."""
    tmp = tmp_path_factory.mktemp("stream")
    store = tmp / "src.fps"
    with fpstore.open(store, k=3) as s:
        fps = np.random.default_rng(3).integers(0, 1 << 64, size=20_000, dtype=np.uint64, endpoint=False)
        s.bulk_load(np.arange(20_000, dtype=np.int64), fps, pipeline_id=s.pipeline.id)
    out = tmp / "src.out"
    p = subprocess.run(_admin() + ["export", str(store), "-o", str(out)], capture_output=True, text=True, env=_env(), timeout=300)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_during_import_into_a_new_path_cleans_up(big_stream, tmp_path, sig):
    """SIGTERM (like SIGINT) during import into a new path: exit 130, one line, no traceback, no .NAME.importing-* directory and no store left behind."""
    target = tmp_path / "new.fps"
    proc = subprocess.Popen(_admin() + ["import", str(target), str(big_stream), "--batch-size", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    try:
        # Wait (not a timing assertion: a bound on a wait) until the hidden store exists and holds data.
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            hidden = [p for p in tmp_path.iterdir() if p.name.startswith(".new.fps.importing-")]
            if hidden and (hidden[0] / "data.mdb").exists():
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the import ended before the signal: make the stream bigger"
        time.sleep(0.2)  # into the batches
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err_text = err.decode(errors="replace")
    assert proc.returncode == 130, (proc.returncode, err_text)
    assert "Traceback" not in err_text and err_text.count("\n") == 1 and "interrupted" in err_text, err_text
    assert [p.name for p in tmp_path.iterdir()] == [], list(tmp_path.iterdir())


_WRITER = r"""
import sys
import numpy as np
import fpstore
rng = np.random.default_rng(9)
with fpstore.open(sys.argv[1], k=3, flush_entries=0) as s:
    pid = s.pipeline.id
    print("ready", flush=True)
    for line in sys.stdin:
        for _ in range(int(line)):
            keys = [f"w{int(x)}" for x in rng.integers(0, 3000, 300)]
            s.add_many(keys, fingerprints=rng.integers(0, 1 << 63, 300, dtype=np.uint64), pipeline_id=pid)
        print("done", flush=True)
"""


@pytest.mark.slow
def test_structure_check_beside_a_committing_writer_finds_no_damage(base, tmp_path, monkeypatch):
    """LMDB's structural check of a store whose writer commits while the check walks it reports nothing: findings are confirmed under a read transaction, which keeps the writer from reusing the pages being walked."""
    from lmdb import verify

    from fpstore.store import files, storage

    path = _copy(base, tmp_path / "live.fps")
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=_env())
    try:
        assert writer.stdout.readline().strip() == "ready"
        load_metas = verify._Verifier.load_metas

        def load_metas_then_commit(self):  # the walk starts from the newest commit, then the writer goes on
            load_metas(self)
            writer.stdin.write("20\n")
            writer.stdin.flush()
            assert writer.stdout.readline().strip() == "done"

        monkeypatch.setattr(verify._Verifier, "load_metas", load_metas_then_commit)
        unpinned = files._verify_file_once(str(path / "data.mdb"))
        assert unpinned, "the commits did not disturb an unpinned walk: this test would show nothing"
        assert storage.structure_problems(str(path)) == []
    finally:
        writer.stdin.close()
        writer.wait(timeout=120)


@pytest.mark.slow
def test_cli_ingest_follows_links_out_of_the_tree_only_when_asked(tmp_path):
    """fpstore-admin ingest skips a link to a file outside the source tree, and reads it with --follow-symlinks."""
    import fpstore

    outside = tmp_path / "outside.txt"
    outside.write_text("words from outside the tree " * 20)
    src = tmp_path / "src"
    src.mkdir()
    (src / "inside.txt").write_text("words from inside the tree " * 20)
    os.symlink(outside, src / "link.txt")
    for flag, want in (([], ["inside.txt"]), (["--follow-symlinks"], ["inside.txt", "link.txt"])):
        store = tmp_path / f"s{len(flag)}"
        proc = subprocess.run([sys.executable, "-m", "fpstore", "ingest", str(store), str(src), *flag], capture_output=True, text=True)
        assert proc.returncode in (0, 1), proc.stderr
        assert "Traceback" not in proc.stderr
        with fpstore.open(store, readonly=True) as s:
            assert sorted(map(str, s)) == want
