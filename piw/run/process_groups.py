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
from collections.abc import Mapping
from typing import Any

from piw.processes import KILL_GRACE_S, group_alive, terminate_group
from piw.store.db.holders import (  # one definition of a process's identity, shared with claims
    host_id,
    process_start_time,
)

WAIT_GONE_S = 5.0


def group_record(pid: int) -> dict[str, Any]:
    """The ``process_started`` payload for a freshly started group leader."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        pgid = pid
    return {"pid": pid, "pgid": pgid, "startTime": process_start_time(pid), "host": host_id()}


def same_group(record: Mapping[str, Any]) -> bool:
    """True when the recorded group still exists as the same group (never a stranger that reused the pid)."""
    pid, pgid = record.get("pid"), record.get("pgid")
    if not isinstance(pid, int) or not isinstance(pgid, int) or pgid <= 1:
        return False
    if record.get("host") not in (None, host_id()):
        return False  # another host's processes cannot be seen from here
    started = process_start_time(pid)
    if started is not None:
        recorded = record.get("startTime")
        if started != recorded and "?" not in (started, recorded):
            return False  # the pid now names another process, and the old group is gone with it
    return group_alive(pgid)


def stop_group(record: Mapping[str, Any]) -> bool:
    """Kill a recorded group that survived its holder; True when one was found and signalled.

    SIGTERM, then SIGKILL for members left after :data:`~piw.processes.KILL_GRACE_S`; returns once no live
    member remains (or after :data:`WAIT_GONE_S`), so the node never reruns next to it.
    """
    if not same_group(record):
        return False
    pgid = int(record["pgid"])
    return terminate_group(pgid, lambda: not group_alive(pgid), KILL_GRACE_S, WAIT_GONE_S)
