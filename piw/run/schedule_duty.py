"""``piw host``'s schedule duty: fire the schedules that are due (``docs/schedules.md``).

Each look at a schedule decides its due fires once, holding the schedule's row (``piw.store.db.schedules``); each
fire to run is claimed by ``(schedule, fire time)`` by exactly one host. Starting a claimed fire queues its run
like ``piw run --detach`` with the idempotency key ``schedule:<name>:<fire ms>`` and ``run_started.schedule =
{name, fireAt}``; the host's claim loop then executes it like any queued run. A host that dies after claiming a
fire leaves the claim to expire (at once for a dead process on the same machine); whoever takes it over queues the
run with the same key, so a run that was already queued is adopted, never started twice.

``--overlap`` is applied when a fire starts: while the schedule's previous run is still active, ``skip`` records
the fire ``skipped``, ``queue`` records it ``queued`` and looks again each pass until that run has finished,
``allow`` starts it anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from piw.errors import PiwError
from piw.run.periodic import PeriodicDuty
from piw.schedule.book import open_schedules
from piw.schedule.policy import decide
from piw.schedule.warnings import held_line
from piw.store.db.database import Clock, now_ms
from piw.store.db.holders import holder_is_dead
from piw.store.db.index import from_ms
from piw.store.db.schedules import FireRow, ScheduleRow, SqliteSchedules

log = logging.getLogger(__name__)

TICK_MS = 500
"""How often a host looks at the schedules (at most; its loop wakes every half second when idle)."""


def fire_key(name: str, fire_at: int) -> str:
    """The idempotency key of the run a fire starts: the same fire never queues two runs."""
    return f"schedule:{name}:{fire_at}"


class ScheduleDuty(PeriodicDuty):
    """Called from every pass of the host loop; looks at the schedules every :data:`TICK_MS`."""

    every_ms = TICK_MS

    def __init__(self, home: Path, runner: str, report: Callable[[str], None], clock: Clock = now_ms) -> None:
        super().__init__(clock)
        self.home = home
        self.runner = runner
        self.report = report

    def tick(self, now: int) -> list[str]:
        """Decide every schedule's due fires and start the ones this host claimed; the run ids started."""
        store = open_schedules(self.home)
        started: list[str] = []
        for row in store.all():
            if row.paused:
                continue
            try:
                claimed = store.advance(row.name, self.runner, now, lambda current: decide(current, now))
                fresh = store.get(row.name)
                if fresh is not None and fresh.held is not None and not row.held:
                    self.report(held_line(fresh))
                for fire in claimed:
                    started.extend(self._start(store, fire, now))
            except PiwError as exc:
                log.warning("schedule %s: %s", row.name, exc)
        for fire in store.retry_candidates(now):
            if fire.state == "claimed" and _claim_live(fire, now):
                continue
            taken = store.take(fire, self.runner, now)
            if taken is not None:
                started.extend(self._start(store, taken, now))
        return started

    def _start(self, store: SqliteSchedules, fire: FireRow, now: int) -> list[str]:
        row = store.get(fire.schedule_name)
        if row is None:
            return []
        active = _active_run(self.home, store, fire)
        if active is not None and row.overlap != "allow":
            state = "skipped" if row.overlap == "skip" else "queued"
            store.settle(fire, self.runner, state, now, note=f"run {active} was still active")
            if state == "skipped":
                self.report(
                    f"schedule {row.name}: fire {from_ms(fire.fire_at)} skipped, run {active} still active"
                )
            return []
        try:
            run_id = start_fire(self.home, row, fire)
        except PiwError as exc:
            store.settle(fire, self.runner, "failed", now, note=str(exc))
            self.report(f"schedule {row.name}: fire {from_ms(fire.fire_at)} failed: {exc}")
            return []
        store.settle(fire, self.runner, "started", now, run_id=run_id, note=fire.note)
        self.report(f"schedule {row.name}: fire {from_ms(fire.fire_at)} queued run {run_id}")
        return [run_id]


def start_fire(home: Path, row: ScheduleRow, fire: FireRow) -> str:
    """Queue the run of one fire (adopting the run an earlier try queued for it); its run id."""
    from piw.run.launch import LaunchOptions
    from piw.run.runner import ForegroundOptions, queue_run
    from piw.workflow.budget import parse_budget

    options = ForegroundOptions(
        launch=LaunchOptions(),
        idempotency_key=fire_key(row.name, fire.fire_at),
        budget=parse_budget(row.budget) if row.budget else None,
        schedule={"name": row.name, "fireAt": from_ms(fire.fire_at)},
    )
    state = queue_run(row.workflow_ref, home, row.input, row.title, options)
    return state.run_id


def _claim_live(fire: FireRow, now: int) -> bool:
    return (fire.claim_expires_at or 0) > now and not holder_is_dead(fire.claimer)


def _active_run(home: Path, store: SqliteSchedules, fire: FireRow) -> str | None:
    """The schedule's previous run, when it has not finished (its queue row is not final)."""
    previous = store.last_started(fire.schedule_name, fire.fire_at)
    if previous is None or previous.run_id is None:
        return None
    from piw.store.db.run_database import open_run_database

    row = open_run_database(home).queue.get(previous.run_id)
    return previous.run_id if row is not None and not row.is_final else None
