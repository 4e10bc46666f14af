"""Notifications through the outbox: one row per node execution, delivered by the origin session (§10.3, §12.10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piw.store.db.run_database import open_run_database
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

TELL = """
from piw import compute, define_workflow, edge, notify
workflow = define_workflow(name="tell", start_at="a", nodes={
    "a": compute(lambda ctx: {"n": 7}),
    "tell": notify(lambda ctx: f"seven is {ctx.outputs['a']['n']}"),
    "b": compute(lambda ctx: {"told": ctx.outputs["tell"]["notificationId"]}),
}, edges=[edge("a", "tell"), edge("tell", "b")])
"""
# 1 run_started, 2/3 a, 4 node_started tell, 5 notification_queued, 6 node_finished tell, 7/8 b, 9 run_completed


def outbox(home: Path, run_id: str) -> list[dict[str, object]]:
    return [row.to_json() for row in open_run_database(home).outbox.notifications_of(run_id)]


def only_run(home: Path) -> str:
    (run_id,) = [p.name for p in (home / "runs").iterdir() if not p.name.startswith(".")]
    return run_id


def session_notifications(home: Path, run_id: str) -> list[str]:
    lines = (home / "runs" / run_id / "session" / "entries.ndjson").read_text(encoding="utf-8").splitlines()
    return [json.loads(line)["entry"]["message"]["content"] for line in lines]


def test_a_notification_is_queued_once_and_delivered_by_the_origin_session(
    cli: Cli, make_workflow: WorkflowMaker
) -> None:
    done = cli("run", str(make_workflow("tell", TELL)))
    assert done.returncode == 0, done.stderr
    run_id = only_run(cli.home)
    (row,) = outbox(cli.home, run_id)
    queued = [e for e in trace_lines(cli.home, run_id) if e["type"] == "notification_queued"]
    assert len(queued) == 1 and queued[0]["payload"]["notificationId"] == row["notificationId"]
    assert row["content"] == "seven is 7" and row["deliveredAt"] is not None
    assert row["targetSessionId"] == trace_lines(cli.home, run_id)[0]["payload"]["originSession"]["id"]
    assert done.stdout.count("seven is 7") == 1


@pytest.mark.parametrize(
    ("mode", "seq", "delivered"),
    [("BEFORE", 5, False), ("AFTER", 5, False), ("AFTER", 6, True)],
    ids=["after-the-row-before-the-event", "after-the-event-before-delivery", "after-delivery"],
)
def test_a_crash_around_the_notification_leaves_one_row_and_delivers_it_once(
    cli: Cli, make_workflow: WorkflowMaker, mode: str, seq: int, delivered: bool
) -> None:
    path = make_workflow("tell", TELL)
    crashed = cli.process("run", str(path), env={f"PIW_TEST_KILL_{mode}_APPEND": str(seq)})
    assert crashed.returncode == -9
    run_id = only_run(cli.home)
    (row,) = outbox(cli.home, run_id)  # the row was inserted before the event: it is there either way
    assert (row["deliveredAt"] is not None) is delivered
    watched = cli("watch", run_id, "--once")  # a viewer reads; it never marks a notification delivered
    assert watched.returncode == 0 and outbox(cli.home, run_id)[0]["deliveredAt"] == row["deliveredAt"]
    resumed = cli("resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    (after,) = outbox(cli.home, run_id)
    assert after["notificationId"] == row["notificationId"] and after["deliveredAt"] is not None
    events = trace_lines(cli.home, run_id)
    assert [e["type"] for e in events].count("notification_queued") == 1
    assert session_notifications(cli.home, run_id) == ["seven is 7"]
    # shown once by the process that continued the run, unless the crashed one had delivered it already
    assert resumed.stdout.count("seven is 7") == (0 if delivered else 1)
