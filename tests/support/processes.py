"""The parent's side of the worker processes: spawning ``python -m tests.workers`` and reading
its lines with a timeout (``Child``), or forking workers from one warm interpreter (``ForkServer``)."""

from __future__ import annotations

import os
import signal
import sys
import time

from tests.support.oracle import CheckFailed

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Child:
    """A worker subprocess whose stdout lines the parent reads with a timeout."""

    def __init__(self, *args: str, stdin: bool = False, prefix: tuple[str, ...] = ()) -> None:
        import subprocess

        self.args = args
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "tests.workers", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            start_new_session=True,  # its own process group: kill() reaches a tracee under strace too
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._buf = b""
        self.lines: list[str] = []

    @property
    def pid(self) -> int:
        return self.proc.pid

    def line(self, timeout: float = 60.0) -> str:
        """The next stdout line; fails (killing the child) on timeout or EOF."""
        import select

        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.kill()
                raise CheckFailed(f"worker {self.args} printed no line within {timeout} s; stderr: {self.stderr()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                rc = self.proc.wait()
                raise CheckFailed(f"worker {self.args} exited ({rc}) before a line; stderr: {self.stderr()}")
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\n", 1)
        text = raw.decode()
        self.lines.append(text)
        return text

    def kill(self) -> int:
        """SIGKILL the child, reap it, and keep every line it printed before dying."""
        self._kill_group()
        return self.finish()

    def _kill_group(self) -> None:
        """SIGKILL the child's process group (the child, and a tracee when the child is strace)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for the child; collect the rest of its stdout into ``lines``; return its status."""
        import select

        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        out = b""
        while True:  # read to EOF, which comes once the child is gone
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._kill_group()
                self.proc.wait()
                raise CheckFailed(f"worker {self.args} did not finish within {timeout} s; stderr: {self.stderr()}")
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
        rc = self.proc.wait(timeout)
        rest = (self._buf + out).decode()
        self._buf = b""
        self.lines.extend(line for line in rest.split("\n") if line)
        return rc

    def send(self, line: str) -> None:
        """Write one command line to the child's stdin (started with ``stdin=True``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def stderr(self) -> str:
        """What the child wrote to stderr so far (never waits: a tracee may hold the pipe open)."""
        import select

        if self.proc.poll() is None:
            return "(still running)"
        fd = self.proc.stderr.fileno()
        out = b""
        while select.select([fd], [], [], 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
        return out.decode(errors="replace")[-4000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:  # a pipe to a child that is gone
                    pass


class ForkServer(Child):
    """A long-lived worker that has imported fpstore and forks one feed writer per kill cycle.

    A fresh interpreter costs ~0.3 s of imports per cycle; a fork costs a few milliseconds, and
    the forked writer still opens the store from scratch (the recovery path under test). The
    server keeps each dead writer unreaped until :meth:`reap`, so its pid cannot be reused before
    the parent has sent its SIGKILL.
    """

    def __init__(self, path: str) -> None:
        super().__init__("fork-server", path, stdin=True)
        assert self.line(timeout=120) == "server ready"

    def start_feed(self, stop: int = 1 << 40, timeout: float = 60.0, durability: str = "full") -> tuple[int, int | None]:
        """Fork a feed writer opening the store with ``durability``; return (its pid, the
        checkpoint it resumes from)."""
        self.lines.clear()
        self.send(f"feed {stop} {durability}")
        line = self.line(timeout)
        parts = line.split()
        if parts[:1] != ["ready"]:
            raise CheckFailed(f"fork server: expected 'ready PID CKPT', got {line!r}")
        return int(parts[1]), None if parts[2] == "None" else int(parts[2])

    def poll_lines(self) -> list[str]:
        """Every complete line already printed, without waiting (appended to ``lines``)."""
        import select

        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self._buf += chunk
        while b"\n" in self._buf:
            raw, self._buf = self._buf.split(b"\n", 1)
            self.lines.append(raw.decode())
        return self.lines

    def call(self, *args: str, timeout: float = 120.0) -> tuple[int, list[str]]:
        """Fork a worker running ``python -m tests.workers ARGS`` (no spaces in args), wait for it
        to end (it may SIGKILL itself), and return (exit code, its lines)."""
        assert all(" " not in a for a in args), args
        self.lines.clear()
        self.send("call " + " ".join(args))
        self.line(timeout)  # "ready PID None"
        return self.reap(timeout)

    def reap(self, timeout: float = 60.0) -> tuple[int, list[str]]:
        """Reap the current writer (kill it first, or let it finish); return (exit code, its lines)."""
        self.send("reap")
        while True:
            line = self.line(timeout)
            if line.startswith("exit "):
                lines = self.lines[:-1]
                self.lines.clear()
                return int(line.split()[1]), lines

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(10)
            except Exception:  # noqa: BLE001 - a server that does not answer is killed below
                pass
        super().close()
