"""The writer process of ``fpstore.aio.open(path, writer="process")``: both of its ends.

A writer thread shares the interpreter lock with the event loop: while it computes a group's
verdicts, the loop waits for the lock (up to the interpreter's switch interval, 5 ms, and longer
behind a C call that holds it), so timers fire late and sockets wait. A writer *process* has an
interpreter of its own. The loop's process keeps a read-only store for the reads and sends each
turn's writes down a pipe; the child runs them in the order they were sent, adds in group
commits exactly as :meth:`Store.add` from threads, and sends each result back once its
transaction is durable.

The pipes carry frames: an 8-byte big-endian length and a pickle (the child's stdout starts with
:data:`MAGIC`, so that anything else written there is recognised, not read as a length). Each
write's arguments and each answer are pickled apart, inside the frame: a write whose arguments
do not pickle is refused to its caller alone (``InputError``), and one that does not unpickle in
the child, or whose answer does not unpickle here, fails alone. A long list answer (``add_each``)
comes in parts, one unpickled per turn of the loop. Pickle is safe here: both ends are this
module, on pipes private to the two processes (no store file is ever unpickled).

The child runs in a session of its own (a Ctrl-C or a SIGTERM to the program's process group
does not stop it before the program has closed the store), and ends when its stdin closes or its
parent process is gone (a process forked from the parent may hold the pipe open).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import select
import signal
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fpstore.errors import ClosedError, InputError, StorageError
from fpstore.store.group import MAX_GROUP, run_group
from fpstore.store.inputs import OneAdd

__all__ = ["MAGIC", "READ_OPTIONS", "ProcessWriter", "child_main"]

log = logging.getLogger(__name__)

MAGIC = b"FPW1"
_LENGTH = struct.Struct("!Q")
#: Answers per frame from the child: the loop unpickles and wakes this many awaits per turn.
RESULTS_PER_FRAME = 16
#: A list answer longer than this comes in parts of this many items, one part per turn.
ITEMS_PER_PART = 256
#: The options of :func:`fpstore.open` the loop's read-only store takes from the caller's (the
#: rest — creating, the design, merges, durability — are the writer's).
READ_OPTIONS = ("k", "threshold", "pipeline", "verify", "allow_network_fs")
#: How often a child waiting for work checks that its parent process still exists (seconds).
PARENT_CHECK_S = 1.0

_CLOSE = "close"


def _frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def _pickled(obj: Any, what: str) -> bytes:
    """``obj`` pickled, or the :class:`InputError` saying that ``what`` cannot go to the writer."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise InputError(
            f"{what} cannot be sent to the writer process ({type(exc).__name__}: {exc}); "
            'writer="process" pickles every argument (writer="thread" does not)'
        ) from None


def _add_fields(add: OneAdd) -> tuple[Any, ...]:
    key = bytes(add.key) if isinstance(add.key, memoryview) else add.key  # the same key, and it pickles
    return (key, add.typed, add.fp, add.content_hash, add.short, add.flags, add.on_duplicate, add.checkpoint, add.sketch)


def _error_blob(error: BaseException) -> bytes:
    """``error`` pickled, or a :class:`StorageError` that names it when it does not survive."""
    try:
        blob = pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(blob)
        return blob
    except Exception:
        return pickle.dumps(StorageError(f"the writer process failed: {type(error).__name__}: {error}"))


def _answer(seq: int, result: Any, error: BaseException | None) -> tuple[int, str, Any]:
    """One write's answer as it travels: (seq, "ok" | "err" | "parts", pickled data)."""
    if error is not None:
        return (seq, "err", _error_blob(error))
    try:
        if isinstance(result, list) and len(result) > ITEMS_PER_PART:
            parts = [
                pickle.dumps(result[i : i + ITEMS_PER_PART], protocol=pickle.HIGHEST_PROTOCOL)
                for i in range(0, len(result), ITEMS_PER_PART)
            ]
            return (seq, "parts", parts)
        return (seq, "ok", pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception as exc:
        return (seq, "err", _error_blob(StorageError(f"the writer process's answer does not pickle: {type(exc).__name__}: {exc}")))


# -- the child --------------------------------------------------------------------------------


class _Frames:
    """The child's reading end: whole frames from a blocking file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, bytearray()
        self.parent = os.getppid()

    def _fill(self, timeout: float | None) -> bool:
        while True:
            wait = PARENT_CHECK_S if timeout is None else min(timeout, PARENT_CHECK_S)
            if select.select([self.fd], [], [], wait)[0]:
                break
            if os.getppid() != self.parent:
                raise EOFError  # the parent is gone; a process it forked may still hold the pipe
            if timeout is not None:
                timeout -= wait
                if timeout <= 0:
                    return False
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            raise EOFError
        self.buf += chunk
        return True

    def take(self, timeout: float | None = None) -> Any:
        """The next frame's object, waiting for it at most ``timeout`` seconds (None: as long as
        it takes); None when none came. EOFError when the loop's process has gone."""
        while True:
            if len(self.buf) >= _LENGTH.size:
                (n,) = _LENGTH.unpack_from(self.buf)
                if len(self.buf) >= _LENGTH.size + n:
                    obj = pickle.loads(bytes(self.buf[_LENGTH.size : _LENGTH.size + n]))
                    del self.buf[: _LENGTH.size + n]
                    return obj
            if not self._fill(timeout):
                return None


def child_main() -> None:
    """The writer process: open the store, then run what the loop sends until it says close or
    goes away, and close the store."""
    from fpstore.store.opening import open as open_store

    # The loop's process stops this one by closing its stdin, after the store's last write.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="fpstore writer process: %(levelname)s %(name)s: %(message)s")
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print() must not land between two frames

    def send(obj: Any) -> None:
        out.write(_frame(obj))
        out.flush()

    out.write(MAGIC)
    frames = _Frames(0)
    try:
        path, options = frames.take()
    except EOFError:
        return
    except Exception as exc:  # a class the loop's process has and this one cannot import
        send(
            ("error", _error_blob(InputError(f"an option of open() does not unpickle in the writer process ({type(exc).__name__}: {exc})")))
        )
        return
    try:
        store = open_store(path, **options)
    except Exception as exc:
        send(("error", _error_blob(exc)))
        return
    send(("ready", None))
    try:
        _serve(store, frames, send)
    except (BrokenPipeError, EOFError):
        pass  # the loop's process is gone: nobody waits for an answer
    finally:
        store.close()


def _unpickled(items: list[tuple[int, str, bytes]]) -> tuple[list[tuple[int, str, Any]], list[tuple[int, str, bytes]]]:
    """The items whose arguments unpickle here, and the answers of those that do not."""
    good, bad = [], []
    for seq, kind, blob in items:
        try:
            good.append((seq, kind, pickle.loads(blob)))
        except Exception as exc:
            error = InputError(f"this write's arguments do not unpickle in the writer process ({type(exc).__name__}: {exc})")
            bad.append(_answer(seq, None, error))
    return good, bad


def _serve(store: Any, frames: _Frames, send: Callable[[Any], None]) -> None:
    closing, groups = False, 0
    while not closing:
        items = frames.take()
        # Whatever else has arrived joins this round: the adds among it share group commits.
        try:
            while (more := frames.take(0)) is not None:
                items += more
        except EOFError:
            closing = True  # the loop's end closed the pipe after what it sent: that is run first
        if items and items[-1] == _CLOSE:
            items.pop()
            closing = True
        items, refused = _unpickled(items)
        for i in range(0, len(refused), RESULTS_PER_FRAME):
            send((groups, refused[i : i + RESULTS_PER_FRAME]))
        start = 0
        while start < len(items):
            end = start + 1
            if items[start][1] == "add":
                while end < len(items) and items[end][1] == "add" and end - start < MAX_GROUP:
                    end += 1
                group = items[start:end]
                outcomes = run_group(store._commit_adds, [OneAdd(*fields) for _, _, fields in group])
                groups += 1
                answers = [_answer(seq, result, error) for (seq, _, _), (result, error) in zip(group, outcomes)]
            else:
                seq, _, (name, args, kwargs) = items[start]
                try:
                    answers = [_answer(seq, getattr(store, name)(*args, **kwargs), None)]
                except Exception as exc:
                    answers = [_answer(seq, None, exc)]
            for i in range(0, len(answers), RESULTS_PER_FRAME):
                send((groups, answers[i : i + RESULTS_PER_FRAME]))
            start = end


# -- the loop's end ---------------------------------------------------------------------------


class ProcessWriter:
    """The loop's end of the writer process: queues each turn's writes into one frame, and wakes
    each await with its answer. Made by :meth:`start`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, proc: asyncio.subprocess.Process) -> None:
        self._loop, self._proc = loop, proc
        self._seq = 0
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        #: This turn's writes, not yet sent: (seq, kind, pickled arguments, withdrawable).
        self._pending: list[tuple[int, str, bytes, bool]] = []
        self._broken: str | None = None  # why no write is taken any more
        self._closing = False
        self._answers = loop.create_task(self._read_answers())
        #: Adds sent to the writer process, and the groups it has committed (for tests and benchmarks).
        self.adds = self.groups = 0

    @classmethod
    async def start(cls, path: str | os.PathLike[str], options: dict[str, Any]) -> ProcessWriter:
        """Start the writer process and open the store there (raising what the open raised)."""
        body = _pickled((os.fspath(path), options), "an option of open()")
        opening = _LENGTH.pack(len(body)) + body
        env = dict(os.environ)
        # The child imports this fpstore, wherever it was imported from.
        root = str(Path(__file__).resolve().parent.parent.parent)
        env["PYTHONPATH"] = os.pathsep.join([root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            "from fpstore.aio.process import child_main; child_main()",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(opening)
            if await proc.stdout.readexactly(len(MAGIC)) != MAGIC:
                raise StorageError("the writer process wrote something other than fpstore's frames on its stdout")
            kind, error = await _read_frame(proc.stdout)
            if kind == "error":
                raise pickle.loads(error)
        except (asyncio.IncompleteReadError, ConnectionError):
            await proc.wait()
            raise StorageError(f"the writer process exited while opening {os.fspath(path)!r} (exit code {proc.returncode})") from None
        except BaseException:
            if proc.returncode is None:
                proc.kill()  # a cancelled or failed open leaves no process holding the writer's lock
            try:
                await proc.wait()
            except BaseException:  # noqa: BLE001 - cancelled again: the process is killed already
                pass
            raise
        return cls(asyncio.get_running_loop(), proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def add(self, add: OneAdd, future: asyncio.Future[Any], withdrawable: bool) -> None:
        self._queue("add", _pickled(_add_fields(add), f"the add of {add.key!r}"), future, withdrawable)
        self.adds += 1

    def job(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], future: asyncio.Future[Any]) -> None:
        self._queue("job", _pickled((name, args, kwargs), f"an argument of {name}()"), future, False)

    def _queue(self, kind: str, blob: bytes, future: asyncio.Future[Any], withdrawable: bool) -> None:
        if self._broken is not None:
            raise (ClosedError if self._closing else StorageError)(self._broken)
        self._seq += 1
        self._waiting[self._seq] = future
        if not self._pending:
            self._loop.call_soon(self._send)
        self._pending.append((self._seq, kind, blob, withdrawable))

    def _send(self) -> None:
        """This turn's writes, in one frame. An add whose await was cancelled before it is sent
        is withdrawn; once sent, it is committed with its group (its result dropped)."""
        items = []
        for seq, kind, blob, withdrawable in self._pending:
            if withdrawable and self._waiting[seq].cancelled():
                del self._waiting[seq]
            else:
                items.append((seq, kind, blob))
        self._pending.clear()
        if items and self._proc.returncode is None:
            assert self._proc.stdin is not None
            self._proc.stdin.write(_frame(items))

    async def _read_answers(self) -> None:
        assert self._proc.stdout is not None
        try:
            while True:
                self.groups, answers = await _read_frame(self._proc.stdout)
                for seq, status, data in answers:
                    future = self._waiting.pop(seq, None)
                    try:
                        if status == "parts":
                            result: Any = []
                            for part in data:  # a long list: one part per turn of the loop
                                result += pickle.loads(part)
                                await asyncio.sleep(0)
                        else:
                            result = pickle.loads(data)
                    except Exception as exc:
                        status, result = (
                            "err",
                            StorageError(f"the writer process's answer does not unpickle here ({type(exc).__name__}: {exc})"),
                        )
                    if future is None or future.done():
                        continue
                    if status == "err":
                        future.set_exception(result)
                    else:
                        future.set_result(result)
                # A frame's answers wake its awaits; the loop turns before the next frame's, so
                # that timers and sockets are served between them.
                await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception as exc:  # a frame that does not read: the writer is no longer understood
            log.error("the writer process's answers do not read (%s: %s); stopping it", type(exc).__name__, exc)
            self._proc.kill()
        code = await self._proc.wait()
        if self._broken is None:
            self._broken = f"the writer process exited (exit code {code})"
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(StorageError(self._broken))
        self._waiting.clear()

    def kill(self) -> None:
        """Stop the writer process now (what it has not committed is lost, as in a crash)."""
        if self._proc.returncode is None:
            self._proc.kill()

    async def close(self) -> None:
        """Send what is queued and the close; wait for every answer and for the process to exit."""
        if not self._closing and self._broken is None and self._proc.returncode is None:
            self._send()
            assert self._proc.stdin is not None
            self._proc.stdin.write(_frame([_CLOSE]))
            try:
                await self._proc.stdin.drain()
                self._proc.stdin.close()
            except ConnectionError:
                pass
        if self._broken is None:
            self._broken = "this store is closed"
        self._closing = True
        await asyncio.shield(self._answers)
        if self._proc.returncode:
            log.warning("the writer process exited with code %d", self._proc.returncode)


async def _read_frame(stream: asyncio.StreamReader) -> Any:
    (n,) = _LENGTH.unpack(await stream.readexactly(_LENGTH.size))
    return pickle.loads(await stream.readexactly(n))
