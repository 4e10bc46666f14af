"""The ``hosts`` table: who is serving a database, for people to read (``docs/many-machines.md``, "Hosts").

Each ``piw host --database`` registers itself (runner id, host id, version, serve keys, concurrency), refreshes
``seen_at`` every :data:`HEARTBEAT_MS` on the database clock and removes its row when it stops cleanly. The table is
display only: no claim, takeover or refusal ever reads it (recovery is a claim of an expired lease,
``multi-host.md`` §4.1 rule 4). It answers ``piw hosts`` and one question of ``piw runs``: does any live host serve
the version a queued run needs? A host is *live* when it was seen within :data:`STALE_MS`. Nothing secret is
stored: no URL, no password, no environment.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from piw.store.db.holders import holder_host
from piw.store.db.rows import LEASE_MS

HEARTBEAT_MS = min(5_000, max(LEASE_MS // 3, 200))
"""How often a host refreshes its row (5 s; shorter under the tests' short lease)."""
STALE_MS = 3 * HEARTBEAT_MS
"""A host not seen for this long is not live (a row it left behind by dying stays, marked as such)."""


@dataclass(frozen=True)
class HostRow:
    """One host as ``piw hosts`` shows it."""

    runner_id: str
    host_id: str
    machine: str
    piw_version: str
    serve_keys: tuple[str, ...]
    concurrency: int
    started_at: int
    seen_at: int
    seen_ms_ago: int
    runs_held: int

    @property
    def live(self) -> bool:
        return self.seen_ms_ago < STALE_MS

    def to_json(self) -> dict[str, Any]:
        return {
            "runnerId": self.runner_id,
            "hostId": self.host_id,
            "machine": self.machine,
            "piwVersion": self.piw_version,
            "serveKeys": list(self.serve_keys),
            "concurrency": self.concurrency,
            "startedAt": self.started_at,
            "seenAt": self.seen_at,
            "seenMsAgo": self.seen_ms_ago,
            "live": self.live,
            "runsHeld": self.runs_held,
        }


def _autocommit(db: Any) -> Any:
    from piw.store.pg.mirror import autocommit

    return autocommit(db)


class HostRegistration:
    """This host's row: registered at start, refreshed by :meth:`beat`, removed by :meth:`remove`."""

    def __init__(self, db: Any, runner_id: str, concurrency: int, version: str) -> None:
        self.db = db
        self.runner_id = runner_id
        self.concurrency = concurrency
        self.version = version

    def register(self, serve_keys: Collection[str]) -> None:
        with _autocommit(self.db) as conn:
            conn.execute(
                "INSERT INTO hosts (runner_id, hostname, started_at, seen_at, serve_keys, concurrency, "
                "piw_version) VALUES (%s, %s, now_ms(), now_ms(), %s, %s, %s) ON CONFLICT (runner_id) DO UPDATE "
                "SET seen_at = now_ms(), serve_keys = EXCLUDED.serve_keys",
                (
                    self.runner_id,
                    socket.gethostname(),
                    sorted(serve_keys),
                    self.concurrency,
                    self.version,
                ),
            )

    def beat(self, serve_keys: Collection[str]) -> None:
        with _autocommit(self.db) as conn:
            found = conn.execute(
                "UPDATE hosts SET seen_at = now_ms(), serve_keys = %s WHERE runner_id = %s",
                (sorted(serve_keys), self.runner_id),
            )
            if (
                found.rowcount == 0
            ):  # removed by hand, or never registered: display only, so just add it again
                self.register(serve_keys)

    def waiting_refs(self, serve_keys: Collection[str], limit: int = 50) -> list[tuple[str, str]]:
        """``(serve key, workflow_ref)`` of rows still to run (queued, parked, held) whose key is not among
        ``serve_keys``."""
        with _autocommit(self.db) as conn:
            found = conn.execute(
                "SELECT DISTINCT serve_key, workflow_ref FROM run_queue WHERE status IN ('queued', 'parked', "
                "'starting', 'running') AND workflow_ref IS NOT NULL AND NOT (serve_key = ANY(%s)) LIMIT %s",
                (sorted(serve_keys), limit),
            ).fetchall()
        return [(str(key), str(ref)) for key, ref in found]

    def remove(self) -> None:
        with contextlib.suppress(Exception), _autocommit(self.db) as conn:
            conn.execute("DELETE FROM hosts WHERE runner_id = %s", (self.runner_id,))


def list_hosts(db: Any) -> list[HostRow]:
    """Every registered host, live ones first, each with the runs it holds under a live lease now."""
    with _autocommit(db) as conn:
        found = conn.execute(
            "SELECT h.runner_id, h.hostname, h.piw_version, h.serve_keys, h.concurrency, h.started_at, h.seen_at, "
            "now_ms() - h.seen_at, (SELECT count(*) FROM run_queue q WHERE q.runner_id = h.runner_id "
            "  AND q.status IN ('starting', 'running') AND q.claim_expires_at > now_ms()) "
            "FROM hosts h ORDER BY h.seen_at DESC, h.runner_id"
        ).fetchall()
    rows = []
    for runner, machine, version, keys, concurrency, started, seen, ago, held in found:
        host_id = holder_host(str(runner)) or str(runner)
        rows.append(
            HostRow(
                str(runner),
                host_id,
                str(machine or ""),
                str(version or ""),
                tuple(keys or ()),
                int(concurrency or 0),
                int(started or 0),
                int(seen or 0),
                int(ago or 0),
                int(held),
            )
        )
    return sorted(rows, key=lambda row: (not row.live, -row.seen_at))


def unserved(db: Any, run_ids: Iterable[str]) -> set[str]:
    """Of ``run_ids``, the queued (or claimable parked) runs whose serve key no live host serves."""
    wanted = list(run_ids)
    if not wanted:
        return set()
    with _autocommit(db) as conn:
        found = conn.execute(
            "SELECT q.run_id FROM run_queue q WHERE q.run_id = ANY(%s) "
            "AND q.status IN ('queued', 'parked') AND q.park_reason IS NULL AND NOT q.pause_requested "
            "AND NOT EXISTS (SELECT 1 FROM hosts h WHERE h.seen_at > now_ms() - %s "
            "  AND q.serve_key = ANY(h.serve_keys))",
            (wanted, STALE_MS),
        ).fetchall()
    return {str(run_id) for (run_id,) in found}
