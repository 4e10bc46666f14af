"""Taking a run over from a holder stopped past its lease (``SIGSTOP``, a suspended terminal), on this machine.

A claim whose lease expired on the database clock may be taken by another process (``piw.store.db.queue``), but a
holder that is stopped, not dead, still holds the bundle's writer lock: the taker's ``acquire`` is refused by the
lock again and again, and the run waits until the stopped process continues. So the taker, having taken the claim
from that holder, stops it for good (``SIGKILL`` to the holder's process, which owns the lock) when it is provably
the same process on this machine: same host name and boot, same pid and start time (never a recycled pid;
:func:`~piw.store.db.holders.stale_holder_pid`). The kernel releases the lock as the process exits, and the taker
writes. Shell commands the holder started run in their own groups; a resume stops them as a dead holder's
(``piw.run.process_groups``). A holder on another machine is never signalled: it cannot write once its lease has
expired (its fence fails), and the lock is per machine anyway. See ``docs/guarantees.md``, "A stopped holder".
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import TypeVar

from piw.errors import RunLocked
from piw.store.db.holders import stale_holder_pid

log = logging.getLogger(__name__)

T = TypeVar("T")

RELEASE_WAIT_S = 5.0
"""How long the taker waits for the killed holder's lock to be released."""


def stop_stale_holder(holder: str | None) -> bool:
    """``SIGKILL`` ``holder`` when it is provably the same process still running here; whether it was signalled."""
    pid = stale_holder_pid(holder)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    log.warning("stopped %s for good: its lease expired while it still held the run's writer lock", holder)
    return True


def acquire_from_stale_holder(acquire: Callable[[], T], holder: str | None) -> T | None:
    """Stop ``holder`` and take the lock it held (``None`` when it was not ours to stop or never let go)."""
    if not stop_stale_holder(holder):
        return None
    deadline = time.monotonic() + RELEASE_WAIT_S
    while True:
        try:
            return acquire()
        except RunLocked:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
