"""A database another process holds locked: a visible "busy" line, a bounded wait, then exit 75 (issue 27 item 4b)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.cli import Cli

HOLD = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
conn.execute("COMMIT")
"""


@contextmanager
def locked(database: Path, seconds: float) -> Iterator[subprocess.Popen[str]]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(database), str(seconds)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def _busy_line(cli: Cli, line: str) -> bool:
    return line.startswith(
        f"piw: the database {cli.home / 'piw.sqlite'} is busy (another process holds its lock)"
    )


@pytest.mark.long
def test_a_run_waits_while_the_database_is_busy_then_goes_on(cli: Cli) -> None:
    cli.process("runs")  # the database exists
    with locked(cli.home / "piw.sqlite", 120) as holder:
        run = cli.popen("run", "hello", "--json", env={"PIW_DB_BUSY_WAIT_S": "120"})
        assert run.stderr is not None
        first = run.stderr.readline()  # the busy line comes first, while the lock is held
        assert _busy_line(cli, first), first
        holder.kill()  # the lock goes with it
        stdout, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stderr
    assert json.loads(stdout)["status"] == "completed"
    assert "Traceback" not in stderr


@pytest.mark.long
def test_run_and_host_give_up_with_one_error_and_exit_75(cli: Cli) -> None:
    cli.process("runs")
    env = {"PIW_DB_BUSY_WAIT_S": "2"}
    with locked(cli.home / "piw.sqlite", 60):
        for argv in (("run", "hello"), ("host", "--once")):
            done = cli.process(*argv, env=env)
            assert done.returncode == 75, (argv, done.stderr)
            assert "Traceback" not in done.stderr, done.stderr
            lines = [line for line in done.stderr.splitlines() if not line.startswith(("▶", "✓", "●"))]
            assert len(lines) == 2 and _busy_line(cli, lines[0]), (argv, lines)
            assert re.fullmatch(
                f"Error: The database {re.escape(str(cli.home / 'piw.sqlite'))} stayed busy for [0-9]+ s \\(another "
                "process holds its lock\\); nothing was changed. Try again once that process is done.",
                lines[1],
            ), (argv, lines)
    assert cli.json("runs") == []  # nothing was started
