"""A value made on first use: how piw defers an import that start-up must not pay for.

``piw --help`` and a run that never needs a part (the agent stack, the shell executor) must not import it
(``tests/test_cli_startup.py`` pins which modules a command loads). The import goes inside the function that
makes the value, and :class:`Lazy` calls that function the first time the value is asked for, once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """``make()`` called on the first :meth:`get`, and its value returned from then on (thread-safe)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made: tuple[T] | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        if self._made is None:
            with self._lock:
                if self._made is None:
                    self._made = (self._make(),)
        return self._made[0]
