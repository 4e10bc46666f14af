"""Pause, cancel and resume from another terminal (``persistence.md`` §8 table, §12 test 7), with real processes.

Each test starts ``piw`` in a subprocess, acts on the run from a second ``piw`` process, and checks what a user
can see: exit codes, one-line messages, the trace, and the run's row in the real ``piw.sqlite``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

GATED = """
from pathlib import Path
from piw import action, compute, define_workflow, edge

GATE = Path({gate!r})

def wait_for_gate(ctx):
    Path(str(GATE) + ".started").write_text("x")
    while not GATE.exists():
        ctx.sleep(0.05)
    return {{"opened": True}}

workflow = define_workflow(
    name="gated",
    start_at="first",
    nodes={{
        "first": compute(lambda ctx: {{"n": 1}}),
        "wait": action(wait_for_gate),
        "after": compute(lambda ctx: {{"n": 2}}),
        "last": compute(lambda ctx: {{"done": True}}),
    }},
    edges=[edge("first", "wait"), edge("wait", "after"), edge("after", "last")],
)
"""

SHELL = """
from piw import compute, define_workflow, edge, shell

workflow = define_workflow(
    name="sleepy",
    start_at="sleep",
    nodes={{
        "sleep": shell(lambda ctx: {{"command": "sh", "args": ["-c", "echo $$ > {pid}; exec sleep 60"]}}),
        "after": compute(lambda ctx: {{"never": True}}),
    }},
    edges=[edge("sleep", "after")],
)
"""

QUICK = """
from piw import compute, define_workflow

workflow = define_workflow(name="quick", start_at="a", nodes={"a": compute(lambda ctx: 1)})
"""

CHECKPOINT = """
from piw import checkpoint, compute, define_workflow, edge

workflow = define_workflow(
    name="approve",
    start_at="draft",
    nodes={"draft": compute(lambda ctx: {"text": "hi"}), "ask": checkpoint(summary="Approve?")},
    edges=[edge("draft", "ask")],
)
"""


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def queue_row(home: Path, run_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(home / "piw.sqlite")
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("SELECT * FROM run_queue WHERE run_id = ?", (run_id,)).fetchone()
    finally:
        conn.close()
    assert row is not None, run_id
    return dict(row)


def only_run(home: Path) -> str:
    return wait_for(lambda: _single(home), what="the run bundle")


def _single(home: Path) -> str | None:
    root = home / "runs"
    names = [p.name for p in root.iterdir() if not p.name.startswith(".")] if root.is_dir() else []
    if len(names) == 1 and (root / names[0] / "trace.ndjson").exists():
        return names[0]
    return None


def listing(cli: Cli) -> str:
    """``piw runs`` wide enough that no cell folds."""
    done = cli("runs", env={"COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    return done.stdout


def types(home: Path, run_id: str) -> list[str]:
    return [line["type"] for line in trace_lines(home, run_id)]


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    return lines[0]


@pytest.fixture
def gated(make_workflow: WorkflowMaker, tmp_path: Path) -> tuple[Path, Path]:
    gate = tmp_path / "gate"
    return make_workflow("gated", GATED.format(gate=str(gate))), gate


def test_pause_takes_effect_at_a_step_boundary_and_resume_continues(
    cli: Cli, piw_home: Path, gated: tuple[Path, Path]
) -> None:
    flow, gate = gated
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    wait_for(lambda: Path(str(gate) + ".started").exists(), what="the gated step")
    pauser = cli.popen("pause", run_id[:22])  # a unique prefix names the run
    wait_for(lambda: queue_row(piw_home, run_id)["pause_requested"], what="the pause request")
    gate.write_text("open")  # the step finishes normally: a pause never interrupts a node
    said, err = pauser.communicate(timeout=60)  # pause waits (up to 10 s) for the run to reach the boundary
    assert pauser.returncode == 0, err
    assert said.strip() == (
        f"Run {run_id} paused at a step boundary; continue it with 'piw resume {run_id}'."
    )
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err
    seen = types(piw_home, run_id)
    assert "run_paused" in seen and seen[-1] == "run_paused"
    pause_at = seen.index("run_paused")
    assert seen[pause_at - 1] == "node_finished"  # at a step boundary
    assert not any(line["payload"].get("outcome") == "cancelled" for line in trace_lines(piw_home, run_id))
    row = queue_row(piw_home, run_id)
    assert (row["status"], row["pause_requested"], row["claim_token"]) == ("parked", 1, None)
    assert "running (paused)" in listing(cli)

    resumed = cli.process("resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    lines = trace_lines(piw_home, run_id)
    resumed_event = next(line for line in lines if line["type"] == "run_resumed")
    assert resumed_event["payload"] == {}  # empty after a pause
    assert lines[-1]["type"] == "run_completed"
    finished = [line["nodeId"] for line in lines if line["type"] == "node_finished"]
    assert finished == ["first", "wait", "after", "last"]  # nothing ran twice
    assert queue_row(piw_home, run_id)["status"] == "done"


def test_a_pause_of_a_step_longer_than_the_wait_is_reported_pending_and_taken_at_the_boundary(
    cli: Cli, piw_home: Path, gated: tuple[Path, Path]
) -> None:
    """``pause`` waits ten seconds for a live run (here a fraction of one: the library call takes the wait); a
    step that takes longer gets a pending request, and the run still pauses when that step ends."""
    from piw.run.lifecycle import pause_run

    flow, gate = gated
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    wait_for(lambda: Path(str(gate) + ".started").exists(), what="the gated step")
    pending = pause_run(piw_home, run_id, wait_s=0.3)
    assert not pending.done
    assert pending.message == (
        f"Pause requested: run {run_id} pauses after its current step (now in wait); "
        f"then continue it with 'piw resume {run_id}'."
    )
    again = cli("pause", run_id)  # asked again before the step ends: still pending, not "already paused"
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "Pause already requested" + pending.message.removeprefix("Pause requested")
    gate.write_text("open")
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err
    assert types(piw_home, run_id)[-2:] == ["node_finished", "run_paused"]


SEES_ITS_PAUSE = """
import os, sqlite3, time
from pathlib import Path
from piw import action, compute, define_workflow, edge

def until_paused(ctx):
    Path({started!r}).write_text("x")
    while True:  # ends the moment the pause is asked for: the boundary comes a millisecond after the request
        db = sqlite3.connect(os.path.join(os.environ["PIW_HOME"], "piw.sqlite"))
        try:
            if db.execute("SELECT pause_requested FROM run_queue").fetchone()[0]:
                return {{"saw": "pause"}}
        finally:
            db.close()
        time.sleep(0.01)

workflow = define_workflow(
    name="sees-its-pause",
    start_at="wait",
    nodes={nodes},
    edges={edges},
)
"""


@pytest.mark.parametrize("last", [False, True], ids=["steps-follow", "last-step"])
def test_a_pause_asked_for_just_before_a_step_ends_takes_effect_at_that_boundary(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, tmp_path: Path, last: bool
) -> None:
    """The lease polls the flags every 200 ms; the boundary must read them itself, or the fast steps after it
    finish the run under a pause that was asked for in time. When the step was the last, the run just ends."""
    started = tmp_path / "started"
    nodes, edges = '{"wait": action(until_paused)}', "[]"
    if not last:
        nodes = '{"wait": action(until_paused), "after": compute(lambda ctx: {"n": 2})}'
        edges = '[edge("wait", "after")]'
    flow = make_workflow(
        "sees-its-pause", SEES_ITS_PAUSE.format(started=str(started), nodes=nodes, edges=edges)
    )
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    wait_for(started.exists, what="the step")
    paused = cli("pause", run_id)
    assert paused.returncode == 0, paused.stderr
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err
    seen = types(piw_home, run_id)
    if last:
        assert paused.stdout.strip() == (
            f"Run {run_id} ended (completed) before it reached another step boundary; there is nothing to pause."
        )
        assert seen[-2:] == ["node_finished", "run_completed"]
    else:
        assert paused.stdout.strip().startswith(f"Run {run_id} paused at a step boundary;")
        assert seen[-2:] == ["node_finished", "run_paused"]  # "after" never started


def test_cancel_during_a_shell_command_kills_it_and_ends_the_run_cancelled(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker, tmp_path: Path
) -> None:
    pid_file = tmp_path / "shell.pid"
    flow = make_workflow("sleepy", SHELL.format(pid=str(pid_file)))
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the shell pid"))
    done = cli.process("cancel", "latest")
    assert done.returncode == 0, done.stderr
    assert "cancelled" in done.stdout
    _, err = runner.communicate(timeout=60)
    assert runner.returncode == 1, err
    lines = trace_lines(piw_home, run_id)
    assert [line["type"] for line in lines[-2:]] == ["node_failed", "run_cancelled"]
    assert lines[-2]["payload"]["outcome"] == "cancelled"
    assert "after" not in {line.get("nodeId") for line in lines}  # a cancelled node does not route on
    wait_for(lambda: not _alive(pid), timeout=10, what="the shell process to die")
    assert queue_row(piw_home, run_id)["status"] == "cancelled"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cancel_of_a_crashed_run_claims_it_repairs_the_tail_and_appends_run_cancelled(
    cli: Cli, piw_home: Path, gated: tuple[Path, Path]
) -> None:
    flow, gate = gated
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    wait_for(lambda: Path(str(gate) + ".started").exists(), what="the gated step")
    runner.kill()  # kill -9: the claim is left behind, held by a dead process
    runner.communicate(timeout=30)
    trace = piw_home / "runs" / run_id / "trace.ndjson"
    with trace.open("ab") as handle:
        handle.write(b'{"seq": 99, "torn')  # a torn tail, as a crash mid-append leaves
    shown = listing(cli)
    assert "running (interrupted)" in shown and "piw cancel" in shown
    done = cli.process("cancel", run_id)  # no waiting out the 30 s lease: the holder is dead
    assert done.returncode == 0, done.stderr
    lines = trace_lines(piw_home, run_id)  # the whole file parses: the torn tail is gone
    assert lines[-1]["type"] == "run_cancelled" and lines[-1]["seq"] == len(lines)
    assert queue_row(piw_home, run_id)["status"] == "cancelled"
    assert "cancelled" in listing(cli)


@pytest.mark.long
def test_an_interrupted_run_whose_source_changed_is_parked_and_can_be_cancelled(
    cli: Cli, piw_home: Path, gated: tuple[Path, Path]
) -> None:
    flow, gate = gated
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    wait_for(lambda: Path(str(gate) + ".started").exists(), what="the gated step")
    runner.send_signal(signal.SIGINT)
    runner.communicate(timeout=30)
    assert runner.returncode == 130
    assert queue_row(piw_home, run_id)["park_reason"] == "interrupted"
    flow.write_text(flow.read_text() + "\n# edited\n")
    before = (piw_home / "runs" / run_id / "trace.ndjson").read_bytes()
    refused = cli.process("resume", run_id)
    assert refused.returncode == 2
    assert "Workflow source changed" in one_line(refused) and f"piw cancel {run_id}" in refused.stderr
    assert (piw_home / "runs" / run_id / "trace.ndjson").read_bytes() == before
    assert queue_row(piw_home, run_id)["park_reason"] == "source_changed"
    assert "parked: source changed" in listing(cli)
    done = cli.process("cancel", run_id)
    assert done.returncode == 0, done.stderr
    assert types(piw_home, run_id)[-1] == "run_cancelled"


def test_pause_and_cancel_of_a_finished_run_change_nothing(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("quick", QUICK)
    assert cli("run", str(flow)).returncode == 0
    run_id = only_run(piw_home)
    before = (piw_home / "runs" / run_id / "trace.ndjson").read_bytes()
    row_before = queue_row(piw_home, run_id)
    for verb in ("pause", "cancel"):
        done = cli(verb, run_id)
        assert done.returncode == 2
        assert "already ended (completed)" in one_line(done)
    assert (piw_home / "runs" / run_id / "trace.ndjson").read_bytes() == before
    assert queue_row(piw_home, run_id) == row_before


def test_cancel_of_a_waiting_run_leaves_its_bundle_untouched(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("approve", CHECKPOINT)
    assert cli("run", str(flow)).returncode == 0
    run_id = only_run(piw_home)
    assert queue_row(piw_home, run_id)["status"] == "done"
    bundle = piw_home / "runs" / run_id
    before = {path.name: path.read_bytes() for path in bundle.iterdir() if path.is_file()}
    done = cli("cancel", run_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["queueStatus"] == "cancelled"
    assert {path.name: path.read_bytes() for path in bundle.iterdir() if path.is_file()} == before
    again = cli("cancel", run_id)
    assert again.returncode == 2 and "already ended" in one_line(again)


@pytest.mark.long
def test_resume_of_a_run_held_live_elsewhere_is_refused(
    cli: Cli, piw_home: Path, gated: tuple[Path, Path]
) -> None:
    flow, gate = gated
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    wait_for(lambda: Path(str(gate) + ".started").exists(), what="the gated step")
    try:
        refused = cli.process("resume", run_id)
        assert refused.returncode == 2
        assert "being run by another piw process" in one_line(refused)
    finally:
        gate.write_text("open")
        runner.communicate(timeout=60)
    assert types(piw_home, run_id)[-1] == "run_completed"


@pytest.mark.long
def test_watch_of_a_crashed_run_says_so_and_exits_and_ctrl_c_exits_130(
    cli: Cli, piw_home: Path, gated: tuple[Path, Path]
) -> None:
    flow, gate = gated
    runner = cli.popen("run", str(flow))
    run_id = only_run(piw_home)
    wait_for(lambda: Path(str(gate) + ".started").exists(), what="the gated step")
    watcher = cli.popen("watch", run_id)
    assert watcher.stdout is not None
    assert watcher.stdout.readline()  # its first frame of the live run is out: it is watching
    watcher.send_signal(signal.SIGINT)
    watcher.communicate(timeout=30)
    assert watcher.returncode == 130  # docs/cli.md: Ctrl-C while watching exits 130; the run is not affected
    runner.kill()
    runner.communicate(timeout=30)
    done = cli.process("watch", run_id, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"Run {run_id} is not being run by any process" in done.stdout
    assert types(piw_home, run_id)[-1] != "run_cancelled"  # watching never writes


@pytest.mark.long
def test_a_crash_after_the_terminal_event_only_finalizes_the_queue_row(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    flow = make_workflow("quick", QUICK)
    crashed = cli.process("run", str(flow), env={"PIW_TEST_KILL_AFTER_APPEND": "4"})  # after run_completed
    assert crashed.returncode == -9
    run_id = only_run(piw_home)
    assert types(piw_home, run_id)[-1] == "run_completed"
    assert queue_row(piw_home, run_id)["status"] in ("starting", "running")  # the release never happened
    before = (piw_home / "runs" / run_id / "trace.ndjson").read_bytes()
    done = cli.process("resume", run_id)
    assert done.returncode == 2 and "already ended (completed)" in one_line(done)
    assert (piw_home / "runs" / run_id / "trace.ndjson").read_bytes() == before
    assert queue_row(piw_home, run_id)["status"] == "done"
