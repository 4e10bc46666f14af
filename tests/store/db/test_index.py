"""The runs index in ``piw.sqlite`` (``persistence.md`` §10.1, §12 test 12) and a damaged database, via the CLI."""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from piw.store.db.index import from_ms, to_ms
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

QUICK = """
from piw import compute, define_workflow

workflow = define_workflow(name="quick", start_at="a", nodes={"a": compute(lambda ctx: {"n": 1})})
"""


def index_rows(home: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(home / "piw.sqlite")
    try:
        return sorted(conn.execute("SELECT * FROM runs").fetchall())
    finally:
        conn.close()


def start(cli: Cli, flow: Path, *args: str) -> str:
    done = cli("run", str(flow), "--json", *args)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["runId"])


def test_the_writer_indexes_its_run_and_a_rebuild_gives_identical_rows(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("quick", QUICK)
    ids = [start(cli, flow, "--title", f"run {n}") for n in range(3)]
    rows = index_rows(piw_home)
    assert [row[0] for row in rows] == sorted(ids)
    assert {row[3] for row in rows} == {"completed"}  # status, written by each run's writer
    listed = cli.json("runs")
    assert [row["runId"] for row in listed] == sorted(ids, reverse=True)
    assert listed[0]["usage"] is None  # no model requests

    from piw.store.db.database import close_databases
    from piw.store.db.index import rebuild_run_index

    assert rebuild_run_index(piw_home) == 3
    close_databases()
    assert index_rows(piw_home) == rows


def test_the_index_follows_bundles_added_and_removed_behind_its_back(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("quick", QUICK)
    first, second = start(cli, flow), start(cli, flow)
    shutil.rmtree(piw_home / "runs" / first)
    copy = second[:-8] + "0000beef"
    shutil.copytree(piw_home / "runs" / second, piw_home / "runs" / copy)
    # The copy's files still name the original run id; the index lists what the copied bundle's fold says.
    listed = {row["runId"] for row in cli.json("runs")}
    assert first not in listed and second in listed
    assert first not in {row[0] for row in index_rows(piw_home)}


def test_a_corrupt_database_is_refused_untouched_and_the_index_is_rebuilt_after_moving_it_aside(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("quick", QUICK)
    run_id = start(cli, flow)
    database = piw_home / "piw.sqlite"
    for suffix in ("-wal", "-shm"):
        Path(f"{database}{suffix}").unlink(missing_ok=True)
    database.write_bytes(b"definitely not sqlite" * 50)
    before = database.read_bytes()
    for command in (("runs",), ("run", str(flow)), ("cancel", run_id)):
        done = cli(*command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and "move it aside" in lines[0], done.stderr
        assert database.read_bytes() == before
    assert [p.name for p in (piw_home / "runs").iterdir()] == [run_id]  # the refused run left nothing
    database.rename(piw_home / "piw.sqlite.bak")
    listed = cli.json("runs")
    assert [row["runId"] for row in listed] == [run_id] and listed[0]["status"] == "completed"


def test_a_database_of_another_schema_is_refused(cli: Cli, piw_home: Path) -> None:
    conn = sqlite3.connect(piw_home / "piw.sqlite")
    conn.execute("CREATE TABLE schema_info (id INTEGER PRIMARY KEY, schema_id TEXT, ddl_sha256 TEXT)")
    conn.execute("INSERT INTO schema_info VALUES (1, 'piw.sqlite.v9', 'x')")
    conn.commit()
    conn.close()
    done = cli("runs")
    assert done.returncode == 2 and "piw.sqlite.v9" in done.stderr and "move it aside" in done.stderr


def test_database_files_are_private_after_a_run(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    start(cli, make_workflow("quick", QUICK))
    for path in piw_home.glob("piw.sqlite*"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(piw_home.stat().st_mode) == 0o700


LOOP = """
from piw import compute, define_workflow, edge

workflow = define_workflow(name="loop", start_at="s0", nodes={
    f"s{i}": compute(lambda ctx: {"n": 1}) for i in range(6)
}, edges=[edge(f"s{i}", f"s{i + 1}") for i in range(5)])
"""


def _row_seq(home: Path, run_id: str) -> int:
    conn = sqlite3.connect(home / "piw.sqlite")
    try:
        return int(conn.execute("SELECT trace_seq FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0])
    finally:
        conn.close()


def _run_observing(
    monkeypatch: Any, make_workflow: WorkflowMaker, piw_home: Path, observe: Any, index_interval: float
) -> Any:
    """A six-step run whose state.json is written only where it must be (start, end); ``observe(event, state)``
    runs after each committed ``node_finished``."""
    from piw.run.runner import ForegroundOptions, start_run
    from piw.store import writer

    monkeypatch.setattr(writer, "STATE_CACHE_INTERVAL_S", 1e6)
    monkeypatch.setattr(writer, "INDEX_INTERVAL_S", index_interval)

    def listener(event: Any, state: Any) -> None:
        if event.type == "node_finished":
            observe(event, state)

    flow = make_workflow("loop", LOOP)
    return start_run(
        str(flow), piw_home, {}, None, ForegroundOptions(listeners=[listener], record_origin=False)
    )


def test_the_writer_upserts_its_row_on_its_own_cadence_not_only_with_state_json(
    monkeypatch: Any, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    """On a long run state.json is rewritten rarely (its cost grows with the run); the index row still follows."""
    seen: list[tuple[int, int]] = []
    _run_observing(
        monkeypatch, make_workflow, piw_home,
        lambda event, state: seen.append((event.seq, _row_seq(piw_home, state.run_id))), index_interval=0.0,
    )  # fmt: skip
    assert len(seen) == 6 and all(row == seq for seq, row in seen), seen


def test_a_running_run_with_a_live_writer_is_listed_from_its_row_not_refolded(
    monkeypatch: Any, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    """Refolding a long running run on every listing cost seconds and hundreds of MB; its writer keeps the row."""
    from piw.store.db.index import indexed_rows

    listed: list[tuple[int, int]] = []
    assert (
        indexed_rows(piw_home) == []
    )  # the database exists before the run (a new one is rebuilt when first read)

    def observe(event: Any, state: Any) -> None:
        row = next(row for row in indexed_rows(piw_home) if row.run_id == state.run_id)
        listed.append((event.seq, row.trace_seq))

    state = _run_observing(monkeypatch, make_workflow, piw_home, observe, index_interval=1e6)
    # the writer's row is from the run's start (its cadence is out of reach here), and it is what is listed
    assert [row for _, row in listed] == [1] * 6 and listed[-1][0] > 1
    final = next(row for row in indexed_rows(piw_home) if row.run_id == state.run_id)
    assert (final.status, final.trace_seq) == ("completed", state.trace_seq)  # no live writer: refolded


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_index_times_read_back_as_the_persisted_timestamps(value: int) -> None:
    """A row's epoch milliseconds come back as the trace writes them (``2026-12-01T10:35:34.123Z``), and back."""
    shown = from_ms(value)
    expected = (
        datetime.fromtimestamp(value / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value % 1000:03d}Z"
    )
    assert shown == expected
    assert to_ms(shown) == value
