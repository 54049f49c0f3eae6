"""fpstore.aio: awaited adds share group commits on one writer thread with the verdicts a serial
run gives, no LMDB call runs on the event loop's thread, cancelling withdraws or completes an add
whole; and the store's durability option."""

from __future__ import annotations

import asyncio
import shutil
import threading

import numpy as np
import pytest

import fpstore
import fpstore.aio
from fpstore.errors import ClosedError, InputError
from fpstore.store import faults
from tests.test_group_commit import _installed, _SlowCommits, _verdict

K = 3


def _docs(n: int, seed: int) -> list[tuple[str, int]]:
    """Keys with fingerprints in a few tight families (near duplicates of each other), some keys twice."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 2**64 - 1, 4, dtype=np.uint64, endpoint=True).tolist()
    out = []
    for i in range(n):
        fp = bases[i % 4]
        for bit in rng.choice(64, int(rng.integers(0, 4)), replace=False).tolist():
            fp ^= 1 << bit
        out.append((f"k{int(rng.integers(0, n - 5))}", fp))
    return out


class _Threads(faults.Faults):
    """Records the thread of every write transaction."""

    def __init__(self) -> None:
        self.writers: set[int] = set()

    def begin_write(self) -> None:
        self.writers.add(threading.get_ident())
        super().begin_write()


@pytest.mark.parametrize("writer", fpstore.aio.WRITERS)
def test_awaited_adds_share_groups_and_equal_serial_adds_in_commit_order(tmp_path, writer):
    docs = _docs(60, seed=3)

    async def run():
        with _installed(_SlowCommits()):
            async with fpstore.aio.open(tmp_path / "a", k=K, writer=writer) as store:
                pid = store.store.pipeline.id
                results = await asyncio.gather(*(store.add(key, fingerprint=fp, pipeline_id=pid) for key, fp in docs))
                assert store.groups < store.adds == len(docs)  # they were grouped
                final = await store.run(lambda: sorted((d.key, d.fingerprint) for d in store.store.documents()))
        return results, final

    results, final = asyncio.run(run())
    order = sorted(zip(docs, results), key=lambda item: item[1].id)
    with fpstore.open(tmp_path / "b", k=K) as serial:
        pid = serial.pipeline.id
        for (key, fp), res in order:
            assert _verdict(serial.add(key, fingerprint=fp, pipeline_id=pid)) == _verdict(res)
        assert sorted((d.key, d.fingerprint) for d in serial.documents()) == final


def test_no_lmdb_call_runs_on_the_event_loops_thread(tmp_path):
    recorder = _Threads()
    reads: set[int] = set()

    async def run():
        loop_thread = threading.get_ident()
        async with fpstore.aio.open(tmp_path / "s", k=K) as store:
            real_read = store.store._storage.read

            def read(*args, **kwargs):
                reads.add(threading.get_ident())
                return real_read(*args, **kwargs)

            store.store._storage.read = read
            pid = store.store.pipeline.id
            await asyncio.gather(*(store.add(f"d{i}", fingerprint=i * 7919, pipeline_id=pid) for i in range(30)))
            await store.add("page", text="a page of words " * 20)
            await store.set_checkpoint("feed", 30)
            assert await store.checkpoint("feed") == 30
            assert [m.key for m in await store.query(fingerprint=7919, pipeline_id=pid, k=0)] == ["d1"]
            assert (await store.get("d2")).fingerprint == 2 * 7919
            assert len(await store.add_each(["e1", "e2"], fingerprints=[1, 2], pipeline_id=pid)) == 2
        return loop_thread

    with _installed(recorder):
        loop_thread = asyncio.run(run())
    assert recorder.writers and loop_thread not in recorder.writers
    assert len(recorder.writers) == 1  # one writer thread owns every write transaction
    assert reads and loop_thread not in reads


class _FirstCommitWaits(faults.Faults):
    """The first commit waits until the test lets it go: adds queue behind it, for certain."""

    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()

    def before_commit(self) -> None:
        if not self.entered.is_set():
            self.entered.set()
            self.go.wait(30)


def test_a_cancelled_add_is_withdrawn_or_stored_whole(tmp_path):
    """Adds cancelled while they wait behind a commit are withdrawn, the others stored whole.
    (It slept 4 ms and hoped the writer had taken only some adds: under load it took them all.)"""
    docs = [(f"c{i}", i * 104729) for i in range(40)]
    fault = _FirstCommitWaits()

    async def run():
        with _installed(fault):
            async with fpstore.aio.open(tmp_path / "s", k=K) as store:
                pid = store.store.pipeline.id
                first = asyncio.create_task(store.add(docs[0][0], fingerprint=docs[0][1], pipeline_id=pid))
                await asyncio.get_running_loop().run_in_executor(None, fault.entered.wait, 30)
                tasks = [first] + [asyncio.create_task(store.add(key, fingerprint=fp, pipeline_id=pid)) for key, fp in docs[1:]]
                for _ in range(10):  # every add reaches the queue behind the waiting commit
                    await asyncio.sleep(0)
                for task in tasks[1::2]:
                    task.cancel()
                fault.go.set()
                outcomes = await asyncio.gather(*tasks, return_exceptions=True)
                stored = await store.run(lambda: {d.key: d.fingerprint for d in store.store.documents()})
                count = await store.run(len, store.store)
        return outcomes, stored, count

    outcomes, stored, count = asyncio.run(run())
    cancelled = {i for i, o in enumerate(outcomes) if isinstance(o, asyncio.CancelledError)}
    assert cancelled == set(range(1, 40, 2))
    assert stored == {key: fp for i, (key, fp) in enumerate(docs) if i not in cancelled}  # withdrawn, the rest whole
    assert count == len(stored) == 20


@pytest.mark.parametrize("writer", fpstore.aio.WRITERS)
def test_errors_reach_their_caller_and_a_closed_store_refuses(tmp_path, writer):
    async def run():
        store = await fpstore.aio.open(tmp_path / "s", k=K, writer=writer)
        pid = store.store.pipeline.id
        with pytest.raises(InputError):
            await store.add("bad", fingerprint=-1, pipeline_id=pid)
        with pytest.raises(InputError):
            await store.add("both", text="x", fingerprint=1, pipeline_id=pid)
        ok = await store.add("good", fingerprint=5, pipeline_id=pid)
        await store.close()
        await store.close()  # twice is fine
        with pytest.raises(ClosedError):
            await store.add("late", fingerprint=6, pipeline_id=pid)
        with pytest.raises(ClosedError):
            await store.query(fingerprint=5, pipeline_id=pid)
        return ok

    assert asyncio.run(run()).id is not None
    with fpstore.open(tmp_path / "s") as store:
        assert store.get("good").fingerprint == 5 and len(store) == 1
    with pytest.raises(InputError):
        fpstore.aio.open(tmp_path / "t", readers=0)


def test_durability_modes(tmp_path):
    with fpstore.open(tmp_path / "full", k=5) as store:
        assert store._storage.env.flags()["metasync"] is True
    with fpstore.open(tmp_path / "process", durability="process", k=5) as store:
        assert store._storage.env.flags()["metasync"] is False
        store.add("a", fingerprint=1, pipeline_id=store.pipeline.id)
    with fpstore.open(tmp_path / "process", k=5) as store:  # the mode belongs to the open, not the file
        assert store.get("a").fingerprint == 1
    with pytest.raises(InputError, match="durability"):
        fpstore.open(tmp_path / "bad", durability="none", k=5)
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("writer", fpstore.aio.WRITERS)
def test_a_checkpoint_function_records_positions_in_commit_order(tmp_path, writer):
    """Texts take different times to fingerprint, so awaits reach the writer out of call order; a
    checkpoint function is called as each add joins the queue, so the last committed position is
    the last one taken, and the adds' ids grow with the positions they took."""
    taken: list[int] = []  # add number, in the order positions were taken

    def position(i: int):
        taken.append(i)
        return ("feed", len(taken) - 1)

    texts = [" ".join(f"w{(i * 31 + j) % 97}" for j in range(30 if i % 3 else 60_000)) for i in range(24)]

    async def run():
        async with fpstore.aio.open(tmp_path / "s", k=K, readers=4, writer=writer) as store:
            results = await asyncio.gather(
                *(store.add(f"t{i}", text=t, checkpoint=lambda i=i: position(i)) for i, t in enumerate(texts))
            )
            return results, await store.checkpoint("feed")

    results, last = asyncio.run(run())
    assert last == len(texts) - 1
    ids_in_position_order = [results[i].id for i in taken]
    assert ids_in_position_order == sorted(ids_in_position_order)
    assert taken != sorted(taken), "fingerprinting did not reorder the adds: the test proved nothing"


@pytest.mark.parametrize("writer", fpstore.aio.WRITERS)
def test_writes_run_in_the_order_they_were_awaited(tmp_path, writer):
    """A set_checkpoint or delete awaited between adds runs between them: it used to wait behind
    the writer's whole drain, so adds awaited after it committed first (the older position won)."""

    async def run():
        with _installed(_SlowCommits()):
            async with fpstore.aio.open(tmp_path / "s", k=K, writer=writer) as store:
                pid = store.store.pipeline.id
                busy = [asyncio.create_task(store.add(f"a{i}", fingerprint=i * 7919, pipeline_id=pid)) for i in range(40)]
                await asyncio.sleep(0)
                job = asyncio.create_task(store.set_checkpoint("feed", "set alone"))
                gone = asyncio.create_task(store.delete("a1"))
                await asyncio.sleep(0)
                later = asyncio.create_task(store.add("z", fingerprint=12345, pipeline_id=pid, checkpoint=("feed", "with the add")))
                again = asyncio.create_task(store.add("a1", fingerprint=1, pipeline_id=pid))
                await asyncio.gather(*busy, job, gone, later, again)
                return await store.checkpoint("feed"), await store.get("a1")

    position, a1 = asyncio.run(run())
    assert position == "with the add"
    assert a1 is not None and a1.fingerprint == 1


@pytest.mark.parametrize("writer", fpstore.aio.WRITERS)
def test_a_cancelled_add_with_a_checkpoint_function_is_stored(tmp_path, writer):
    """Its checkpoint function already moved the caller's position past it, so cancelling the
    await must not withdraw the add (the position would name a page that is not stored)."""

    async def run():
        with _installed(_SlowCommits()):
            async with fpstore.aio.open(tmp_path / "s", k=K, writer=writer) as store:
                pid = store.store.pipeline.id
                busy = [asyncio.create_task(store.add(f"a{i}", fingerprint=i * 7919, pipeline_id=pid)) for i in range(20)]
                await asyncio.sleep(0)
                task = asyncio.create_task(store.add("kept", fingerprint=777, pipeline_id=pid, checkpoint=lambda: ("feed", "after kept")))
                await asyncio.sleep(0)
                task.cancel()
                await asyncio.gather(*busy, task, return_exceptions=True)
                # The cancelled await returned at once; a write awaited after it runs after it.
                await store.add("last", fingerprint=1 << 60, pipeline_id=pid)
                return task.cancelled(), await store.get("kept"), await store.checkpoint("feed")

    cancelled, kept, position = asyncio.run(run())
    assert cancelled and kept is not None and position == "after kept"


def test_an_error_escaping_the_writer_reaches_its_callers_and_the_writer_goes_on(tmp_path):
    """Anything the writer raises reaches the adds it held, and later adds still commit (a raise
    out of the writer loop used to leave it marked busy, so every later add waited for ever)."""

    class Boom(BaseException):
        pass

    async def run():
        async with fpstore.aio.open(tmp_path / "s", k=K) as store:
            pid = store.store.pipeline.id
            real = store.store._commit_adds
            calls = {"n": 0}

            def once(adds):
                calls["n"] += 1
                if calls["n"] == 1:
                    raise Boom()
                return real(adds)

            store.store._commit_adds = once
            with pytest.raises(Boom):
                await asyncio.wait_for(store.add("x", fingerprint=1, pipeline_id=pid), 10)
            res = await asyncio.wait_for(store.add("y", fingerprint=2, pipeline_id=pid), 10)
            return res

    assert asyncio.run(run()).id is not None


@pytest.mark.parametrize("writer", fpstore.aio.WRITERS)
def test_a_second_close_waits_for_the_first(tmp_path, writer):
    """Two close() at once: both return only once the store is closed (the second returned at
    once, with the store still open)."""

    async def run():
        store = await fpstore.aio.open(tmp_path / "s", k=K, writer=writer)
        pid = store.store.pipeline.id
        await asyncio.gather(*(store.add(f"d{i}", fingerprint=i, pipeline_id=pid) for i in range(20)))
        first = asyncio.create_task(store.close())
        await asyncio.sleep(0)
        await store.close()
        closed_after_second = store.store._storage._env is None
        await first
        return closed_after_second

    assert asyncio.run(run())


# -- writer="process": the writes in a child process -------------------------------------------


def test_the_writer_process_runs_every_write_in_order_and_reads_see_each(tmp_path):
    """Each kind of write travels to the child and back: its result, and what the loop's read-only
    store reads once it returns (the child committed it before answering)."""

    async def run():
        async with fpstore.aio.open(tmp_path / "s", k=K, writer="process") as store:
            assert store.store.readonly
            pid = store.store.pipeline.id
            first = await store.add("a", fingerprint=0b1011, pipeline_id=pid, checkpoint=("feed", 1))
            assert (await store.get("a")).fingerprint == 0b1011 and await store.checkpoint("feed") == 1
            near = await store.add("b", fingerprint=0b1010, pipeline_id=pid)
            assert [m.key for m in near.near_duplicates] == ["a"] and near.canonical == "a"
            each = await store.add_each(["c", "d"], fingerprints=[0xFFFF << 40, (0xFFFF << 40) | 1], pipeline_id=pid)
            assert [m.key for m in each[1].near_duplicates] == ["c"]
            ids = await store.add_many([7, 8], fingerprints=np.array([1 << 50, 1 << 51], dtype=np.uint64), pipeline_id=pid)
            assert ids.dtype == np.int64 and len(ids) == 2
            assert await store.delete("c") is True
            await store.set_checkpoint("feed", {"page": 9})
            page = await store.add("page", text="words of a page " * 20)
            assert not page.short and await store.get("page") is not None
            keys = sorted(map(str, await store.run(lambda: [d.key for d in store.store.documents()])))
            return first, keys, await store.checkpoint("feed"), store.groups, store.adds

    first, keys, position, groups, adds = asyncio.run(run())
    assert first.id is not None and keys == ["7", "8", "a", "b", "d", "page"] and position == {"page": 9}
    assert groups == adds == 3  # three adds, each awaited alone
    with fpstore.open(tmp_path / "s") as store:  # the child closed the store: a writer opens it
        assert len(store) == 6


def test_errors_in_the_writer_process_reach_their_caller_and_it_goes_on(tmp_path):
    from fpstore.errors import NotAStoreError

    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not a store")

    async def run():
        with pytest.raises(NotAStoreError):  # raised by the child's open, here
            await fpstore.aio.open(tmp_path / "other", writer="process")
        async with fpstore.aio.open(tmp_path / "s", k=K, writer="process") as store:
            pid = store.store.pipeline.id
            with pytest.raises(InputError, match="canonical"):  # raised in the child
                await store.add_many(["x"], fingerprints=[1], pipeline_id=pid, canonicals=["nowhere"])
            with pytest.raises(AttributeError):  # a method the store lacks: the child's error, here
                await store._write("no_such_method")
            return await store.add("y", fingerprint=2, pipeline_id=pid)

    assert asyncio.run(run()).id is not None
    assert (tmp_path / "other" / "notes.txt").read_text() == "not a store"
    with pytest.raises(InputError, match="writer"):
        fpstore.aio.open(tmp_path / "s", writer="fork")


def test_a_killed_writer_process_fails_the_waiting_adds_and_every_later_write(tmp_path):
    import os
    import signal

    from fpstore.errors import StorageError

    async def run():
        store = await fpstore.aio.open(tmp_path / "s", k=K, writer="process")
        pid = store.store.pipeline.id
        acknowledged = [await store.add(f"d{i}", fingerprint=i * 7919, pipeline_id=pid) for i in range(5)]
        os.kill(store._writer.pid, signal.SIGKILL)
        with pytest.raises(StorageError, match="exited"):
            await asyncio.wait_for(asyncio.gather(*(store.add(f"e{i}", fingerprint=i, pipeline_id=pid) for i in range(10))), 30)
        with pytest.raises(StorageError, match="exited"):
            await store.set_checkpoint("feed", 1)
        await asyncio.wait_for(store.close(), 30)
        return acknowledged

    acknowledged = asyncio.run(run())
    with fpstore.open(tmp_path / "s") as store:  # every acknowledged add is there
        assert all(store.get(r.key) is not None for r in acknowledged)


def _assert_exits(pid: int, message: str, seconds: float = 30) -> None:
    """Wait for process ``pid`` to be gone; kill it and fail with ``message`` if it is not."""
    import os
    import signal
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError(message)


def test_the_writer_process_ends_when_the_loops_process_dies(tmp_path):
    """The child reads its end of the pipe: when the loop's process is killed, it closes the store
    and exits instead of holding the writer's lock for ever."""
    import signal
    import subprocess
    import sys

    script = f"""
import asyncio, os, sys, time
import fpstore.aio
async def main():
    store = await fpstore.aio.open({str(tmp_path / "s")!r}, k=3, writer="process")
    await store.add("a", fingerprint=1, pipeline_id=store.store.pipeline.id)
    print(store._writer.pid, flush=True)
    time.sleep(60)
asyncio.run(main())
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        _assert_exits(child, "the writer process outlived the loop's process")
    finally:
        parent.kill()
    with fpstore.open(tmp_path / "s") as store:  # the writer's lock is free again
        assert store.get("a").fingerprint == 1


def test_adds_cancelled_before_they_are_sent_are_withdrawn(tmp_path):
    """A turn's adds are sent together at its end: those cancelled before then are never stored."""

    async def run():
        async with fpstore.aio.open(tmp_path / "s", k=K, writer="process") as store:
            pid = store.store.pipeline.id
            tasks = [asyncio.create_task(store.add(f"d{i}", fingerprint=i << 20, pipeline_id=pid)) for i in range(20)]
            await asyncio.sleep(0)  # each task has queued its add; the turn's frame is not sent yet
            for t in tasks[::2]:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return await store.run(lambda: sorted(d.key for d in store.store.documents()))

    assert asyncio.run(run()) == sorted(f"d{i}" for i in range(1, 20, 2))


def test_a_write_that_does_not_pickle_fails_alone(tmp_path):
    """Arguments that do not pickle are the caller's InputError, at once; the other writes of the
    same turn go on (they used to wait for ever, the turn's frame never sent); a memoryview key,
    which the store accepts, travels as bytes."""

    async def run():
        async with fpstore.aio.open(tmp_path / "s", k=K, writer="process") as store:
            pid = store.store.pipeline.id
            outcomes = await asyncio.wait_for(
                asyncio.gather(
                    store.add("before", fingerprint=1, pipeline_id=pid),
                    store.set_checkpoint("feed", lambda: 1),
                    store.add(memoryview(b"mv"), fingerprint=1 << 30, pipeline_id=pid),
                    store.add_many(["gen"], fingerprints=(x for x in [5])),
                    store.add("after", fingerprint=1 << 40, pipeline_id=pid),
                    return_exceptions=True,
                ),
                30,
            )
            return outcomes, await store.get(b"mv")

    outcomes, mv = asyncio.run(run())
    assert isinstance(outcomes[1], InputError) and "pickle" in str(outcomes[1])
    assert isinstance(outcomes[3], InputError)
    assert outcomes[0].id is not None and outcomes[2].key == b"mv" and outcomes[4].id is not None
    assert mv is not None


def test_a_write_that_does_not_unpickle_in_the_writer_fails_alone(tmp_path):
    """An argument of a class the writer process cannot import fails that write only (it used to
    kill the writer process, and every write after it)."""
    import sys
    import types

    only_here = types.ModuleType("fpstore_test_only_in_this_process")
    exec("class Position(int):\n    pass\n", only_here.__dict__)
    only_here.Position.__module__ = only_here.__name__
    sys.modules[only_here.__name__] = only_here
    try:

        async def run():
            async with fpstore.aio.open(tmp_path / "s", k=K, writer="process") as store:
                pid = store.store.pipeline.id
                with pytest.raises(InputError, match="unpickle"):
                    await asyncio.wait_for(store.set_checkpoint("feed", only_here.Position(3)), 30)
                return await asyncio.wait_for(store.add("next", fingerprint=7, pipeline_id=pid), 30)

        assert asyncio.run(run()).id is not None
    finally:
        del sys.modules[only_here.__name__]


def test_a_cancelled_open_leaves_no_writer_process(tmp_path):
    """An open cancelled while the writer process starts kills it: the writer's lock is free while
    the program goes on (a surviving child held it for the life of the program)."""
    import time

    from fpstore.errors import WriterLockedError

    def free() -> bool:
        try:
            with fpstore.open(tmp_path / "s", k=K):
                return True
        except WriterLockedError:
            return False

    async def run():
        for timeout in (0.05, 0.3, 0.6):  # before, while and after the child imports fpstore
            try:
                store = await asyncio.wait_for(fpstore.aio.open(tmp_path / "s", k=K, writer="process"), timeout)
            except asyncio.TimeoutError:
                pass
            else:
                await store.close()
            deadline = time.monotonic() + 20
            while not await asyncio.get_running_loop().run_in_executor(None, free):
                assert time.monotonic() < deadline, f"a writer process still holds the store (timeout {timeout})"
                await asyncio.sleep(0.1)

    asyncio.run(run())


def test_the_writer_process_has_its_own_session_and_ignores_sigint(tmp_path):
    """A Ctrl-C or a SIGTERM to the program's process group does not reach the writer process
    (it stopped the writer before the program's own shutdown could write its last checkpoint)."""
    import os
    import signal

    async def run():
        async with fpstore.aio.open(tmp_path / "s", k=K, writer="process") as store:
            child = store._writer.pid
            assert os.getsid(child) == child and os.getpgid(child) != os.getpgid(0)
            os.kill(child, signal.SIGINT)
            await asyncio.sleep(0.2)
            await store.set_checkpoint("feed", "last")
            return await store.checkpoint("feed")

    assert asyncio.run(run()) == "last"


def test_the_writer_process_ends_when_its_parent_dies_even_with_a_forked_process_left(tmp_path):
    """A process forked by the loop's process inherits the writer's stdin: the pipe stays open
    after the parent's death, so the child also watches its parent."""
    import os
    import signal
    import subprocess
    import sys

    script = f"""
import asyncio, os, sys, time
import fpstore.aio
async def main():
    store = await fpstore.aio.open({str(tmp_path / "s")!r}, k=3, writer="process")
    await store.add("a", fingerprint=1, pipeline_id=store.store.pipeline.id)
    if os.fork() == 0:
        time.sleep(120)
        os._exit(0)
    print(store._writer.pid, flush=True)
    time.sleep(120)
asyncio.run(main())
"""
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        child = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        _assert_exits(child, "the writer process outlived its parent")
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the forked sleeper, in the parent's session
    with fpstore.open(tmp_path / "s") as store:
        assert store.get("a").fingerprint == 1


def test_long_answers_and_maintenance_through_the_writer_process(tmp_path):
    """A list answer longer than a part arrives whole and in order; maintenance writes run on the
    writer (the loop's store is read-only); every StorageError after the writer's death is new."""
    import os
    import signal

    from fpstore.aio.process import ITEMS_PER_PART
    from fpstore.errors import StorageError

    n = 2 * ITEMS_PER_PART + 7

    async def run():
        store = await fpstore.aio.open(tmp_path / "s", k=K, writer="process")
        pid = store.store.pipeline.id
        results = await store.add_each([f"d{i}" for i in range(n)], fingerprints=[i << 8 for i in range(n)], pipeline_id=pid)
        before = (await store.run(store.store.counts))["incremental_entries"]
        await store.maintain("compact")
        with pytest.raises(InputError, match="method"):
            await store.maintain("delete", "d1")
        counts = (before, (await store.run(store.store.counts))["incremental_entries"])
        os.kill(store._writer.pid, signal.SIGKILL)
        errors = []
        for _ in range(2):
            try:
                await asyncio.wait_for(store.add("late", fingerprint=3, pipeline_id=pid), 30)
            except StorageError as exc:
                errors.append(exc)
        await store.close()
        return results, counts, errors

    results, counts, errors = asyncio.run(run())
    assert [r.key for r in results] == [f"d{i}" for i in range(n)]
    assert counts == (n, 0)
    assert len(errors) == 2 and errors[0] is not errors[1]


def test_a_banner_on_the_writers_stdout_fails_the_open_cleanly(tmp_path, monkeypatch):
    """Text a site module prints at the child's start is not read as a frame's length (the open
    used to wait for ever)."""
    from fpstore.errors import StorageError

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("print('hello from sitecustomize')\n")
    monkeypatch.setenv("PYTHONPATH", str(site))

    async def run():
        await asyncio.wait_for(fpstore.aio.open(tmp_path / "s", k=K, writer="process"), 60)

    with pytest.raises(StorageError, match="stdout"):
        asyncio.run(run())


@pytest.mark.parametrize("writer", fpstore.aio.WRITERS)
def test_a_large_group_wakes_its_awaits_a_few_per_turn_of_the_loop(tmp_path, writer):
    """A group of hundreds of adds answered at once would wake every awaiting task in one turn
    of the event loop, which looks at its timers and sockets only after running them all: the
    longest stall an asyncio crawler sees. Each writer wakes DELIVER_PER_TURN of them per turn."""
    n = 400

    async def run() -> dict[int, int]:
        loop = asyncio.get_running_loop()
        turn = 0

        def tick() -> None:  # runs once per turn of the loop
            nonlocal turn
            turn += 1
            if not stop:
                loop.call_soon(tick)

        stop = False
        woken: dict[int, int] = {}
        async with fpstore.aio.open(tmp_path / "s", k=K, writer=writer) as store:
            pid = store.store.pipeline.id

            async def add(i: int) -> None:
                await store.add(f"k{i}", fingerprint=i * 0x9E3779B97F4A7C15 % 2**64, pipeline_id=pid)
                woken[turn] = woken.get(turn, 0) + 1

            tick()
            await asyncio.gather(*(add(i) for i in range(n)))  # queued in one turn: few groups
            stop = True
            assert store.groups < n / 10
        return woken

    woken = asyncio.run(run())
    assert sum(woken.values()) == n
    assert max(woken.values()) <= fpstore.aio.DELIVER_PER_TURN, sorted(woken.values())[-5:]


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_close_under_load_commits_every_add_it_does_not_refuse(tmp_path, writer):
    """Closing while 30 tasks add in a loop: each add either returns (and its document is in the
    store) or raises ClosedError; none fails otherwise. With writer="process" the adds of the
    frame sent just before the close were dropped with the close frame when the pipe's end came
    in the same read ("this store is closed"), never committed."""
    path = tmp_path / "s"
    outcomes: list[str] = []

    async def run() -> None:
        async with fpstore.aio.open(path, k=3, writer=writer) as store:
            pid = store.store.pipeline.id

            async def adder(i: int) -> None:
                for n in range(10**6):
                    try:
                        await store.add(f"t{i}-{n}", fingerprint=(i * 1000003 + n) * 0x9E3779B97F4A7C15 % 2**64, pipeline_id=pid)
                        outcomes.append("ok")
                    except ClosedError:
                        outcomes.append("closed")
                        return
                    except Exception as exc:  # noqa: BLE001 - the test reports it
                        outcomes.append(f"{type(exc).__name__}: {exc}")
                        return

            tasks = [asyncio.create_task(adder(i)) for i in range(30)]
            await asyncio.sleep(0.5)
            await store.close()
            await asyncio.gather(*tasks)

    for _ in range(3):
        outcomes.clear()
        shutil.rmtree(path, ignore_errors=True)
        asyncio.run(run())
        assert set(outcomes) <= {"ok", "closed"}, sorted(set(outcomes) - {"ok", "closed"})[:3]
        with fpstore.open(path, readonly=True) as store:
            assert len(store) == outcomes.count("ok")
