"""Schedules in database mode: every machine sees the same schedules, and each fire starts once across them
(``docs/schedules.md``, ``docs/many-machines.md``)."""

from __future__ import annotations

from pathlib import Path

from piw.run.schedule_duty import ScheduleDuty
from piw.schedule.book import open_schedules
from piw.schedule.times import Timing
from piw.store.db.schedules import ScheduleRow
from piw.store.pg.place import forget, use
from piw.store.pg.setting import DatabaseSetting
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker
from tests.support.schedules import tick_together

FLOW = """
from piw import compute, define_workflow
workflow = define_workflow(name="tick", start_at="a", nodes={"a": compute(lambda c: {"n": 1})})
"""
T0 = 1_800_000_000_000
PERIOD = 60_000


def test_two_machines_share_schedules_and_fire_each_period_once(
    cli: Cli, piw_home: Path, tmp_path: Path, make_workflow: WorkflowMaker, pg_setting: DatabaseSetting
) -> None:
    url = pg_setting.url + f"?schema={pg_setting.schema}"
    database = {"PIW_DATABASE": url}
    flow = make_workflow("tick", FLOW)
    other = Cli(tmp_path / "machine-b", tmp_path)
    other.home.mkdir()
    assert cli("schedule", "add", "hourly", str(flow), "--every", "1h", env=database).returncode == 0
    assert [row["name"] for row in other.json("schedule", "list", "--json", env=database)] == ["hourly"]
    assert other("schedule", "rm", "hourly", env=database).returncode == 0
    assert cli.json("schedule", "list", "--json", env=database) == []
    assert cli.json("schedule", "list", "--json") == []  # SQLite mode: the home's own, none

    homes = [piw_home, other.home]
    for home in homes:
        use(home, url)
    try:
        open_schedules(piw_home).add(
            ScheduleRow(
                name="tick", workflow_ref=str(flow), input={}, timing=Timing(every_ms=PERIOD, anchor_ms=T0).to_json(),
                missed="latest", max_backlog=5, overlap="allow", budget=None, title=None, paused=False, held=None,
                cursor_at=T0, created_at=T0, updated_at=T0,
            )
        )  # fmt: skip
        duties = [ScheduleDuty(home, f"host-{n}", lambda line: None) for n, home in enumerate(homes)]
        started = tick_together(duties, (T0 + period * PERIOD + 100 for period in range(1, 4)))
        fires = open_schedules(other.home).fires("tick")
    finally:
        for home in homes:
            forget(home)
    assert len(started) == 3 == len(set(started))
    assert sorted(fire.run_id or "" for fire in fires) == sorted(started)
    assert {fire.state for fire in fires} == {"started"}
    listed = cli.json("runs", "--schedule", "tick", "--json", env=database)
    assert sorted(row["runId"] for row in listed) == sorted(started)
