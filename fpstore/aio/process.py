"""The writer process of ``fpstore.aio.open(path, writer="process")``: both of its ends.

A writer thread shares the interpreter lock with the event loop: while it computes a group's
verdicts, the loop waits for the lock (up to the interpreter's switch interval, 5 ms, and longer
behind a C call that holds it), so timers fire late and sockets wait. A writer *process* has an
interpreter of its own. The loop's process keeps a read-only store for the reads and sends each
turn's writes down a pipe; the child runs them in the order they were sent, adds in group
commits exactly as :meth:`Store.add` from threads, and sends each result back once its
transaction is durable.

The frames on both pipes are a 4-byte big-endian length and a pickle. Pickle is safe here: both
ends are this module, on a pipe private to the two processes (no store file is ever unpickled).
An add travels as a plain tuple of its fields (a tuple pickles several times faster than the
dataclass).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import select
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fpstore.errors import ClosedError, StorageError
from fpstore.store.group import MAX_GROUP, run_group
from fpstore.store.inputs import OneAdd

__all__ = ["ProcessWriter", "child_main", "READ_OPTIONS"]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct("!I")
#: Results per frame from the child: the loop unpickles and wakes this many awaits per turn.
RESULTS_PER_FRAME = 16
#: The options of :func:`fpstore.open` the loop's read-only store takes from the caller's (the
#: rest — creating, the design, merges, durability — are the writer's).
READ_OPTIONS = ("k", "threshold", "pipeline", "verify")

_CLOSE = "close"


def _frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


def _add_fields(add: OneAdd) -> tuple[Any, ...]:
    return (add.key, add.typed, add.fp, add.content_hash, add.short, add.flags, add.on_duplicate, add.checkpoint, add.sketch)


def _sendable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling, else a :class:`StorageError` that names it."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return StorageError(f"the writer process failed: {type(error).__name__}: {error}")


# -- the child --------------------------------------------------------------------------------


class _Frames:
    """The child's reading end: whole frames from a blocking file descriptor."""

    def __init__(self, fd: int) -> None:
        self.fd, self.buf = fd, bytearray()

    def _fill(self, block: bool) -> bool:
        if not block and not select.select([self.fd], [], [], 0)[0]:
            return False
        chunk = os.read(self.fd, 1 << 20)
        if not chunk:
            raise EOFError
        self.buf += chunk
        return True

    def take(self, block: bool) -> Any:
        """The next frame's object; None when ``block`` is false and no whole frame is here yet.
        EOFError when the loop's process has gone (its end of the pipe closed)."""
        while True:
            if len(self.buf) >= 4:
                (n,) = _LENGTH.unpack_from(self.buf)
                if len(self.buf) >= 4 + n:
                    obj = pickle.loads(bytes(self.buf[4 : 4 + n]))
                    del self.buf[: 4 + n]
                    return obj
            if not self._fill(block):
                return None


def child_main() -> None:
    """The writer process: open the store, then run what the loop sends until it says close or
    goes away (its pipe closes: the loop's process died), and close the store."""
    from fpstore.store.opening import open as open_store

    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print() must not land between two frames

    def send(obj: Any) -> None:
        out.write(_frame(obj))
        out.flush()

    frames = _Frames(0)
    try:
        path, options = frames.take(block=True)
        store = open_store(path, **options)
    except EOFError:
        return
    except Exception as exc:
        send(("error", _sendable(exc)))
        return
    send(("ready", None))
    try:
        _serve(store, frames, send)
    finally:
        store.close()


def _serve(store: Any, frames: _Frames, send: Callable[[Any], None]) -> None:
    closing, groups = False, 0
    while not closing:
        try:
            items = frames.take(block=True)
            # Whatever else has arrived joins this round: the adds among it share group commits.
            while (more := frames.take(block=False)) is not None:
                items += more
        except EOFError:
            return  # the loop's process is gone: nobody waits for an answer
        if items and items[-1] == _CLOSE:
            items.pop()
            closing = True
        start = 0
        while start < len(items):
            end = start + 1
            if items[start][1] == "add":
                while end < len(items) and items[end][1] == "add" and end - start < MAX_GROUP:
                    end += 1
                group = items[start:end]
                outcomes = run_group(store._commit_adds, [OneAdd(*fields) for _, _, fields in group])
                groups += 1
                answers = [
                    (seq, result, None if error is None else _sendable(error)) for (seq, _, _), (result, error) in zip(group, outcomes)
                ]
            else:
                seq, _, (name, args, kwargs) = items[start]
                try:
                    answers = [(seq, getattr(store, name)(*args, **kwargs), None)]
                except Exception as exc:
                    answers = [(seq, None, _sendable(exc))]
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
        #: This turn's writes, not yet sent: (seq, kind, payload, withdrawable).
        self._pending: list[tuple[int, str, Any, bool]] = []
        self._broken: BaseException | None = None
        self._answers = loop.create_task(self._read_answers())
        #: Adds the writer process was sent, and the groups it has committed (for tests and benchmarks).
        self.adds = self.groups = 0

    @classmethod
    async def start(cls, path: str | os.PathLike[str], options: dict[str, Any]) -> ProcessWriter:
        """Start the writer process and open the store there (raising what the open raised)."""
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
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(_frame((os.fspath(path), options)))
        try:
            kind, error = await _read_frame(proc.stdout)
        except (asyncio.IncompleteReadError, ConnectionError):
            await proc.wait()
            raise StorageError(f"the writer process exited while opening {os.fspath(path)!r} (exit code {proc.returncode})") from None
        if kind == "error":
            await proc.wait()
            raise error
        return cls(asyncio.get_running_loop(), proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def add(self, add: OneAdd, future: asyncio.Future[Any], withdrawable: bool) -> None:
        self._queue("add", _add_fields(add), future, withdrawable)
        self.adds += 1

    def job(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], future: asyncio.Future[Any]) -> None:
        self._queue("job", (name, args, kwargs), future, False)

    def _queue(self, kind: str, payload: Any, future: asyncio.Future[Any], withdrawable: bool) -> None:
        if self._broken is not None:
            raise self._broken
        self._seq += 1
        self._waiting[self._seq] = future
        if not self._pending:
            self._loop.call_soon(self._send)
        self._pending.append((self._seq, kind, payload, withdrawable))

    def _send(self) -> None:
        """This turn's writes, in one frame. An add whose await was cancelled before it is sent
        is withdrawn; once sent, it is committed with its group (its result dropped)."""
        items = []
        for seq, kind, payload, withdrawable in self._pending:
            if withdrawable and self._waiting[seq].cancelled():
                del self._waiting[seq]
            else:
                items.append((seq, kind, payload))
        self._pending.clear()
        if items and self._broken is None:
            assert self._proc.stdin is not None
            self._proc.stdin.write(_frame(items))

    async def _read_answers(self) -> None:
        assert self._proc.stdout is not None
        try:
            while True:
                self.groups, answers = await _read_frame(self._proc.stdout)
                for seq, result, error in answers:
                    future = self._waiting.pop(seq, None)
                    if future is None or future.done():
                        continue
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(result)
                # A frame's answers wake its awaits; the loop turns before the next frame's, so
                # that timers and sockets are served between them.
                await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        code = await self._proc.wait()
        if self._broken is None:
            self._broken = StorageError(f"the writer process exited (exit code {code})")
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(self._broken)
        self._waiting.clear()

    async def close(self) -> None:
        """Send what is queued and the close; wait for every answer and for the process to exit."""
        if self._broken is None:
            self._send()
            assert self._proc.stdin is not None
            self._proc.stdin.write(_frame([_CLOSE]))
            self._broken = ClosedError("this store is closed")
            try:
                await self._proc.stdin.drain()
                self._proc.stdin.close()
            except ConnectionError:
                pass
        await asyncio.shield(self._answers)
        if self._proc.returncode:
            log.warning("the writer process exited with code %d", self._proc.returncode)


async def _read_frame(stream: asyncio.StreamReader) -> Any:
    (n,) = _LENGTH.unpack(await stream.readexactly(4))
    return pickle.loads(await stream.readexactly(n))
