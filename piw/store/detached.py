"""Cache files a read-only command leaves behind, written by a detached process the command does not wait for.

A first read of a long run leaves fold checkpoints (``piw.store.foldcache``, ``docs/bundle-format.md`` §7.1): each
one's state encoded, checked and written once the fold has passed it, a fifth of a cold ``piw inspect`` of 500,000
events spent on files the person does not wait for. A command that ends right after its answer (``piw inspect``,
``piw watch --once``) calls :func:`allow`, and :func:`run_detached` then hands such work to a grandchild process:
forked once the command's answer is written and flushed (:func:`run_pending`, from the entry point: it has the
sealed states in its copy of memory, and the answer is not encoded while two processes share that memory, where
every object the encoder touches would copy its page), in a session of its own (Ctrl-C in the terminal does not cut
it short), its standard streams on ``/dev/null`` and every other descriptor closed (no
pipe reader, no lock waits for it), reparented at once (the child between exits at once: no zombie). It only
writes caches, atomically, that every reader checks before trusting: a reader that comes before it is done finds
fewer checkpoints and folds a little more, with the same result.

Anything else writes in process, as before: a command that did not call :func:`allow` (a command run in the
caller's process, ``main(argv)``, as the tests do; the long-lived commands), a process with other threads (forking
one is not safe), a platform without ``fork``, or a failed fork.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

_allowed = False


def allow() -> None:
    """This process ends right after its answer: cache writes may be left to a detached process."""
    global _allowed
    _allowed = True


def allowed() -> bool:
    return _allowed and hasattr(os, "fork") and threading.active_count() == 1


_pending: list[Callable[[], None]] = []


def run_detached(work: Callable[[], None]) -> None:
    """Run ``work`` (cache writes only: it must not print or need a descriptor open then) in a detached
    grandchild once the answer is out (:func:`run_pending`) when :func:`allowed`, else here and now."""
    if not allowed():
        work()
        return
    _pending.append(work)


def run_pending() -> None:
    """Hand the work :func:`run_detached` kept to one detached grandchild (here, when forking is no longer
    allowed: a thread started since). The entry point calls this after flushing the command's output."""
    if not _pending:
        return
    works = list(_pending)
    _pending.clear()

    def work() -> None:
        for one in works:
            one()

    if allowed():
        _fork(work)
    else:
        work()


def _fork(work: Callable[[], None]) -> None:
    """Run ``work`` in a detached grandchild (here when the fork fails)."""
    try:
        sys.stdout.flush()  # (nothing buffered is written twice)
        sys.stderr.flush()
        pid = os.fork()
    except (OSError, ValueError):
        work()
        return
    if pid:
        os.waitpid(pid, 0)  # the child forks the writer and exits at once
        return
    try:  # the child
        if os.fork() == 0:
            _detach()
            work()
    finally:
        os._exit(0)  # (no exit handler, no flush of the parent's buffers)


def _detach() -> None:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, _max_fd())


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (OSError, ValueError):
        return 4096
