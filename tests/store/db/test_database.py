"""``piw.sqlite`` (``persistence.md`` §10): pragmas, the five tables, schema checks and file modes."""

from __future__ import annotations

import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from piw.errors import StateSchemaMismatch
from piw.store.db.database import (
    DATABASE_NAME,
    SCHEMA_ID,
    Database,
    close_databases,
    ddl_sha256,
    open_database,
)


@pytest.fixture(autouse=True)
def _close() -> Iterator[None]:
    yield
    close_databases()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_has_the_pragmas_tables_and_schema_info(piw_home: Path) -> None:
    db = open_database(piw_home)
    conn = db.connection()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"runs", "run_queue", "notifications", "human_decisions", "idempotency", "schema_info"} <= tables
    assert conn.execute("SELECT id, schema_id, ddl_sha256 FROM schema_info").fetchall() == [
        (1, SCHEMA_ID, ddl_sha256())
    ]
    queue_columns = {row[1] for row in conn.execute("PRAGMA table_info(run_queue)")}
    wanted = {"claim_token", "claim_generation", "claim_expires_at", "park_reason", "pause_requested"}
    wanted |= {"cancel_requested", "parent_run_id", "origin_session_id", "affinity_runner_id"}
    assert wanted <= queue_columns
    assert db.created


def test_every_thread_gets_its_own_configured_connection(piw_home: Path) -> None:
    db = open_database(piw_home)
    seen: list[tuple[int, str]] = []

    def probe() -> None:
        conn = db.connection()
        seen.append((id(conn), conn.execute("PRAGMA journal_mode").fetchone()[0]))

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    probe()
    assert len({ident for ident, _ in seen}) == 2 and {mode for _, mode in seen} == {"wal"}


def test_database_and_wal_files_are_private(piw_home: Path) -> None:
    db = open_database(piw_home)
    with db.transaction() as conn:
        conn.execute("INSERT INTO idempotency (scope, key, request_sha256) VALUES ('t', 'k', 'x')")
    path = piw_home / DATABASE_NAME
    for suffix in ("", "-wal", "-shm"):
        candidate = Path(f"{path}{suffix}")
        assert candidate.exists(), suffix
        assert _mode(candidate) == 0o600, suffix


def test_a_reopened_database_is_accepted(piw_home: Path) -> None:
    open_database(piw_home)
    close_databases()
    again = open_database(piw_home)
    assert not again.created


def test_a_failed_transaction_rolls_back(piw_home: Path) -> None:
    db = open_database(piw_home)
    with pytest.raises(RuntimeError), db.transaction() as conn:
        conn.execute("INSERT INTO idempotency (scope, key, request_sha256) VALUES ('t', 'k', 'x')")
        raise RuntimeError("boom")
    assert db.query("SELECT count(*) AS n FROM idempotency")[0]["n"] == 0


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all" * 40, b"SQLite format 3\x00" + b"\xff" * 200],
    ids=["garbage", "damaged-header"],
)
def test_a_corrupt_file_raises_schema_mismatch_and_is_left_untouched(piw_home: Path, content: bytes) -> None:
    path = piw_home / DATABASE_NAME
    path.write_bytes(content)
    with pytest.raises(StateSchemaMismatch) as raised:
        Database(path)
    assert path.read_bytes() == content
    message = str(raised.value)
    assert "move it aside" in message and "\n" not in message and str(path) in message


def test_another_schema_raises_schema_mismatch_and_is_left_untouched(piw_home: Path) -> None:
    path = piw_home / DATABASE_NAME
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_info (id INTEGER PRIMARY KEY, schema_id TEXT, ddl_sha256 TEXT)")
    conn.execute("INSERT INTO schema_info VALUES (1, 'piw.sqlite.v0', 'abc')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StateSchemaMismatch, match=r"piw\.sqlite\.v0"):
        Database(path)
    assert path.read_bytes() == before


def test_same_schema_id_with_other_tables_is_a_mismatch(piw_home: Path) -> None:
    path = piw_home / DATABASE_NAME
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_info (id INTEGER PRIMARY KEY, schema_id TEXT, ddl_sha256 TEXT)")
    conn.execute("INSERT INTO schema_info VALUES (1, ?, 'not-our-ddl')", (SCHEMA_ID,))
    conn.commit()
    conn.close()
    with pytest.raises(StateSchemaMismatch, match="another version"):
        Database(path)


def test_foreign_tables_without_schema_info_are_a_mismatch(piw_home: Path) -> None:
    path = piw_home / DATABASE_NAME
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StateSchemaMismatch, match="no schema_info"):
        Database(path)
