"""Process groups that outlive their holder: recorded before a command starts, stopped before its node reruns.

A shell step runs in its own session (so a timeout or cancel can kill its whole group), which also means it
survives a ``kill -9`` of piw. Without care, ``piw resume`` would rerun the node while the old command still runs
(two deploys at once). So the shell executor starts the command behind a gate: a tiny ``/bin/sh`` that waits on a
pipe. Before opening the gate, piw commits ``process_started {pid, pgid, startTime, host}`` to the trace (fsync'd).
If piw dies before that, the gate's pipe closes and the command never runs. On resume (or takeover) the claimer reads
the record from the fold and, before the node reruns, kills the group — SIGTERM, then SIGKILL after 1 s — when it is
still the same group: its leader has the recorded start time, or the leader is gone while members remain (a pid
is not reused while its process group exists). The guarantee and its limits are in ``docs/authoring.md``.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from piw.store.db.holders import (
    process_start_time,
)  # one definition of a process's identity, shared with claims

GRACE_S = 1.0
WAIT_GONE_S = 5.0


def group_record(pid: int) -> dict[str, Any]:
    """The ``process_started`` payload for a freshly started group leader."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        pgid = pid
    return {"pid": pid, "pgid": pgid, "startTime": process_start_time(pid), "host": socket.gethostname()}


def live_members(pgid: int) -> bool:
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


def same_group(record: Mapping[str, Any]) -> bool:
    """True when the recorded group still exists as the same group (never a stranger that reused the pid)."""
    pid, pgid = record.get("pid"), record.get("pgid")
    if not isinstance(pid, int) or not isinstance(pgid, int) or pgid <= 1:
        return False
    if record.get("host") not in (None, socket.gethostname()):
        return False  # another host's processes cannot be seen from here
    started = process_start_time(pid)
    if started is not None:
        recorded = record.get("startTime")
        if started != recorded and "?" not in (started, recorded):
            return False  # the pid now names another process, and the old group is gone with it
    return live_members(pgid)


def stop_group(record: Mapping[str, Any]) -> bool:
    """Kill a recorded group that survived its holder; True when one was found and signalled.

    SIGTERM, then SIGKILL for members left after :data:`GRACE_S`; returns once no live member remains (or after
    :data:`WAIT_GONE_S`), so the node never reruns next to it.
    """
    if not same_group(record):
        return False
    pgid = int(record["pgid"])
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, WAIT_GONE_S)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not live_members(pgid):
                return True
            time.sleep(0.02)
    return True
