"""What the disk said: a full disk or an unwritable ``PIW_HOME`` as one clear ``PiwError`` instead of a traceback.

Writes happen in many places (bundle files, artifacts, the trace, the session, ``piw.sqlite``); they all fail the
same few ways when the home is read-only or the disk is full. :func:`storage_error` turns such an ``OSError`` or
``sqlite3`` error into :class:`~piw.errors.StorageFull` (the run can go on once there is space) or
:class:`~piw.errors.HomeUnavailable` (nothing can be written here); anything else is not a storage problem and
stays what it is. The engine parks a run on ``StorageFull``; the CLI prints either as one ``Error:`` line.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from piw.errors import HomeUnavailable, StorageFull, StoreBusy, StoreError

_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
DISK_FULL_RETRY_S = 30.0
"""How long a host waits before it retries a run parked on a full disk (``PIW_DISK_FULL_RETRY_S``)."""


def disk_full_retry_s() -> float:
    """The back-off after a full disk, in seconds (``PIW_DISK_FULL_RETRY_S``, default 30)."""
    try:
        return max(0.1, float(os.environ.get("PIW_DISK_FULL_RETRY_S", "") or DISK_FULL_RETRY_S))
    except ValueError:
        return DISK_FULL_RETRY_S


_DENIED = {errno.EROFS, errno.EACCES, errno.EPERM}


def storage_error(exc: BaseException, home: Path | None, run_id: str | None = None) -> StoreError | None:
    """The storage problem ``exc`` is, as a one-line error; ``None`` when it is some other error."""
    if isinstance(exc, HomeUnavailable | StorageFull):
        return exc  # already said (e.g. a database opened read-only refusing a write)
    if isinstance(exc, StoreBusy) and exc.__cause__ is not None:
        return storage_error(exc.__cause__, home, run_id)  # what the database itself said
    where = f"run {run_id}" if run_id else (f"PIW_HOME {home}" if home else "PIW_HOME")
    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc)
        if exc.errno in _FULL:
            return StorageFull(_full_message(where, reason, run_id))
        if exc.errno in _DENIED and _inside(exc.filename, home):
            return HomeUnavailable(denied_message(home, reason))
        return None
    if type(exc).__module__ == "sqlite3":  # imported lazily everywhere; never import it just to look
        text = str(exc).lower()
        if "full" in text:
            return StorageFull(_full_message(where, "the database or disk is full", run_id))
        if "readonly" in text or "read-only" in text or "unable to open database" in text:
            return HomeUnavailable(denied_message(home, f"piw.sqlite: {exc}"))
    return None


def _inside(filename: object, home: Path | None) -> bool:
    if home is None:
        return True
    if not isinstance(filename, str | Path):
        return True  # no file named (e.g. fsync): the write was ours
    try:
        return Path(filename).resolve().is_relative_to(home.resolve())
    except OSError:
        return False


def _full_message(where: str, reason: str, run_id: str | None) -> str:
    if run_id:
        return (
            f"No space left while writing {where} ({reason}); the run is parked. Free some space, then continue "
            f"it with 'piw resume {run_id}'."
        )
    return f"No space left while writing {where} ({reason}); free some space and try again."


def denied_message(home: Path | None, reason: str) -> str:
    """``PIW_HOME … cannot be written (reason)``: what a write command says on a read-only home (never "move it
    aside": a read-only database is intact)."""
    return (
        f"PIW_HOME {home or ''} cannot be written ({reason}). Runs cannot be started or changed here; 'piw runs', "
        "'piw inspect', 'piw watch' and 'piw view' still read it. Set PIW_HOME to a writable folder to run."
    ).replace("PIW_HOME  ", "PIW_HOME ")
