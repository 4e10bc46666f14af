"""A damaged ``runs`` table is rebuilt from the bundles, in one line, never a traceback (issue 27 item 4a)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from tests.support.cli import Cli


def _two_runs(cli: Cli) -> set[str]:
    return {json.loads(cli("run", "hello", "--json").stdout)["runId"] for _ in range(2)}


def _listed(cli: Cli) -> set[str]:
    return {row["runId"] for row in cli.json("runs")}


def test_a_dropped_runs_table_is_rebuilt_and_said_so(cli: Cli) -> None:
    runs = _two_runs(cli)
    with sqlite3.connect(cli.home / "piw.sqlite") as conn:
        conn.execute("DROP TABLE runs")
    done = cli("runs")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.splitlines() == [
        f"piw: the runs index in {cli.home / 'piw.sqlite'} was damaged (no such table: runs); rebuilt it from the "
        "2 run bundles."
    ]
    assert all(run_id in done.stdout for run_id in runs)
    again = cli("runs", "--json")
    assert (
        again.stderr == "" and {row["runId"] for row in json.loads(again.stdout)} == runs
    )  # rebuilt for good


def _break_runs_pages(database: Path) -> None:
    with sqlite3.connect(database) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    with database.open("r+b") as handle:
        handle.seek((root - 1) * size)
        handle.write(b"\xde\xad" * (size // 2))


def test_a_malformed_runs_table_still_lists_every_run_from_the_bundles(cli: Cli) -> None:
    runs = _two_runs(cli)
    _break_runs_pages(cli.home / "piw.sqlite")
    done = cli("runs", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert {row["runId"] for row in json.loads(done.stdout)} == runs
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"piw: the runs index in {cli.home / 'piw.sqlite'} is damaged (database disk image is"
    )
    assert line.endswith("listing the 2 runs from their bundles, which are intact.")
    later = cli("run", "hello", "--json")  # the queue still works; the run is listed from its bundle
    assert later.returncode == 0, later.stderr
    assert json.loads(later.stdout)["runId"] in _listed(cli)
