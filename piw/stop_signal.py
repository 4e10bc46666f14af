"""A stop asked for by a signal (SIGTERM, Ctrl-C) that no place in the process can swallow.

Python runs a signal handler between two bytecodes of the main thread, wherever it is. The ``KeyboardInterrupt``
the handler raises is lost when that place is a weakref callback or a ``__del__`` run by the garbage collector
(Python prints "Exception ignored in: …" and carries on). A loop that must end on the signal, such as
``piw host``'s, also checks :func:`stop_requested`, so the request is kept even when its exception is not
(``docs/detached.md``, "Ctrl-C (or SIGTERM) stops it").
"""

from __future__ import annotations

_requested = False


def request_stop() -> None:
    """Remember that a stop signal arrived (called from the signal handler, before it raises)."""
    global _requested
    _requested = True


def stop_requested() -> bool:
    """Whether a stop signal arrived since the command started."""
    return _requested


def clear_stop_request() -> None:
    """Forget an earlier request: each command run in this process starts without one."""
    global _requested
    _requested = False
