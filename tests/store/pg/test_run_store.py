"""The run store of database mode against a real PostgreSQL: fenced appends, artifacts, outcome-unknown, mirrors.

The queue row is written with plain SQL here (a claim as a claimer leaves it); the queue's own tests cover
claiming. Every assertion reads what a user can observe: the rows, the mirror's bytes, the error raised.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from piw.errors import ClaimLost
from piw.store.db.rows import Claim
from piw.store.pg.connection import PgDatabase
from piw.store.pg.mirror import Mirrors, autocommit
from piw.store.pg.run_store import PgRunStore, PgRunStores
from piw.store.pg.setting import DatabaseSetting
from piw.store.trace import TraceEvent, read_trace
from piw.wire_models import Manifest

RUN = "20260101T000000000Z-demo-0000aaaa"


class Held:
    """The holder's side of a claim as the store sees it: its token and generation, and a fence that passes."""

    def __init__(self, token: str = "tok", generation: int = 1) -> None:
        self.claim = Claim(RUN, token, generation, "test-runner", 0)

    def fence(self) -> None:
        pass


def _claimed_row(db: PgDatabase, *, lease_ms: int = 30_000, token: str = "tok", generation: int = 1) -> None:
    with autocommit(db) as conn:
        conn.execute(
            "INSERT INTO run_queue (run_id, status, serve_key, claim_token, claim_generation, claim_expires_at, "
            "runner_id, created_at, updated_at) VALUES (%s, 'starting', 'k', %s, %s, now_ms() + %s, 'test-runner', "
            "now_ms(), now_ms()) ON CONFLICT (run_id) DO UPDATE SET claim_token = EXCLUDED.claim_token, "
            "claim_generation = EXCLUDED.claim_generation, claim_expires_at = EXCLUDED.claim_expires_at",
            (RUN, token, generation, lease_ms),
        )


def _line(seq: int, type: str = "node_started", **payload: Any) -> bytes:
    return TraceEvent(seq, "2026-01-01T00:00:00.000Z", "node", type, RUN, payload, "step", "a1").encode()


def _store(db: PgDatabase, home: Path) -> tuple[PgRunStore, Mirrors]:
    mirrors = Mirrors.open(db, home)
    manifest = Manifest(
        run_id=RUN,
        workflow_name="demo",
        workflow_source={},
        definition_digest="d",
        started_at="2026-01-01T00:00:00.000Z",
    )
    store = PgRunStores(db, mirrors).create(RUN, {"name": "demo"}, manifest)
    return store, mirrors


def _rows(db: PgDatabase, table: str = "trace_events") -> list[tuple[int, bytes]]:
    with autocommit(db) as conn:
        found = conn.execute(
            f"SELECT seq, line FROM {table} WHERE run_id = %s ORDER BY seq", (RUN,)
        ).fetchall()
    return [(int(seq), bytes(line)) for seq, line in found]


@pytest.fixture
def db(pg_setting: DatabaseSetting) -> PgDatabase:
    return PgDatabase.open(pg_setting)


def test_fenced_appends_store_exact_lines_and_the_mirror_matches(db: PgDatabase, piw_home: Path) -> None:
    _claimed_row(db)
    store, mirrors = _store(db, piw_home)
    store.acquire(Held())
    lines = [_line(seq, value=seq) for seq in range(1, 6)]
    for seq, line in enumerate(lines, 1):
        store.append(line, sync=seq == 3, ride_along=seq != 3)
    store.release()

    assert _rows(db) == [(seq, line.removesuffix(b"\n")) for seq, line in enumerate(lines, 1)]
    assert store.head() == 5
    assert [event.seq for event in store.read_trace().events] == [1, 2, 3, 4, 5]
    bundle = mirrors.sync(RUN)
    assert bundle.trace_path.read_bytes() == b"".join(lines)
    assert oct(bundle.path.stat().st_mode & 0o777) == "0o700"
    assert oct(bundle.trace_path.stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("claim_token = 'other'", "token_changed"),
        ("claim_generation = 2", "generation_changed"),
        ("claim_expires_at = now_ms() - 1", "expired"),
        ("status = 'parked'", "status_changed"),
        ("trace_seq = 7", "seq_conflict"),
    ],
)
def test_an_append_the_fence_refuses_writes_nothing(
    db: PgDatabase, piw_home: Path, change: str, reason: str
) -> None:
    _claimed_row(db)
    store, _ = _store(db, piw_home)
    store.acquire(Held())
    store.append(_line(1))
    with autocommit(db) as conn:
        conn.execute(f"UPDATE run_queue SET {change} WHERE run_id = %s", (RUN,))
    ref = store.put_artifact("x" * 5000)  # named by the refused line: it must go with it
    with pytest.raises(ClaimLost) as lost:
        store.append(_line(2, ref=ref))
    assert lost.value.reason == reason
    assert [seq for seq, _ in _rows(db)] == [1]
    with autocommit(db) as conn:
        assert conn.execute("SELECT count(*) FROM artifacts").fetchone() == (0,)


def test_artifacts_commit_with_the_line_that_names_them(db: PgDatabase, piw_home: Path) -> None:
    _claimed_row(db)
    store, _ = _store(db, piw_home)
    store.acquire(Held())
    ref = store.put_artifact("large " * 2000)
    store.append(_line(1, ref=ref), sync=True)
    store.release()
    shutil.rmtree(piw_home / "pg")  # every mirror gone: rebuilt from the rows, artifacts included
    bundle = Mirrors.open(db, piw_home).sync(RUN)
    assert (bundle.path / str(ref["path"])).read_text() == "large " * 2000
    assert store.get_artifact(ref) == "large " * 2000


def test_session_entries_are_fenced_rows_mirrored_to_the_conversation_file(
    db: PgDatabase, piw_home: Path
) -> None:
    _claimed_row(db)
    store, mirrors = _store(db, piw_home)
    store.acquire(Held())
    session = store.open_session()
    first = session.append({"role": "user", "content": "hi"})
    session.append({"role": "assistant", "content": "hello"})
    store.release()
    assert [seq for seq, _ in _rows(db, "session_entries")] == [1, 2]
    entries = (mirrors.sync(RUN).path / "session" / "entries.ndjson").read_bytes().splitlines()
    assert [line for _, line in _rows(db, "session_entries")] == entries
    assert first.id.encode() in entries[0]


def test_a_commit_whose_reply_is_lost_is_resolved_from_the_row_not_appended_again(
    db: PgDatabase, piw_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _claimed_row(db)
    store, mirrors = _store(db, piw_home)
    store.acquire(Held())
    store.append(_line(1))
    real = psycopg.Connection.execute
    drops = {"after": 1, "before": 0}

    def execute(self: psycopg.Connection[Any], query: Any, params: Any = None, **kw: Any) -> Any:
        if isinstance(query, str) and query.startswith("WITH f AS"):
            if drops["after"]:
                drops["after"] -= 1
                real(self, query, params, **kw)  # it commits, then the reply is lost
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            if drops["before"]:
                drops["before"] -= 1
                raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", execute)
    store.append(_line(2))  # committed, reply lost: resolved as committed
    drops["before"] = 1
    store.append(_line(3))  # never reached the server: sent again
    store.append(_line(4))
    store.release()
    assert [seq for seq, _ in _rows(db)] == [1, 2, 3, 4]
    assert [event.seq for event in read_trace(mirrors.sync(RUN).trace_path).events] == [1, 2, 3, 4]


@pytest.mark.parametrize("damage", ["truncate", "tamper", "delete"])
def test_a_damaged_mirror_is_rebuilt_from_the_rows(db: PgDatabase, piw_home: Path, damage: str) -> None:
    _claimed_row(db)
    store, mirrors = _store(db, piw_home)
    store.acquire(Held())
    for seq in range(1, 21):
        store.append(_line(seq, value="v" * seq))
    store.release()
    bundle = mirrors.sync(RUN)
    good = bundle.trace_path.read_bytes()
    if damage == "truncate":
        os.truncate(bundle.trace_path, len(good) // 2)
    elif damage == "tamper":
        bundle.trace_path.write_bytes(good.replace(b'"value":"vvv"', b'"value":"XXX"'))
    else:
        shutil.rmtree(bundle.path)
    assert mirrors.sync(RUN).trace_path.read_bytes() == good


def test_a_holder_never_waits_for_a_mirror_another_process_keeps(
    db: PgDatabase, piw_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier holder on this host that froze still holds the mirror's lock: the new holder writes its rows
    without the mirror, and the mirror is rebuilt once the lock is free."""
    import piw.store.pg.mirror as mirror_module

    monkeypatch.setattr(mirror_module, "LOCK_WAIT_S", 0.1)
    _claimed_row(db)
    store, mirrors = _store(db, piw_home)
    frozen = mirrors.lock(RUN, wait=True)
    assert frozen is not None
    try:
        store.acquire(Held())
        for seq in range(1, 4):
            store.append(_line(seq))
        store.release()
        assert [seq for seq, _ in _rows(db)] == [1, 2, 3]
    finally:
        os.close(frozen)
    assert len(read_trace(mirrors.sync(RUN).trace_path).events) == 3


def test_ride_along_lines_wait_for_the_next_statement_and_commit_with_it(
    db: PgDatabase, piw_home: Path
) -> None:
    _claimed_row(db)
    store, mirrors = _store(db, piw_home)
    store.acquire(Held())
    held = [_line(seq, value=seq) for seq in (1, 2, 3)]
    for line in held:
        store.append(line, ride_along=True)
    assert _rows(db) == []  # held: no statement yet
    assert store.held_due() is not None
    store.append(_line(4, type="process_started"), sync=True)  # an effect point carries them
    assert [seq for seq, _ in _rows(db)] == [1, 2, 3, 4]
    assert store.held_due() is None
    store.append(_line(5), ride_along=True)
    store.send_held()  # the writer's idle flusher, when no next line comes in time
    assert [seq for seq, _ in _rows(db)] == [1, 2, 3, 4, 5]
    store.append(_line(6), ride_along=True)
    store.sync_required()  # an effect depends on no held line: it rides with the effect's own record
    assert [seq for seq, _ in _rows(db)] == [1, 2, 3, 4, 5]
    store.append(_line(7), ride_along=False)  # an asynchronous line an effect depends on
    store.append(_line(8), ride_along=True)
    store.sync_required()  # now one synchronous statement carries what is held
    assert [seq for seq, _ in _rows(db)] == [1, 2, 3, 4, 5, 6, 7, 8]
    store.release()
    assert mirrors.sync(RUN).trace_path.read_bytes().count(b"\n") == 8


def test_held_lines_the_fence_refuses_are_refused_with_the_line_that_sends_them(
    db: PgDatabase, piw_home: Path
) -> None:
    _claimed_row(db)
    store, _ = _store(db, piw_home)
    store.acquire(Held())
    store.append(_line(1), sync=True)
    store.append(_line(2), ride_along=True)
    with autocommit(db) as conn:
        conn.execute("UPDATE run_queue SET claim_token = 'other' WHERE run_id = %s", (RUN,))
    with pytest.raises(ClaimLost) as lost:
        store.append(_line(3, type="process_started"), sync=True)
    assert lost.value.reason == "token_changed"
    assert [seq for seq, _ in _rows(db)] == [1]
