"""Who holds a claim: a process's identity, precise enough to tell that it died (``docs/detached.md``).

A claim's holder is ``{host id}:{boot id}:{pid}:{process start time}``. The host id is ``PIW_HOST_ID`` when set,
else the hostname; the boot id is ``/proc/sys/kernel/random/boot_id``, new at every boot. When a live lease belongs
to a process on this host that no longer exists (or whose pid now names another process, with another start time,
or that ran before this machine last booted), the lease counts as expired at once, so ``piw resume`` after a crash
never waits out the 30 s lease. A holder on another host is only ever taken over by expiry: two machines, or two
hosts given distinct ``PIW_HOST_ID`` on one machine, never judge each other's pids (``docs/detached.md``). Shell
commands record the same start time and host id for their process group, so a resume can tell whether a dead
holder's command still runs. Holders written before the boot id (``{hostname}:{pid}:{start time}``) are still read.

:func:`stale_holder_pid` names a holder that still runs on this machine (same host id and boot, same pid and start
time): a host that took over its expired claim stops it for good before writing (``piw.run.takeover``).
"""

from __future__ import annotations

import functools
import os
import socket

HOST_ID_ENV = "PIW_HOST_ID"


def host_id() -> str:
    """This host's id: ``PIW_HOST_ID`` when set (distinct per host on one machine in tests), else the hostname."""
    return os.environ.get(HOST_ID_ENV, "").strip() or socket.gethostname()


@functools.cache
def boot_id() -> str:
    """This machine's boot id (``/proc/sys/kernel/random/boot_id`` without its dashes), ``"?"`` without one."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            return handle.read().strip().replace("-", "") or "?"
    except OSError:
        return "?"


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


def runner_id(pid: int | None = None) -> str:
    """``{host id}:{boot id}:{pid}:{process start time}``: who holds a claim, precise enough to tell it died."""
    pid = os.getpid() if pid is None else pid
    return f"{host_id()}:{boot_id()}:{pid}:{process_start_time(pid) or '?'}"


def holder_host(holder: str | None) -> str | None:
    """The host id part of a holder (``None`` for a value that is not a holder)."""
    parsed = _parse(holder)
    return None if parsed is None else parsed[0]


def _parse(holder: str | None) -> tuple[str, str | None, int, str] | None:
    """``(host, boot id or None, pid, start time)`` of a holder in either format."""
    if not holder:
        return None
    parts = holder.rsplit(":", 3)
    if len(parts) == 4 and parts[2].isdigit():
        return parts[0], parts[1], int(parts[2]), parts[3]
    parts = holder.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit():
        return parts[0], None, int(parts[1]), parts[2]
    return None


def holder_is_dead(holder: str | None) -> bool:
    """True only for a holder on this host whose process is gone (or is another process with that pid, or ran
    before this machine's last boot)."""
    if not holder:
        return True
    parsed = _parse(holder)
    if parsed is None:
        return False
    host, boot, pid, started = parsed
    if host != host_id():
        return False  # a holder on another host is only ever taken over by expiry
    if boot is not None and "?" not in (boot, boot_id()) and boot != boot_id():
        return True  # it ran before this machine booted again
    now_started = process_start_time(pid)
    if now_started is None:
        return True
    return "?" not in (started, now_started) and started != now_started


def stale_holder_pid(holder: str | None) -> int | None:
    """The pid of ``holder`` when it is provably the same process still running here: same host id and boot (both
    recorded), same pid and start time, not this process. ``None`` for anything less certain (a recycled pid, an id
    without a boot, another machine): such a holder is never signalled."""
    parsed = _parse(holder)
    if parsed is None:
        return None
    host, boot, pid, started = parsed
    if host != host_id() or boot is None or "?" in (boot, started) or boot != boot_id() or pid == os.getpid():
        return None
    return pid if process_start_time(pid) == started else None
