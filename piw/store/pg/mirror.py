"""Mirrors: the local bundle of a database-mode run, written from its rows as a cache (``docs/many-machines.md``).

In database mode the trace, the conversation and the artifacts of a run are rows in PostgreSQL
(``piw.store.pg.run_store``). Every host keeps a standard bundle per run it reads or runs under
``$PIW_HOME/pg/<database id>/runs/<runId>/`` (0700/0600), so every reader — the views, ``watch``, fold checkpoints,
``piw view`` — reads a bundle exactly as in SQLite mode. A mirror is never the truth:

- :meth:`Mirrors.sync` brings it up to date under a per-run ``flock`` (one syncer per mirror): it fetches the
  rows after what the mirror holds and appends them. What the mirror holds is known from a sidecar
  (``.mirror.json``: the seq, size and mtime piw last left each file at); a file whose size or mtime differ —
  truncated, edited, deleted — is rebuilt from the rows, never repaired or trusted.
- The process that holds the run (:class:`MirrorWriter`) keeps the lock while it writes, appends each line after
  its row commits, and leaves the sidecar when it lets go; a syncer that finds the lock taken reads what that
  writer keeps current.
- Resume reads PostgreSQL, never the mirror (``piw.store.pg.run_store``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.errors import RunNotFound
from piw.store.bundle import Bundle, check_run_id, ensure_private_dir, write_private_file

SIDECAR = ".mirror.json"
LOCK_WAIT_S = 2.0
"""How long a new holder waits for a mirror another process on this host holds (a syncer holds it for a moment)."""
TRACE = "trace.ndjson"
SESSION = "session/entries.ndjson"


@contextlib.contextmanager
def autocommit(db: Any) -> Iterator[Any]:
    """A pooled connection in autocommit mode: one statement, one round trip, no transaction left open."""
    with db.connection() as conn:
        if conn.autocommit:
            yield conn
            return
        conn.rollback()  # (nothing open: the pool hands out idle connections)
        conn.autocommit = True
        try:
            yield conn
        finally:
            conn.autocommit = False


def database_id(db: Any) -> str:
    """The id that keeps two databases' mirrors apart: the server's system identifier, the database, the schema."""
    with autocommit(db) as conn:
        row = conn.execute(
            "SELECT (SELECT system_identifier FROM pg_control_system())::text, current_database()"
        ).fetchone()
    schema = getattr(db.setting, "schema", "piw")
    return hashlib.sha256(f"{row[0]}:{row[1]}:{schema}".encode()).hexdigest()[:16]


@dataclass
class _FileMark:
    """What piw last left one mirror file at: its last seq, and its size and mtime then."""

    seq: int
    size: int
    mtime_ns: int

    def holds(self, path: Path) -> bool:
        try:
            info = path.stat()
        except OSError:
            return False
        return info.st_size == self.size and info.st_mtime_ns == self.mtime_ns

    @classmethod
    def of(cls, path: Path, seq: int) -> _FileMark:
        try:
            info = path.stat()
        except OSError:
            return cls(0, -1, -1)
        return cls(seq, info.st_size, info.st_mtime_ns)


def _read_marks(bundle_dir: Path) -> dict[str, _FileMark]:
    try:
        raw = json.loads((bundle_dir / SIDECAR).read_text(encoding="utf-8"))
        return {name: _FileMark(*raw[name]) for name in (TRACE, SESSION) if name in raw}
    except (OSError, ValueError, TypeError, KeyError):
        return {}


def _write_marks(bundle_dir: Path, marks: dict[str, _FileMark]) -> None:
    data = {name: [mark.seq, mark.size, mark.mtime_ns] for name, mark in marks.items()}
    write_private_file(bundle_dir / SIDECAR, json.dumps(data).encode())


class Mirrors:
    """The mirrors of one database's runs under ``$PIW_HOME/pg/<database id>/``."""

    def __init__(self, db: Any, root: Path) -> None:
        self.db = db
        self.root = root
        self.runs = ensure_private_dir(root / "runs")
        self.locks = ensure_private_dir(root / "locks")
        self.queue: Callable[[], Any] | None = None
        """The database's run queue (set by ``piw.store.place``), for :meth:`queue_row`."""

    @classmethod
    def open(cls, db: Any, home: Path) -> Mirrors:
        return cls(db, ensure_private_dir(home / "pg" / database_id(db)))

    def bundle_dir(self, run_id: str) -> Path:
        return self.runs / check_run_id(run_id)

    # ---- locking -------------------------------------------------------------------------------------------

    def lock(self, run_id: str, *, wait: bool, timeout_s: float | None = None) -> int | None:
        """The mirror's ``flock`` (an fd to close to let go), or ``None`` when another process holds it and
        ``wait`` is false, or still holds it after ``timeout_s``."""
        fd = os.open(self.locks / f"{check_run_id(run_id)}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait and deadline is None else fcntl.LOCK_NB))
                return fd
            except BlockingIOError:
                if not wait or (deadline is not None and time.monotonic() >= deadline):
                    os.close(fd)
                    return None
                time.sleep(0.02)

    # ---- syncing ---------------------------------------------------------------------------------------------

    def queue_row(self, run_id: str) -> Any:
        """The run's queue row (``None`` without one), for viewers asking who runs it."""
        return None if self.queue is None else self.queue().get(run_id)

    def run_ids(self) -> list[str]:
        with autocommit(self.db) as conn:
            rows = conn.execute("SELECT run_id FROM run_bundles ORDER BY run_id DESC").fetchall()
        return [row[0] for row in rows]

    def refresh(self, limit: int) -> int:
        """Bring the mirrors of the newest ``limit`` runs up to date, syncing only those whose heads moved past
        what their mirror holds (one query for all of them); how many were synced. Mirrors of runs the database
        no longer has (removed by ``piw gc``/``piw rm`` on any host) are dropped first."""
        from piw.store.pg.retention import prune_mirrors

        prune_mirrors(self.db, self.runs)
        with autocommit(self.db) as conn:
            heads = conn.execute(
                "SELECT q.run_id, q.trace_seq, q.session_seq FROM run_queue q JOIN run_bundles b USING (run_id) "
                "ORDER BY q.run_id DESC LIMIT %s",
                (limit,),
            ).fetchall()
        synced = 0
        for run_id, trace_seq, session_seq in heads:
            path = self.runs / run_id
            marks = _read_marks(path)
            current = all(
                (mark := marks.get(name)) is not None and mark.seq == seq and mark.holds(path / name)
                for name, seq in ((TRACE, trace_seq), (SESSION, session_seq))
            )
            if not current:
                self.sync(run_id)
                synced += 1
        return synced

    def sync(self, run_id: str) -> Bundle:
        """The run's mirror, up to date with its committed rows (``RunNotFound`` when the database has none).

        When another process holds the mirror (the run's writer on this host, or a syncer) its lock says so and
        the mirror is read as that process keeps it."""
        fd = self.lock(run_id, wait=False)
        if fd is None:
            path = self.bundle_dir(run_id)
            if (path / "workflow.json").is_file():
                return Bundle(run_id, path)
            fd = self.lock(run_id, wait=True)  # being created by its syncer: wait for the first pass
        assert fd is not None
        try:
            return self.sync_locked(run_id)
        finally:
            os.close(fd)

    def sync_locked(self, run_id: str) -> Bundle:
        """:meth:`sync` for a caller that holds the mirror's lock."""
        path = self.bundle_dir(run_id)
        with autocommit(self.db) as conn:
            if not (path / "workflow.json").is_file() or not (path / "manifest.json").is_file():
                found = conn.execute(
                    "SELECT workflow_json, manifest_json FROM run_bundles WHERE run_id = %s", (run_id,)
                ).fetchone()
                if found is None:
                    raise RunNotFound(f"No run {run_id!r} in the database; list runs with 'piw runs'.")
                ensure_private_dir(path)
                ensure_private_dir(path / "session")
                write_private_file(path / "workflow.json", bytes(found[0]))
                write_private_file(path / "manifest.json", bytes(found[1]))
            marks = _read_marks(path)
            fetched = self._sync_lines(conn, run_id, path, marks, TRACE, "trace_events")
            self._sync_lines(conn, run_id, path, marks, SESSION, "session_entries")
            if fetched:
                self._sync_artifacts(conn, run_id, path)
        _write_marks(path, marks)
        return Bundle(run_id, path)

    def _sync_lines(
        self, conn: Any, run_id: str, path: Path, marks: dict[str, _FileMark], name: str, table: str
    ) -> bool:
        """Append the rows after the file's mark (all of them into a new file when the mark does not hold)."""
        file = path / name
        mark = marks.get(name)
        if mark is None or not mark.holds(file):
            mark = None  # missing, truncated, edited: rebuilt from the rows, never trusted
        after = mark.seq if mark is not None else 0
        rows = conn.execute(
            f"SELECT seq, line FROM {table} WHERE run_id = %s AND seq > %s ORDER BY seq", (run_id, after)
        ).fetchall()
        if mark is not None and not rows:
            return False
        data = b"".join(bytes(line) + b"\n" for _, line in rows)
        last = rows[-1][0] if rows else after
        if mark is None:
            _replace(file, data)
        else:
            with open(file, "ab") as handle:
                handle.write(data)
        marks[name] = _FileMark.of(file, last)
        return True

    def _sync_artifacts(self, conn: Any, run_id: str, path: Path) -> None:
        folder = path / "artifacts"
        have = {item.name for item in folder.iterdir()} if folder.is_dir() else set()
        names = conn.execute("SELECT sha256 FROM artifacts WHERE run_id = %s", (run_id,)).fetchall()
        missing = [sha for (sha,) in names if f"sha256-{sha}.txt" not in have]
        if not missing:
            return
        ensure_private_dir(folder)
        for sha, data in conn.execute(
            "SELECT sha256, bytes FROM artifacts WHERE run_id = %s AND sha256 = ANY(%s)", (run_id, missing)
        ).fetchall():
            write_private_file(folder / f"sha256-{sha}.txt", bytes(data))

    def fetch_artifact(self, run_id: str, sha256: str) -> bool:
        """Write one artifact's mirror file again from its row (a mirror file lost or damaged); whether it exists."""
        with autocommit(self.db) as conn:
            found = conn.execute(
                "SELECT bytes FROM artifacts WHERE run_id = %s AND sha256 = %s", (run_id, sha256)
            ).fetchone()
        if found is None:
            return False
        folder = ensure_private_dir(self.bundle_dir(run_id) / "artifacts")
        write_private_file(folder / f"sha256-{sha256}.txt", bytes(found[0]))
        return True

    def discard(self, run_id: str) -> None:
        shutil.rmtree(self.bundle_dir(run_id), ignore_errors=True)


def _replace(file: Path, data: bytes) -> None:
    """Write ``file`` anew (a new inode: a follower of the old file sees a rewrite, not a torn append)."""
    ensure_private_dir(file.parent)
    fd, temp = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, file)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


class MirrorWriter:
    """The holder's side of a mirror: the lock for as long as it writes the run, and a line after each commit.

    :meth:`open` syncs the mirror to the committed rows first, so the lines the holder appends follow on; lines
    are written without fsync (the row is the commit). :meth:`close` leaves the sidecar and the lock."""

    def __init__(self, mirrors: Mirrors, run_id: str) -> None:
        self.mirrors = mirrors
        self.run_id = run_id
        self.path = mirrors.bundle_dir(run_id)
        self._lock: int | None = None
        self._fds: dict[str, int] = {}
        self._seqs: dict[str, int] = {}

    def open(self, *, create: bool = False) -> MirrorWriter:
        """Take the mirror. A mirror another process still holds (an earlier holder on this host, frozen or not
        yet gone) is left to it: this writer then writes no mirror lines, and readers rebuild it from the rows."""
        if self._lock is None:
            self._lock = self.mirrors.lock(self.run_id, wait=True, timeout_s=LOCK_WAIT_S)
            if self._lock is None:
                return self
            try:
                if not create:
                    self.mirrors.sync_locked(self.run_id)
                marks = _read_marks(self.path)
                for name in (TRACE, SESSION):
                    mark = marks.get(name)
                    self._seqs[name] = mark.seq if mark is not None and mark.holds(self.path / name) else 0
            except BaseException:
                self.close()
                raise
        return self

    def append(self, name: str, seq: int, line: bytes) -> None:
        """Write one committed line (``name``: the trace or the conversation) after its predecessor."""
        if self._lock is None:
            return
        if self._seqs.get(name, 0) != seq - 1:
            self.mirrors.sync_locked(self.run_id)  # the mirror fell behind (a write failed): from the rows
            self._reopen()
            return
        fd = self._fds.get(name)
        if fd is None:
            target = self.path / name
            ensure_private_dir(target.parent)
            fd = self._fds[name] = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        data = line + b"\n"
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        self._seqs[name] = seq

    def _reopen(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        marks = _read_marks(self.path)
        for name in (TRACE, SESSION):
            mark = marks.get(name)
            self._seqs[name] = mark.seq if mark is not None else 0

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._lock is None:
            return
        try:
            if self.path.is_dir():
                _write_marks(
                    self.path, {name: _FileMark.of(self.path / name, seq) for name, seq in self._seqs.items()}
                )
        except OSError:
            pass  # a cache: the next sync rebuilds what it cannot vouch for
        finally:
            os.close(self._lock)
            self._lock = None
