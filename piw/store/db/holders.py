"""Who holds a claim: a process's identity, precise enough to tell that it died (``docs/detached.md``).

A claim's holder is ``{hostname}:{pid}:{process start time}@{boot id}`` (the boot id, when ``/proc`` has one, says
which boot the start time counts from; ids written before it have none). When a live lease belongs to a process on
this host that no longer exists (or whose pid now names another process, with another start time), the lease counts as
expired at once, so ``piw resume`` after a crash never waits out the 30 s lease. A holder on another host is only
ever taken over by expiry. Shell commands record the same start time for their process group, so a resume can tell
whether a dead holder's command still runs.

:func:`stale_holder_pid` names a holder that still runs on this machine (same host name and boot, same pid and
start time): a host that took over its expired claim stops it for good before writing (``piw.run.takeover``).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass


def process_start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, from ``/proc``), ``None`` when it does not exist.

    Without ``/proc`` (not Linux) the start time is ``"?"`` for any existing process, so a dead holder is
    still recognised by its pid, though a reused pid then looks alive until the lease expires.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return None
    except OSError:
        return _exists(pid)
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = data[data.rfind(b")") + 2 :].split()
    return fields[19].decode("ascii") if len(fields) > 19 else "?"


def _exists(pid: int) -> str | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return "?"
    return "?"


@functools.cache
def boot_id() -> str | None:
    """This machine's boot (the first 8 characters of ``/proc/sys/kernel/random/boot_id``), ``None`` without it."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip()[:8] or None
    except OSError:
        return None


def runner_id(pid: int | None = None) -> str:
    """``{hostname}:{pid}:{process start time}@{boot id}``: who holds a claim, precise enough to tell it died."""
    pid = os.getpid() if pid is None else pid
    boot = boot_id()
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid) or '?'}" + (f"@{boot}" if boot else "")


@dataclass(frozen=True)
class Holder:
    """A parsed holder id."""

    host: str
    pid: int
    started: str
    boot: str | None


def parse_holder(holder: str) -> Holder | None:
    parts = holder.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    host, pid_text, stamp = parts
    started, _, boot = stamp.partition("@")
    return Holder(host, int(pid_text), started, boot or None)


def _elsewhere(holder: Holder) -> bool:
    """On another machine: another host name, or another boot when both are known."""
    here = boot_id()
    return holder.host != socket.gethostname() or (
        holder.boot is not None and here is not None and holder.boot != here
    )


def holder_is_dead(holder: str | None) -> bool:
    """True only for a holder on this host whose process is gone (or is another process with that pid)."""
    if not holder:
        return True
    parsed = parse_holder(holder)
    if parsed is None or _elsewhere(parsed):
        return False  # a holder on another host is only ever taken over by expiry
    now_started = process_start_time(parsed.pid)
    if now_started is None:
        return True
    return "?" not in (parsed.started, now_started) and parsed.started != now_started


def stale_holder_pid(holder: str | None) -> int | None:
    """The pid of ``holder`` when it is provably the same process still running here: same host name and boot
    (both recorded), same pid and start time, not this process. ``None`` for anything less certain (a recycled
    pid, an id without a boot, another machine): such a holder is never signalled."""
    parsed = parse_holder(holder) if holder else None
    if parsed is None or parsed.boot is None or parsed.boot != boot_id() or _elsewhere(parsed):
        return None
    if parsed.pid == os.getpid() or "?" in parsed.started:
        return None
    return parsed.pid if process_start_time(parsed.pid) == parsed.started else None
