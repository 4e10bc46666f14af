"""Cross-host wake-ups for readers: coalesced trace notices from writers, ``LISTEN`` plus a poll in readers.

A writer commits rows; a reader on another machine must learn that soon without polling the database hard
(``docs/many-machines.md``, "Watching from another machine"):

- **Writers** (:class:`Notifier`, one thread per process and database) send ``wake('trace', runId)`` (a
  ``pg_notify`` on the schema's ``<schema>_trace`` channel) at most once per :data:`COALESCE_S` per run, and at
  once after a run-scoped event; one statement carries every run due (``… FROM unnest(…)``), off the append path,
  so NOTIFY's commit lock never sits in a fenced append.
- **Readers** (:class:`TraceListener`) keep one direct connection in ``LISTEN <schema>_trace`` and wake on a
  notice for their run, or after :data:`POLL_S` without one: a lost notice, a killed listener connection or a
  PgBouncer in between only cost latency, never an event. A listener whose connection died polls and listens
  again later.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

COALESCE_S = 0.05
"""At most one notice per run per 50 ms (a busy run would otherwise notify on every event)."""
POLL_S = 1.0
"""A reader looks at the run's head at least this often, notice or not."""


class Notifier:
    """Coalesces trace notices of one process (see the module docstring)."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self._due: set[str] = set()
        self._urgent = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def touch(self, run_id: str, *, urgent: bool = False) -> None:
        """A line of ``run_id`` committed; ``urgent``: a run-scoped event, sent without waiting."""
        with self._cond:
            self._due.add(run_id)
            self._urgent = self._urgent or urgent
            self._cond.notify()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="piw-notify", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        sent_at = -COALESCE_S
        while True:
            with self._cond:
                due, self._due, self._urgent = self._next(sent_at)
            self.send(due)
            sent_at = time.monotonic()

    def _next(self, sent_at: float) -> tuple[list[str], set[str], bool]:
        """Wait (holding the condition) until runs are due and the window after the last notice has passed (or an
        urgent event came): the first line after a quiet spell is announced at once, a busy run once per window."""
        while not self._due:
            self._cond.wait()
        while not self._urgent and (left := sent_at + COALESCE_S - time.monotonic()) > 0:
            self._cond.wait(timeout=left)
        return sorted(self._due), set(), False

    def send(self, run_ids: list[str]) -> None:
        from piw.store.pg.mirror import autocommit

        try:
            with autocommit(self.db) as conn:
                conn.execute("SELECT wake('trace', id) FROM unnest(%s::text[]) AS id", (run_ids,))
        except Exception as exc:  # a notice is a hint: readers poll anyway
            log.debug("trace notices not sent: %s", exc)

    def flush(self) -> None:
        """Send what is due now (a process about to exit)."""
        with self._cond:
            due, self._due, self._urgent = sorted(self._due), set(), False
        if due:
            self.send(due)


_NOTIFIERS: dict[int, Notifier] = {}
_LOCK = threading.Lock()


def notifier(db: Any) -> Notifier:
    """The process's notifier for ``db``."""
    with _LOCK:
        found = _NOTIFIERS.get(id(db))
        if found is None or found.db is not db:
            found = _NOTIFIERS[id(db)] = Notifier(db)
            atexit.register(found.flush)  # a run's last notice is not left to the readers' poll
        return found


class TraceListener:
    """Calls ``wake()`` when run ``run_id`` may have new rows: on its notice, and at least every :data:`POLL_S`."""

    def __init__(
        self, url: str, channel: str, run_id: str, wake: Callable[[], None], *, poll_s: float = POLL_S
    ) -> None:
        self.url = url
        self.channel = channel
        """``<schema>_trace`` (``PgDatabase.channel``): channels are database-wide, one set per schema."""
        self.run_id = run_id
        self.wake = wake
        self.poll_s = poll_s
        self.stop = threading.Event()
        self.listening = False
        """Whether a ``LISTEN`` connection is up (``False``: waking by polling only)."""
        self._thread: threading.Thread | None = None
        self._woken = 0.0

    def start(self) -> TraceListener:
        self._thread = threading.Thread(target=self._run, name=f"piw-listen-{self.run_id[-8:]}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _connect(self) -> Any:
        import psycopg
        from psycopg import sql

        conn = psycopg.connect(self.url, autocommit=True, application_name="piw-listen", connect_timeout=5)
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        return conn

    def _run(self) -> None:
        conn: Any = None
        retry_at = 0.0
        while not self.stop.is_set():
            if conn is None and time.monotonic() >= retry_at:
                try:
                    conn = self._connect()
                    self.listening = True
                except Exception as exc:
                    log.debug("LISTEN failed, polling: %s", exc)
                    retry_at = time.monotonic() + 5 * self.poll_s
            if conn is None:
                self.stop.wait(self.poll_s)
                self._wake()
                continue
            try:
                mine = False
                for notice in conn.notifies(timeout=self.poll_s, stop_after=1):
                    mine = notice.payload == self.run_id
                if mine or time.monotonic() - self._woken >= self.poll_s:
                    self._wake()
            except Exception as exc:
                log.debug("LISTEN connection lost, polling: %s", exc)
                self.listening = False
                with contextlib.suppress(Exception):  # (already broken)
                    conn.close()
                conn = None
                retry_at = time.monotonic() + 5 * self.poll_s
                self._wake()
        if conn is not None:
            conn.close()

    def _wake(self) -> None:
        self._woken = time.monotonic()
        if self.stop.is_set():
            return
        try:
            self.wake()
        except Exception as exc:  # a failed sync is tried again on the next wake
            log.debug("run %s: wake failed: %s", self.run_id, exc)
