"""Stopping a process group: SIGTERM to the whole group, then SIGKILL for what is left after a grace period.

Everything piw starts as a subprocess runs in its own session (``start_new_session=True``), so one signal reaches
what it started too: pipelines, background jobs, grandchildren. Shell steps, the ``bash`` tool, the Pi process of
the ``pi-rpc`` backend and a group that outlived a crashed piw (:mod:`piw.run.process_groups`) are all stopped by
:func:`terminate_group` (``docs/authoring.md``, ``shell(...)``; ``docs/guarantees.md``, "Shell commands and their
process groups").
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

KILL_GRACE_S = 1.0
"""Seconds between SIGTERM and SIGKILL."""

_POLL_S = 0.01


def group_alive(pgid: int) -> bool:
    """Whether the group still has a member that is not a zombie (``/proc`` on Linux, else ``killpg(pgid, 0)``)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            data = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


def terminate_group(
    pgid: int, done: Callable[[], bool], grace_s: float = KILL_GRACE_S, settle_s: float = 0.0
) -> bool:
    """SIGTERM the group, then SIGKILL it unless ``done()`` holds within ``grace_s``; after a SIGKILL, wait up to
    ``settle_s`` for ``done()``.

    Nothing is signalled when ``done()`` already holds: a group that has fully closed is gone, and its id may
    belong to someone else by now. Returns False when nothing was signalled or the group is not ours to signal.
    """
    if done():
        return False
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, settle_s)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if done():
                return True
            time.sleep(_POLL_S)
    return True


def kill_process_group(
    process: subprocess.Popen[bytes],
    drained: Callable[[], bool] | None = None,
    grace_s: float = KILL_GRACE_S,
    settle_s: float = 0.0,
) -> None:
    """Stop the group that ``process`` leads (:func:`terminate_group`): it is done once the leader has exited and
    ``drained()`` holds, by default once no member of the group is left."""

    def closed() -> bool:
        if process.poll() is None:
            return False
        return drained() if drained is not None else not group_alive(process.pid)

    terminate_group(process.pid, closed, grace_s, settle_s)
