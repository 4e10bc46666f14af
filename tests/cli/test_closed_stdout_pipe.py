"""A reader that closes stdout early (``piw run … | head -1``, ``| less`` quit early) never kills a run (issue 26.3).

The pipe is a real one: the ``piw`` subprocess writes its step log into it, the test reads the first line and
closes its end, and the run's next write meets a closed pipe. The run goes on with its output dropped, ends as it
would have, and its final status line reaches stderr; ``piw watch`` of a run just stops watching.
"""

from __future__ import annotations

import json
import subprocess
import time

from tests.support.cli import PIW_COMMAND, Cli
from tests.support.runs import WorkflowMaker

SLOW = """
import time
from piw import action, compute, define_workflow, edge

def pause(ctx):
    time.sleep(SECONDS)
    return {"slept": True}

workflow = define_workflow(
    name="slow",
    start_at="first",
    nodes={
        "first": compute(lambda ctx: {"n": 1}),
        "nap": action(pause),
        "last": compute(lambda ctx: {"done": True}),
    },
    edges=[edge("first", "nap"), edge("nap", "last")],
)
"""


def _slow(make_workflow: WorkflowMaker, seconds: float) -> str:
    return str(make_workflow("slow", SLOW.replace("SECONDS", str(seconds))))


def _piw(cli: Cli, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*PIW_COMMAND, *args],
        cwd=cli.cwd,
        env=cli.environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _runs(cli: Cli) -> list[dict[str, object]]:
    done = cli("runs", "--json")
    assert done.returncode == 0, done.stderr
    rows: list[dict[str, object]] = json.loads(done.stdout)
    return rows


def test_a_run_whose_stdout_is_closed_goes_on_and_reports_on_stderr(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    process = _piw(cli, "run", _slow(make_workflow, 1.0))
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline().decode()
    assert first.startswith("● slow")
    process.stdout.close()  # as `head -1` does once it has its line
    code = process.wait(timeout=60)
    stderr = process.stderr.read().decode()
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert code == 0, stderr
    assert "■ completed" in stderr
    (row,) = _runs(cli)
    assert row["status"] == "completed"


def test_piw_watch_stops_quietly_when_its_reader_goes_away(cli: Cli, make_workflow: WorkflowMaker) -> None:
    run = _piw(cli, "run", _slow(make_workflow, 3.0))
    assert run.stdout is not None
    run_id = run.stdout.readline().decode().split()[-1]
    watch = _piw(cli, "watch", run_id)
    assert watch.stdout is not None and watch.stderr is not None
    watch.stdout.readline()
    watch.stdout.close()
    started = time.monotonic()
    code = watch.wait(timeout=60)
    stderr = watch.stderr.read().decode()
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert code == 0, stderr
    assert time.monotonic() - started < 10
    assert run.wait(timeout=60) == 0
    (row,) = _runs(cli)
    assert row["status"] == "completed"
