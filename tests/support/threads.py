"""Threads for the concurrency tests: run workers at once, report the first error, fail on a hang."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(workers: list[Callable[[], object]], seconds_limit: float = 120.0) -> None:
    """Run each worker in a thread of its own; raise the first error one raised, and fail when one
    is still running after ``seconds_limit`` (a hang)."""
    errors: list[BaseException] = []

    def wrap(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(fn), daemon=True) for fn in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds_limit)
    assert not any(t.is_alive() for t in threads), "a thread is stuck"
    if errors:
        raise errors[0]
