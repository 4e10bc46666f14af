"""An unwritable home is an error, not a traceback; a full disk parks the run, which resumes once there is space.

Real filesystems where the machine allows it: a read-only bind mount of a real home and a small tmpfs that fills
up (both need root and mount(8); without them the mount cases are skipped, and the read-only case falls back to
permission bits for a non-root user).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.disks import CAN_MOUNT, FILL, mount, unmount
from tests.support.runs import WorkflowMaker


@contextlib.contextmanager
def read_only(home: Path, tmp_path: Path) -> Iterator[Path]:
    """``home`` as a read-only folder: a read-only bind mount (root), or permission bits (anyone else)."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [home, *home.rglob("*")]}
        for path in modes:
            path.chmod(0o500 if path.is_dir() else 0o400)
        try:
            yield home
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    view = tmp_path / "read-only-home"
    view.mkdir()
    if not CAN_MOUNT or not mount("--bind", str(home), str(view)):
        pytest.skip("needs a read-only bind mount (mount --bind)")
    try:
        if not mount("-o", "remount,bind,ro", str(view)):
            pytest.skip("cannot remount read-only")
        yield view
    finally:
        unmount(view)


@pytest.fixture
def finished_and_crashed(cli: Cli, make_workflow: WorkflowMaker) -> tuple[str, str]:
    path = make_workflow("two", "from piw import compute, define_workflow, edge\n"
                         "workflow = define_workflow(name='two', start_at='a', nodes={'a': compute(1), "
                         "'b': compute(2)}, edges=[edge('a', 'b')])\n")  # fmt: skip
    finished = json.loads(cli("run", str(path), "--json").stdout)["runId"]
    assert cli.process("run", str(path), env={"PIW_TEST_KILL_AFTER_APPEND": "3"}).returncode == -9
    crashed = next(p.name for p in (cli.home / "runs").iterdir() if p.name != finished)
    return finished, crashed


READERS = [
    ("runs",),
    ("runs", "--json"),
    ("inspect", "{finished}"),
    ("inspect", "{finished}", "--json"),
    ("inspect", "{crashed}", "--view", "steps"),
    ("inspect", "{crashed}", "--view", "trace"),
    ("watch", "{finished}", "--once"),
    ("list",),
]


@pytest.mark.parametrize("database", ["kept", "missing"])
def test_read_only_commands_work_on_a_read_only_home(
    database: str, cli: Cli, finished_and_crashed: tuple[str, str], tmp_path: Path
) -> None:
    finished, crashed = finished_and_crashed
    if database == "missing":  # nothing to read the index from: listing folds the bundles instead
        for path in cli.home.glob("piw.sqlite*"):
            path.unlink()
    with read_only(cli.home, tmp_path) as home:
        before = sorted((str(p), p.stat().st_mtime_ns) for p in home.rglob("*"))
        env = {"PIW_HOME": str(home)}
        for args in READERS:
            argv = [arg.format(finished=finished, crashed=crashed) for arg in args]
            done = cli(*argv, env=env)
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr and "Error" not in done.stderr, (argv, done.stderr)
        rows = {row["runId"]: row for row in cli.json("runs", env=env)}
        assert rows[finished]["status"] == "completed" and rows[crashed]["status"] == "running"
        # 'piw view' needs a terminal; what it reads (its runs list and a run) comes from these two calls.
        from piw.app.reader import open_run
        from piw.app.runs import load_rows

        assert {row.run_id for row in load_rows(home)} == {finished, crashed}
        assert open_run(home, finished).state.status == "completed"
        assert sorted((str(p), p.stat().st_mtime_ns) for p in home.rglob("*")) == before  # nothing written


def test_writers_on_a_read_only_home_say_so_in_one_line(
    cli: Cli, finished_and_crashed: tuple[str, str], tmp_path: Path
) -> None:
    _, crashed = finished_and_crashed
    with read_only(cli.home, tmp_path) as home:
        env = {"PIW_HOME": str(home)}
        for argv in (("run", "hello"), ("resume", crashed), ("cancel", crashed), ("pause", crashed)):
            done = cli(*argv, env=env)
            assert done.returncode == 2, (argv, done.stdout, done.stderr)
            assert done.stderr.startswith("Error: PIW_HOME ") and len(done.stderr.splitlines()) == 1, (
                done.stderr
            )
            assert "cannot be written" in done.stderr and "piw runs" in done.stderr


def test_a_home_that_cannot_be_created_is_one_error_line(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for argv in (("runs",), ("run", "hello"), ("inspect", "latest")):
        done = cli(*argv, env={"PIW_HOME": str(blocker / "home")})
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr == f"Error: PIW_HOME {blocker / 'home'} cannot be created (Not a directory); set " \
                              "PIW_HOME to a folder you can write, or create it.\n"  # fmt: skip


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root and mount(8) for a small tmpfs")
def test_a_full_disk_parks_the_run_and_it_resumes_once_there_is_space(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    if not mount("-t", "tmpfs", "-o", "size=1500k", "tmpfs", str(disk)):
        pytest.skip("cannot mount a tmpfs")
    try:
        path = make_workflow("fill", FILL)
        log = tmp_path / "effects.log"
        env = {"PIW_HOME": str(disk / "home")}
        done = cli("run", str(path), "--input", json.dumps({"log": str(log)}), env=env)
        assert done.returncode == 75, (done.stdout[-500:], done.stderr)
        (line,) = done.stderr.splitlines()
        run_id = next(p.name for p in (disk / "home" / "runs").iterdir() if not p.name.startswith("."))
        assert line == (
            f"Error: No space left while writing run {run_id} (No space left on device); the run is parked. "
            f"Free some space, then continue it with 'piw resume {run_id}'."
        )
        (row,) = cli.json("runs", env=env)
        assert row["runId"] == run_id and row["status"] == "running"
        assert (
            "running (parked: disk full)" in cli("runs", env=env).stdout
        )  # a host retries it (docs/detached.md)
        assert not log.exists()  # the action after the blobs never ran
        still_full = cli("resume", run_id, env=env)
        # still full: refused with the same exit code, whichever write (the database's or the trace's) hits it first
        assert still_full.returncode == 75 and "No space left" in still_full.stderr

        assert mount("-o", "remount,size=20m", str(disk))  # space again
        resumed = cli("resume", run_id, "--json", env=env)
        assert resumed.returncode == 0, resumed.stderr
        assert json.loads(resumed.stdout)["status"] == "completed"
        assert log.read_text() == "act\n"  # exactly once
        trace = (disk / "home" / "runs" / run_id / "trace.ndjson").read_bytes()
        assert trace.endswith(b"\n") and all(json.loads(x) for x in trace.splitlines())  # no tear left behind
    finally:
        unmount(disk)
