"""Without a run id, ``piw inspect`` shows the newest run (as ``piw watch`` always did), and ``piw watch`` follows a
run that is running rather than a newer one that has ended (issue 26, confusing)."""

from __future__ import annotations

import json
import time

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

SLOW = """
import time
from piw import action, define_workflow
workflow = define_workflow(name="slow", start_at="nap", nodes={"nap": action(lambda ctx: time.sleep(SECONDS))})
"""


def test_inspect_without_an_id_is_the_newest_and_watch_prefers_a_running_run(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    slow = cli.popen("run", str(make_workflow("slow", SLOW.replace("SECONDS", "30"))))
    try:
        assert slow.stdout is not None
        running = slow.stdout.readline().split()[-1]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and cli.json("runs")[0].get("currentNode") != "nap":
            time.sleep(0.05)
        newest = json.loads(cli("run", "hello", "--json").stdout)["runId"]

        shown = cli("inspect")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.startswith(f"run       {newest}\n")
        steps = cli("inspect", "--view", "steps")
        assert steps.returncode == 0 and "greet" in steps.stdout

        watched = cli("watch", "--once")
        assert watched.returncode == 0, watched.stderr
        assert running in watched.stdout.splitlines()[0] and newest not in watched.stdout
    finally:
        slow.kill()
        slow.wait()

    # Nothing runs any more (the slow run was killed): watch takes the newest, as before.
    assert newest in cli("watch", "--once").stdout.splitlines()[0]


def test_inspect_without_runs_says_how_to_start_one(cli: Cli) -> None:
    done = cli("inspect")
    assert done.returncode == 2
    assert "piw run" in done.stderr and len(done.stderr.splitlines()) == 1
