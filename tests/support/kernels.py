"""A compiled kernel's test switches (``use_unchecked_loops``, ``use_wide_decode``,
``use_vector_compare``), set for the length of a ``with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def kernel_setting(switch: Callable[[int], int], setting: int) -> Iterator[None]:
    """``switch(setting)`` inside the block; the setting it had before, after it."""
    was = switch(setting)
    try:
        yield
    finally:
        switch(was)
