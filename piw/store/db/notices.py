"""One line a person sees while piw copes with a database fault (busy, a damaged index, a replaced file).

The database layer does not print; it hands such a line to :func:`notice`, which writes it to standard error with
a ``piw:`` prefix unless a caller (a test, a screen that owns the terminal) set another sink. Each line says what
happened and what piw did about it (``docs/guarantees.md``, "Database faults").
"""

from __future__ import annotations

import sys
from collections.abc import Callable

Sink = Callable[[str], None]

_sink: Sink | None = None


def notice(line: str) -> None:
    """Tell the person at the terminal, in one line."""
    if _sink is not None:
        _sink(line)
        return
    try:
        sys.stderr.write(f"piw: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # no terminal to tell


def set_sink(sink: Sink | None) -> Sink | None:
    """Send notices to ``sink`` (``None``: standard error again); returns the previous one."""
    global _sink
    previous, _sink = _sink, sink
    return previous
