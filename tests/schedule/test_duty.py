"""The host's schedule duty with an injected clock: missed fires, backlogs, overlap, several hosts, restarts.

Each test adds a schedule directly in the run database and calls ``ScheduleDuty.tick(now)`` with chosen times; the
runs it queues are real runs (bundles with ``run_started``, queue rows) left queued, as no host executes them here.
"""

from __future__ import annotations

import os
from pathlib import Path

from piw.run.schedule_duty import ScheduleDuty, start_fire
from piw.schedule.book import open_schedules
from piw.schedule.times import Timing
from piw.store.db.holders import boot_id, host_id
from piw.store.db.schedules import ScheduleRow
from piw.store.history import find_runs
from piw.store.run_query import RunQuery
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker
from tests.support.schedules import tick_together

PERIOD = 60_000
T0 = 1_800_000_000_000  # a fixed instant (2027-01-15): the duty is told the time, it never reads it

FLOW = """
from piw import compute, define_workflow
workflow = define_workflow(name="tick", start_at="a", nodes={"a": compute(lambda c: {"n": c.input.get("n")})})
"""


def add(home: Path, flow: Path, name: str = "tick", **options: object) -> None:
    row = ScheduleRow(
        name=name,
        workflow_ref=str(flow),
        input={"n": 1},
        timing=Timing(every_ms=int(options.get("period", PERIOD)), anchor_ms=T0).to_json(),  # type: ignore[call-overload]
        missed=str(options.get("missed", "latest")),
        max_backlog=int(options.get("max_backlog", 5)),  # type: ignore[call-overload]
        overlap=str(options.get("overlap", "allow")),
        budget=None,
        title=None,
        paused=False,
        held=None,
        cursor_at=T0,
        created_at=T0,
        updated_at=T0,
    )
    open_schedules(home).add(row)


def scheduled_runs(home: Path, name: str = "tick") -> list[str]:
    return [row.run_id for row in find_runs(home, RunQuery(schedule=name))]


def states(home: Path, name: str = "tick") -> dict[int, str]:
    return {fire.fire_at: fire.state for fire in open_schedules(home).fires(name, 100)}


def test_each_on_time_fire_starts_one_run_that_records_its_schedule(
    piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    add(piw_home, make_workflow("tick", FLOW))
    duty = ScheduleDuty(piw_home, "host-a", lambda line: None)
    assert duty.tick(T0 + PERIOD // 2) == []  # nothing due yet
    first = duty.tick(T0 + PERIOD + 300)
    assert duty.tick(T0 + PERIOD + 800) == []  # the same period again: nothing new
    second = duty.tick(T0 + 2 * PERIOD + 100)
    assert len(first) == 1 and len(second) == 1
    runs = find_runs(piw_home, RunQuery(schedule="tick"))
    assert [row.run_id for row in runs] == [*second, *first]
    assert runs[-1].schedule == {"name": "tick", "fireAt": "2027-01-15T08:01:00.000Z"}
    assert states(piw_home) == {T0 + PERIOD: "started", T0 + 2 * PERIOD: "started"}


def test_a_host_down_for_five_periods_with_missed_latest_starts_one_run(
    piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    add(piw_home, make_workflow("tick", FLOW), missed="latest")
    started = ScheduleDuty(piw_home, "host-a", lambda line: None).tick(T0 + 5 * PERIOD + 40_000)
    assert len(started) == 1 and scheduled_runs(piw_home) == started
    recorded = states(piw_home)
    assert recorded[T0 + 5 * PERIOD] == "started"
    assert [recorded[T0 + k * PERIOD] for k in range(1, 5)] == ["missed"] * 4


def test_missed_skip_records_missed_fires_and_runs_only_an_on_time_one(
    piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    ten_minutes = 600_000
    add(piw_home, make_workflow("tick", FLOW), missed="skip", period=ten_minutes)
    duty = ScheduleDuty(piw_home, "host-a", lambda line: None)
    assert duty.tick(T0 + 3 * ten_minutes + 120_000) == []  # the newest is 2 min late: missed too
    assert set(states(piw_home).values()) == {"missed"} and len(states(piw_home)) == 3
    assert len(duty.tick(T0 + 4 * ten_minutes + 1_000)) == 1


def test_a_backlog_beyond_max_backlog_warns_and_starts_none(
    piw_home: Path, make_workflow: WorkflowMaker, cli: Cli
) -> None:
    add(piw_home, make_workflow("tick", FLOW), missed="all", max_backlog=3)
    lines: list[str] = []
    assert ScheduleDuty(piw_home, "host-a", lines.append).tick(T0 + 5 * PERIOD + 1_000) == []
    assert scheduled_runs(piw_home) == []
    assert set(states(piw_home).values()) == {"held"}
    assert any("is held" in line for line in lines)
    shown = cli("schedule", "show", "tick")
    assert shown.returncode == 0 and "tick is held: 5 missed fires exceed --max-backlog 3" in shown.stdout
    assert shown.stdout.index("is held") < shown.stdout.index("last fires")  # said first
    listed = cli("runs")
    assert "schedule tick is held" in listed.stdout
    # held: later periods spend nothing either, until someone resumes it
    assert ScheduleDuty(piw_home, "host-a", lines.append).tick(T0 + 6 * PERIOD + 1_000) == []
    assert cli("schedule", "resume", "tick").returncode == 0


def test_a_backlog_within_max_backlog_runs_each_fire(piw_home: Path, make_workflow: WorkflowMaker) -> None:
    add(piw_home, make_workflow("tick", FLOW), missed="all", max_backlog=5)
    started = ScheduleDuty(piw_home, "host-a", lambda line: None).tick(T0 + 4 * PERIOD + 1_000)
    assert len(started) == 4 and set(states(piw_home).values()) == {"started"}


def test_overlap_skip_records_skipped_fires_while_the_previous_run_is_active(
    piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    add(piw_home, make_workflow("tick", FLOW), overlap="skip")
    duty = ScheduleDuty(piw_home, "host-a", lambda line: None)
    first = duty.tick(T0 + PERIOD + 100)  # queued, and no host runs it: still active
    assert duty.tick(T0 + 2 * PERIOD + 100) == [] and duty.tick(T0 + 3 * PERIOD + 100) == []
    assert states(piw_home) == {
        T0 + PERIOD: "started",
        T0 + 2 * PERIOD: "skipped",
        T0 + 3 * PERIOD: "skipped",
    }
    fires = open_schedules(piw_home).fires("tick")
    assert all(first[0] in (fire.note or "") for fire in fires if fire.state == "skipped")


def test_overlap_queue_starts_the_waiting_fire_once_the_previous_run_ends(
    piw_home: Path, make_workflow: WorkflowMaker, cli: Cli
) -> None:
    add(piw_home, make_workflow("tick", FLOW), overlap="queue")
    duty = ScheduleDuty(piw_home, "host-a", lambda line: None)
    first = duty.tick(T0 + PERIOD + 100)
    assert duty.tick(T0 + 2 * PERIOD + 100) == []
    assert states(piw_home)[T0 + 2 * PERIOD] == "queued"
    assert cli("cancel", first[0]).returncode == 0  # the previous run ends
    later = duty.tick(T0 + 2 * PERIOD + 5_000)
    assert len(later) == 1 and states(piw_home)[T0 + 2 * PERIOD] == "started"


def test_two_hosts_fire_each_period_exactly_once(piw_home: Path, make_workflow: WorkflowMaker) -> None:
    add(piw_home, make_workflow("tick", FLOW))
    duties = [ScheduleDuty(piw_home, f"host-{n}", lambda line: None) for n in "ab"]
    started = tick_together(duties, (T0 + period * PERIOD + 200 for period in range(1, 5)))
    assert len(started) == 4 == len(set(started))
    assert sorted(scheduled_runs(piw_home)) == sorted(started)
    assert states(piw_home) == {T0 + k * PERIOD: "started" for k in range(1, 5)}


def test_a_host_restarted_mid_fire_adopts_the_run_it_had_queued(
    piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    add(piw_home, make_workflow("tick", FLOW))
    store = open_schedules(piw_home)
    gone = f"{host_id()}:{boot_id()}:{_dead_pid()}:1"  # a holder on this machine that no longer runs
    from piw.schedule.policy import decide

    now = T0 + PERIOD + 100
    (fire,) = store.advance("tick", gone, now, lambda row: decide(row, now))
    row = store.get("tick")
    assert row is not None
    queued = start_fire(piw_home, row, fire)  # it queued the run, then died before recording it
    started = ScheduleDuty(piw_home, "host-b", lambda line: None).tick(now + 500)
    assert started == [queued] and scheduled_runs(piw_home) == [queued]
    assert states(piw_home) == {T0 + PERIOD: "started"}
    assert store.fires("tick")[0].run_id == queued


def _dead_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid
