"""``piw schedule`` end to end: bad input stores nothing, and real ``piw host`` processes fire a real schedule."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.support.cli import Cli
from tests.support.hosts import HostProcess, wait_for
from tests.support.runs import WorkflowMaker

FLOW = """
from pydantic import BaseModel
from piw import compute, define_workflow

class In(BaseModel):
    who: str

workflow = define_workflow(
    name="greet", start_at="a", input=In, nodes={"a": compute(lambda c: {"hi": c.input["who"]})}
)
"""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--cron", "61 * * * *"], "--cron '61 * * * *' is not a cron expression"),
        (["--cron", "0 9 * * 1-5", "--tz", "Mars/Olympus"], "Unknown time zone 'Mars/Olympus'"),
        (["--every", "0s"], "--every '0s' is too short"),
        (["--every", "15m", "--input", '{"nobody": 1}'], "who"),
        (["--every", "15m", "--cron", "0 9 * * *"], "exactly one of --cron"),
        (["--every", "15m", "--missed", "sometimes"], "--missed 'sometimes'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_stores_nothing(
    cli: Cli, make_workflow: WorkflowMaker, args: list[str], says: str
) -> None:
    flow = make_workflow("greet", FLOW)
    done = cli("schedule", "add", "daily", str(flow), *args)
    assert done.returncode == 2, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and says in lines[0]
    assert cli.json("schedule", "list", "--json") == []


def test_a_name_that_exists_is_refused_and_the_first_is_kept(cli: Cli, make_workflow: WorkflowMaker) -> None:
    flow = make_workflow("greet", FLOW)
    assert (
        cli("schedule", "add", "daily", str(flow), "--every", "1h", "--input", '{"who": "a"}').returncode == 0
    )
    again = cli("schedule", "add", "daily", str(flow), "--every", "5m", "--input", '{"who": "b"}')
    assert again.returncode == 2 and "A schedule named 'daily' exists" in again.stderr
    (only,) = cli.json("schedule", "list", "--json")
    assert only["everyMs"] == 3_600_000 and only["input"] == {"who": "a"}


def test_list_show_next_pause_resume_rm(cli: Cli, make_workflow: WorkflowMaker) -> None:
    flow = make_workflow("greet", FLOW)
    added = cli(
        "schedule",
        "add",
        "morning",
        str(flow),
        "--cron",
        "0 9 * * 1-5",
        "--tz",
        "Europe/Paris",
        "--input",
        '{"who": "a"}',
    )
    assert added.returncode == 0 and "next fire" in added.stdout
    nxt = cli.json("schedule", "next", "morning", "--count", "3", "--json")
    assert len(nxt) == 3 and all(at.endswith(":00:00.000Z") for at in nxt)
    assert "09:00:00 CE" in cli("schedule", "next", "morning").stdout  # CET or CEST, in the zone
    assert cli("schedule", "pause", "morning").returncode == 0
    assert cli.json("schedule", "show", "morning", "--json")["state"] == "paused"
    assert cli("schedule", "resume", "morning").returncode == 0
    assert cli.json("schedule", "list", "--json")[0]["state"] == "active"
    assert cli("schedule", "rm", "morning").returncode == 0
    gone = cli("schedule", "show", "morning")
    assert gone.returncode == 2 and "No schedule named 'morning'" in gone.stderr


def test_two_real_hosts_fire_an_every_2s_schedule_once_per_period(
    cli: Cli, make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    flow = make_workflow("greet", FLOW)
    assert (
        cli("schedule", "add", "tick", str(flow), "--every", "2s", "--input", '{"who": "x"}').returncode == 0
    )
    hosts = [HostProcess(f"host-{n}", piw_home, cwd=cli.cwd).start() for n in "ab"]
    try:

        def three_done() -> bool:
            rows = cli.json("runs", "--schedule", "tick", "--status", "completed", "--json")
            return len(rows) >= 3

        wait_for(three_done, timeout=60, what="three scheduled runs to complete")
    finally:
        for host in hosts:
            host.signal(signal.SIGINT)
        outputs = [host.finish() for host in hosts]
    fires = cli.json("schedule", "show", "tick", "--json")["fires"]
    started = [fire for fire in fires if fire["state"] == "started"]
    runs = cli.json("runs", "--schedule", "tick", "--json")
    # each started fire has its own run, each run names its own fire: no period fired twice
    assert sorted(row["runId"] for row in runs) == sorted(fire["runId"] for fire in started)
    assert len({row["schedule"]["fireAt"] for row in runs}) == len(runs)
    assert {row["schedule"]["fireAt"] for row in runs} == {fire["fireAt"] for fire in started}
    queued = [
        line for _, out, _ in outputs for line in out.splitlines() if line.startswith("schedule tick: fire")
    ]
    assert len(queued) == len(runs) and all("queued run" in line for line in queued), outputs
    completed = [row for row in runs if row["status"] == "completed"]
    assert len(completed) >= 3
    output = json.loads(cli("inspect", completed[0]["runId"], "--json").stdout)["finalOutput"]
    assert output == {"hi": "x"}
