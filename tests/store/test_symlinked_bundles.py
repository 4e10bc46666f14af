"""A run bundle that is, or holds, a symbolic link is refused by every command that writes (issue 27 item 5).

``piw cancel`` followed a run folder that was a symbolic link and wrote its ``run_cancelled`` line outside
``PIW_HOME``. Now every writer (cancel, pause, resume, answer, decide, fork, a host claiming the run) refuses with
one line naming the link, and neither the linked target nor the home's bundle or run queue changes.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

ASK = """
from piw import checkpoint, compute, define_workflow, edge

workflow = define_workflow(
    name="ask",
    start_at="first",
    nodes={
        "first": compute(lambda ctx: {"word": "one"}),
        "ask": checkpoint(summary="Go on?"),
        "after": compute(lambda ctx: {"done": True}),
    },
    edges=[edge("first", "ask"), edge("ask", "after")],
)
"""

GATE = """
from piw import compute, define_workflow, edge, human_decision, switch

workflow = define_workflow(
    name="gate",
    start_at="first",
    nodes={
        "first": compute(lambda ctx: {"word": "one"}),
        "gate": human_decision("ops", ["go", "stop"], "Go on?"),
        "go": compute(lambda ctx: {"went": True}),
        "stop": compute(lambda ctx: {"stopped": True}),
    },
    edges=[edge("first", "gate"), switch("gate", on="$.choice", cases={"go": "go", "stop": "stop"})],
)
"""

FAILS = """
from piw import compute, define_workflow, edge

def boom(ctx):
    raise RuntimeError("boom")

workflow = define_workflow(
    name="fails",
    start_at="first",
    nodes={"first": compute(lambda ctx: {"word": "one"}), "second": compute(boom)},
    edges=[edge("first", "second")],
)
"""


def _tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``folder`` (links not followed) with its bytes and modification time."""
    found: dict[str, tuple[bytes, int]] = {}
    for root, _, files in os.walk(folder):
        for name in files:
            path = Path(root, name)
            if not path.is_symlink():
                found[str(path.relative_to(folder))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return found


def _queue(home: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(home / "piw.sqlite") as db:
        return sorted(db.execute("SELECT * FROM run_queue"))


def _start(cli: Cli, make_workflow: WorkflowMaker, source: str) -> str:
    done = cli("run", str(make_workflow("flow", source)))
    ids = sorted(p.name for p in (cli.home / "runs").iterdir() if not p.name.startswith("."))
    assert len(ids) == 1, done.stdout + done.stderr
    return ids[0]


def _link_bundle(home: Path, run_id: str, outside: Path) -> Path:
    """Move the bundle out of ``PIW_HOME`` and leave a symbolic link in its place."""
    target = outside / run_id
    shutil.move(home / "runs" / run_id, target)
    (home / "runs" / run_id).symlink_to(target, target_is_directory=True)
    return home / "runs" / run_id


def _link_file(home: Path, run_id: str, outside: Path, name: str) -> Path:
    """Move one file of the bundle out of ``PIW_HOME`` and link it back."""
    inside = home / "runs" / run_id / name
    target = outside / name.replace("/", "-")
    shutil.move(inside, target)
    inside.symlink_to(target)
    return inside


COMMANDS = {
    "cancel": (ASK, lambda run_id: ["cancel", run_id]),
    "pause": (FAILS, lambda run_id: ["pause", run_id]),
    "resume": (FAILS, lambda run_id: ["resume", run_id]),
    "answer": (ASK, lambda run_id: ["answer", run_id, "--json", "{}"]),
    "decide": (GATE, lambda run_id: ["decide", run_id, "go"]),
    "fork": (FAILS, lambda run_id: ["fork", run_id, "--from", "second"]),
}


@pytest.mark.parametrize("linked", ["bundle", "trace.ndjson", "state.json", "session/entries.ndjson"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_linked_bundle_is_refused_and_nothing_is_written(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path, command: str, linked: str
) -> None:
    source, args = COMMANDS[command]
    run_id = _start(cli, make_workflow, source)
    outside = tmp_path / "outside"
    outside.mkdir()
    if linked == "bundle":
        link = _link_bundle(cli.home, run_id, outside)
    else:
        link = _link_file(cli.home, run_id, outside, linked)
    before = (_tree(outside), _tree(cli.home / "runs"), _queue(cli.home))
    done = cli(*args(run_id))
    assert done.returncode != 0, done.stdout
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and str(link) in lines[0] and "symbolic link" in lines[0], done.stderr
    assert (_tree(outside), _tree(cli.home / "runs"), _queue(cli.home)) == before


def test_a_host_refuses_a_queued_run_whose_bundle_is_linked(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    queued = cli("run", str(make_workflow("flow", ASK)), "--detach")
    assert queued.returncode == 0, queued.stderr
    run_id = next(p.name for p in (cli.home / "runs").iterdir() if not p.name.startswith("."))
    outside = tmp_path / "outside"
    outside.mkdir()
    _link_bundle(cli.home, run_id, outside)
    before = _tree(outside)
    host = cli.process("host", "--once", timeout=60)
    assert "symbolic link" in host.stdout, host.stdout + host.stderr
    assert _tree(outside) == before
    with sqlite3.connect(cli.home / "piw.sqlite") as db:
        assert [row[0] for row in db.execute("SELECT park_reason FROM run_queue")] == ["bundle_linked"]


def test_reading_commands_name_the_link_too(cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path) -> None:
    run_id = _start(cli, make_workflow, ASK)
    outside = tmp_path / "outside"
    outside.mkdir()
    link = _link_bundle(cli.home, run_id, outside)
    done = cli("inspect", run_id)
    assert done.returncode != 0 and str(link) in done.stderr
    digest = hashlib.sha256(repr(_tree(outside)).encode()).hexdigest()
    assert cli("runs").returncode == 0  # the list still works
    assert hashlib.sha256(repr(_tree(outside)).encode()).hexdigest() == digest
