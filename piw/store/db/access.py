"""May this process write ``piw.sqlite``? A home its owner made read-only is read, never "moved aside".

A database that cannot be written is intact: it holds queue rows, requests and decision records that no bundle
repeats. So a read-only ``piw.sqlite`` (permission bits, a read-only filesystem) is opened with ``mode=ro`` and
read as it is, and every write to it fails with one ``HomeUnavailable`` line that says the home cannot be
written (``docs/guarantees.md``, "A home that cannot be written"). Only a file that is not a piw database at all
is reported as one.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from piw.errors import HomeUnavailable

READ_ONLY_REASON = "piw.sqlite is read-only for this user"


def may_write(path: Path) -> bool:
    """Whether this process may write the database at ``path``: its folder (a new file, the ``-wal``/``-shm``
    companions) and each of the three files that exists. ``access(2)`` also says no on a read-only filesystem."""
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return False
    for suffix in ("", "-wal", "-shm"):
        name = f"{path}{suffix}"
        if os.path.exists(name) and not os.access(name, os.W_OK):
            return False
    return True


def unwritable(path: Path, reason: str = READ_ONLY_REASON) -> HomeUnavailable:
    """The one line a write to a read-only home gives (``PIW_HOME … cannot be written …``)."""
    from piw.store.storage import denied_message

    return HomeUnavailable(denied_message(path.parent, reason))


def is_unwritable(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused because the file cannot be written or opened, not because it is damaged."""
    text = str(exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text


def connect_read_only(
    path: Path, timeout: float, factory: type[sqlite3.Connection] = sqlite3.Connection
) -> sqlite3.Connection:
    """A connection that never writes: ``mode=ro`` (no file is created or changed) and ``query_only``."""
    conn = sqlite3.connect(
        f"file:{path}?mode=ro",
        uri=True,
        isolation_level=None,
        timeout=timeout,
        check_same_thread=False,
        factory=factory,
    )
    conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    conn.execute("PRAGMA query_only=1")
    return conn
