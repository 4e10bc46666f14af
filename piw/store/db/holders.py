"""Who holds a claim: a process's identity, precise enough to tell that it died (``docs/detached.md``).

A claim's holder is ``{hostname}:{pid}:{process start time}``. When a live lease belongs to a process on this host
that no longer exists (or whose pid now names another process, with another start time), the lease counts as
expired at once, so ``piw resume`` after a crash never waits out the 30 s lease. A holder on another host is only
ever taken over by expiry. Shell commands record the same start time for their process group, so a resume can tell
whether a dead holder's command still runs.
"""

from __future__ import annotations

import os
import socket


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
    """``{hostname}:{pid}:{process start time}``: who holds a claim, precise enough to tell it died."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid) or '?'}"


def holder_is_dead(holder: str | None) -> bool:
    """True only for a holder on this host whose process is gone (or is another process with that pid)."""
    if not holder:
        return True
    parts = holder.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    host, pid_text, started = parts
    if host != socket.gethostname():
        return False  # a holder on another host is only ever taken over by expiry
    now_started = process_start_time(int(pid_text))
    if now_started is None:
        return True
    return "?" not in (started, now_started) and started != now_started
