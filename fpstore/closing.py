"""``Closing``: the context-manager protocol of everything fpstore hands out that holds files open."""

from __future__ import annotations

from typing import Self


class Closing:
    """``with X(...) as x:`` closes ``x`` on the way out, whatever happened inside."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
