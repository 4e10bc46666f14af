"""A host that is stopped says what became of the run it parked, never ``parked (parked)`` (issue 26, confusing),
and ``piw runs`` lists that run as a host will see it: queued, not interrupted."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

SLOW = """
import time
from piw import action, compute, define_workflow, edge
workflow = define_workflow(name="slow", start_at="nap", nodes={
    "nap": action(lambda ctx: time.sleep(3)), "after": compute(lambda ctx: 1)}, edges=[edge("nap", "after")])
"""


@pytest.mark.long
def test_a_stopped_host_says_the_next_host_continues_the_run(cli: Cli, make_workflow: WorkflowMaker) -> None:
    queued = cli("run", str(make_workflow("slow", SLOW)), "--detach")
    assert queued.returncode == 0, queued.stderr
    run_id = cli.json("runs")[0]["runId"]
    host = cli.popen("host")
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and cli.json("runs")[0].get("currentNode") != "nap":
            time.sleep(0.05)
        host.send_signal(signal.SIGTERM)
        out, err = host.communicate(timeout=30)
    finally:
        if host.poll() is None:
            host.kill()
    assert host.returncode == 0, err
    assert "parked (parked)" not in out
    (line,) = [line for line in out.splitlines() if line.startswith(run_id) and "claimed" not in line]
    assert line == (
        f"{run_id}  parked (host stopped): the next 'piw host' continues it, or 'piw resume {run_id}' here"
    )
    listed = cli("runs")
    assert "running (queued)" in listed.stdout and "interrupted" not in listed.stdout
