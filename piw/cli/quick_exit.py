"""Ending the ``piw`` process without freeing, one object at a time, what a command built.

A view of a long run holds a large graph of small objects: the state of a 500,000-event run is about 160 MB of
dicts and strings. Freeing it when the command returns, and then at interpreter shutdown, took 0.2–0.45 s of a
2.3 s ``inspect --json``, all of it after the output was complete. A command that built such data hands it to
:func:`keep_until_exit`, and the console script's entry point (``main()`` called without ``argv``) then flushes
the standard streams and ends the process with ``os._exit``, the way mypy ends its own runs (``hard_exit``).

Only read-only commands ask for it: nothing of theirs waits on ``atexit`` or on a thread. A command run in
process (``main(argv)``, as the tests do) never ends the caller's process. The same commands, when they are the
whole process, may leave their cache writes to a detached process (:func:`allow_detached_writes`).
"""

from __future__ import annotations

import gc
import os
import sys

_kept: list[object] = []
_whole_process = False


def mark_whole_process() -> None:
    """The command running is this process's entry point (the console script), not a call in the caller's."""
    global _whole_process
    _whole_process = True


def allow_detached_writes() -> None:
    """A read-only command that ends right after its answer: when it is the whole process, the caches its read
    leaves (fold checkpoints) may be written by a detached process it does not wait for (``piw.store.detached``)."""
    if _whole_process:
        from piw.store.detached import allow

        allow()


def keep_until_exit(*objects: object) -> None:
    """Hold ``objects`` until the process ends, and ask the entry point to end it without freeing them.

    In the whole process, every object alive now is also moved out of the cyclic collector's sight (``gc.freeze``):
    a long replay builds its state with the collector paused, so its first collection afterwards would otherwise
    walk every dict of that state (once, in the middle of the answer) although none of them is ever freed."""
    _kept.extend(objects)
    if _whole_process:
        gc.freeze()


def requested() -> bool:
    return bool(_kept)


def end_process(code: int) -> None:
    """Flush stdout and stderr, then end the process with ``code`` at once; return if a flush fails.

    A failed flush (a closed pipe, a full disk) is left to the ordinary exit, which reports it as it always has.
    """
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    run_pending_writes()
    os._exit(code)


def run_pending_writes() -> None:
    """Start the cache writes a read left to a detached process (``piw.store.detached``), once the answer is
    flushed: the entry point calls this on its way out, whether or not it ends the process at once."""
    detached = sys.modules.get("piw.store.detached")  # (not imported: nothing was left)
    if detached is not None:
        detached.run_pending()
