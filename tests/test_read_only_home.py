"""A home its owner made read-only (``chmod -R a-w``): readers read it, writers say so in one line, nothing changes.

Issue 26 item 4. The commands run as real ``piw`` processes that respect permission bits even when the tests run as
root (``tests/support/unprivileged.py``: ``setpriv`` drops the capabilities that bypass them). No message may advise
moving aside a database that is merely read-only: that would lose queue rows, requests and decision records.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import PIW_COMMAND, Cli
from tests.support.unprivileged import can_drop_privileges, unprivileged

pytestmark = pytest.mark.skipif(not can_drop_privileges(), reason="needs setpriv to drop root's DAC override")

ASK = """
from pydantic import BaseModel
from piw import checkpoint, compute, define_workflow, edge

class Ok(BaseModel):
    ok: bool

workflow = define_workflow(
    name="ask", start_at="first",
    nodes={"first": compute(lambda ctx: 1), "ask": checkpoint(summary="Go on?", answer=Ok),
           "after": compute(lambda ctx: 2)},
    edges=[edge("first", "ask"), edge("ask", "after")],
)
"""


class Home:
    """A home with a finished, a crashed, a waiting and a queued run, then made read-only."""

    def __init__(self, cli: Cli, runs: dict[str, str], workflow: Path, *, full: bool) -> None:
        self.cli = cli
        self.runs = runs
        self.workflow = workflow
        self.full = full
        """Every command (the other variants try the few that open the database differently)."""

    def piw(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            unprivileged([*PIW_COMMAND, *args]),
            cwd=self.cli.cwd,
            env=self.cli.environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def piw_python(self, source: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            unprivileged([sys.executable, "-c", source]),
            cwd=self.cli.cwd,
            env=self.cli.environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def snapshot(self) -> list[tuple[str, int, int, int]]:
        paths = [self.cli.home, *self.cli.home.rglob("*")]
        return sorted((str(p), p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns) for p in paths)


def _populate(cli: Cli, ask: Path) -> dict[str, str]:
    runs = {"finished": json.loads(cli.process("run", "hello", "--json").stdout)["runId"]}
    before = {p.name for p in (cli.home / "runs").iterdir()}
    assert cli.process("run", "hello", env={"PIW_TEST_KILL_AFTER_APPEND": "3"}).returncode == -9
    (runs["crashed"],) = {p.name for p in (cli.home / "runs").iterdir()} - before
    runs["waiting"] = json.loads(cli.process("run", str(ask), "--json").stdout)["runId"]
    queued = cli.process("run", "hello", "--detach", "--json")
    assert queued.returncode == 0, queued.stderr
    runs["queued"] = json.loads(queued.stdout)["runId"]
    return runs


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, str]]:
    """One home with the four runs, made once and copied for each test (each run is a real ``piw`` process)."""
    root = tmp_path_factory.mktemp("read-only-template")
    ask = root / "ask.workflow.py"
    ask.write_text(ASK, encoding="utf-8")
    (root / "work").mkdir()
    cli = Cli(root / "home", root / "work")
    return cli.home, ask, _populate(cli, ask)


def _make_read_only(home: Path) -> None:
    for path in sorted([home, *home.rglob("*")], key=lambda p: len(p.parts), reverse=True):
        path.chmod(0o500 if path.is_dir() else 0o400)


def _restore(home: Path) -> None:
    for path in [home, *home.rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)


@pytest.fixture(params=["database", "database-without-wal", "no-database"])
def read_only_home(
    request: pytest.FixtureRequest, template: tuple[Path, Path, dict[str, str]], tmp_path: Path
) -> Iterator[Home]:
    source, ask, runs = template
    cli = Cli(tmp_path / "home", tmp_path)
    shutil.copytree(source, cli.home)
    if request.param == "database-without-wal":  # closed cleanly: no -wal/-shm to open it with
        for suffix in ("-wal", "-shm"):
            (cli.home / f"piw.sqlite{suffix}").unlink(missing_ok=True)
    elif request.param == "no-database":
        for path in cli.home.glob("piw.sqlite*"):
            path.unlink()
    _make_read_only(cli.home)
    try:
        yield Home(cli, runs, ask, full=request.param == "database")
    finally:
        _restore(cli.home)


READERS = [
    ("runs",),
    ("runs", "--json"),
    ("runs", "--status", "waiting"),
    ("inspect", "{finished}"),
    ("inspect", "{finished}", "--json"),
    ("inspect", "{crashed}", "--view", "steps"),
    ("inspect", "{waiting}"),
    ("watch", "{finished}", "--once"),
    ("list",),
    ("show", "hello"),
]
FEW_READERS = [("runs",), ("inspect", "{crashed}", "--view", "steps")]


def test_read_commands_work_and_change_nothing(read_only_home: Home) -> None:
    home = read_only_home
    before = home.snapshot()
    for args in READERS if home.full else FEW_READERS:
        argv = [arg.format(**home.runs) for arg in args]
        done = home.piw(*argv)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and "Error" not in done.stderr, (argv, done.stderr)
        assert "move it aside" not in done.stdout + done.stderr
    listed = {row["runId"]: row["status"] for row in json.loads(home.piw("runs", "--json").stdout)}
    assert listed[home.runs["finished"]] == "completed" and listed[home.runs["crashed"]] == "running"
    assert listed[home.runs["waiting"]] == "waiting"
    # 'piw view' needs a terminal; its runs list and one run come from these two calls, in a process of its own.
    view = home.piw_python(
        "from pathlib import Path; from piw.app.reader import open_run; from piw.app.runs import load_rows\n"
        f"home = Path({str(home.cli.home)!r})\n"
        "print(sorted(row.run_id for row in load_rows(home)))\n"
        f"print(open_run(home, {home.runs['finished']!r}).state.status)\n"
    )
    assert view.returncode == 0, view.stderr
    assert view.stdout.splitlines()[-1] == "completed"
    assert all(run_id in view.stdout for run_id in home.runs.values() if run_id != home.runs["queued"])
    assert home.snapshot() == before


WRITERS = [
    ("run", "hello"),
    ("run", "hello", "--detach"),
    ("resume", "{crashed}"),
    ("cancel", "{crashed}"),
    ("pause", "{crashed}"),
    ("answer", "{waiting}", '{{"ok": true}}'),
    ("host", "--once"),
]
FEW_WRITERS = [("run", "hello"), ("cancel", "{crashed}"), ("host", "--once")]


@pytest.mark.parametrize("read_only_home", ["database", "no-database"], indirect=True)
@pytest.mark.long
def test_write_commands_say_the_home_cannot_be_written_and_change_nothing(read_only_home: Home) -> None:
    home = read_only_home
    before = home.snapshot()
    for args in WRITERS if home.full else FEW_WRITERS:
        argv = [arg.format(**home.runs) for arg in args]
        done = home.piw(*argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        lines = done.stderr.splitlines()
        assert len(lines) == 1, (argv, done.stderr)
        (line,) = lines
        assert line.startswith(f"Error: PIW_HOME {home.cli.home} cannot be written"), (argv, line)
        assert "move it aside" not in done.stdout + done.stderr
        assert home.snapshot() == before, argv
