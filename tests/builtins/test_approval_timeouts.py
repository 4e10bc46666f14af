"""plan-approval and plan-change deadlines (builtins.md §5 rows 3-5, §6 row 5): the timeout sweeper answers an
expired `auto` gate with `continue`, provenance `timeout`; the deadline is fixed when the gate opens; `required`
never expires. Time is injected: the engine clock opens a gate in the past, the queue clock sweeps in the future.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from piw.providers.scripted import ScriptedProvider
from piw.run.runner import ForegroundOptions, continue_run, start_run
from piw.store.db.run_database import open_run_database
from tests.builtins.test_autoplan import script
from tests.builtins.test_plan_approval import PLAN, approval_input, digest
from tests.support.builtin_harness import options

sweeper = pytest.importorskip(
    "piw.run.sweeper", reason="the timeout sweeper is owed by `decisions` (issue 8 part B)"
)
sweep_timeouts = sweeper.sweep_timeouts


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def opened_at(
    home: Path, run_input: dict[str, Any], minutes_ago: float, builtin_id: str = "plan-approval"
) -> str:
    then = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    state = start_run(builtin_id, home, run_input, None, ForegroundOptions(clock=lambda: then))
    assert state.status == "waiting"
    return str(state.run_id)


def test_auto_without_an_answer_continues_after_ten_minutes_with_provenance_timeout(piw_home: Path) -> None:
    run_id = opened_at(piw_home, approval_input(), minutes_ago=0)
    now = open_run_database(piw_home)
    assert sweep_timeouts(piw_home, now) == []  # not due yet
    later = open_run_database(
        piw_home, clock=lambda: ms(datetime.now(UTC) + timedelta(minutes=10, seconds=1))
    )
    (made,) = sweep_timeouts(piw_home, later, run_id=run_id)
    assert made.spec.answer == {"choice": "continue", "provenance": "timeout"}
    state = continue_run(made.spec, piw_home, ForegroundOptions())
    assert state.status == "completed"
    assert state.final_output == {"decision": "continue", "provenance": "timeout", "planDigest": digest(PLAN)}


def test_with_no_piw_process_from_4_to_12_minutes_the_first_sweep_resolves_it_on_its_fixed_deadline(
    piw_home: Path,
) -> None:
    run_id = opened_at(piw_home, approval_input(), minutes_ago=12)
    database = open_run_database(piw_home)
    (row,) = database.decisions.decisions_of(run_id)
    opened = json.loads((piw_home / "runs" / run_id / "state.json").read_text())["finalOutput"]
    assert row.expires_at == ms(datetime.fromisoformat(opened["openedAt"].replace("Z", "+00:00"))) + 600_000
    (made,) = sweep_timeouts(piw_home, database)
    assert made.provenance == "timeout"
    (resolved,) = database.decisions.decisions_of(run_id)
    assert (resolved.status, resolved.provenance, resolved.expires_at) == (
        "resolved",
        "timeout",
        row.expires_at,
    )


def test_required_is_still_waiting_seven_days_later(piw_home: Path) -> None:
    run_id = opened_at(piw_home, approval_input(approval={"mode": "required"}), minutes_ago=0)
    week = open_run_database(piw_home, clock=lambda: ms(datetime.now(UTC) + timedelta(days=7)))
    assert sweep_timeouts(piw_home, week) == []
    (row,) = week.decisions.decisions_of(run_id)
    assert row.status == "open" and row.expires_at is None


def test_plan_change_auto_timeout_reaches_ready_with_provenance_timeout(piw_home: Path) -> None:
    replies = {f"design/{node}": entries for node, entries in script().items()}
    then = datetime.now(UTC) - timedelta(minutes=11)
    provider = ScriptedProvider(replies)
    start_options = options(provider, None)
    start_options.clock = lambda: then
    state = start_run("plan-change", piw_home, {"task": "Exports time out."}, None, start_options)
    assert state.status == "waiting"
    (made,) = sweep_timeouts(piw_home, open_run_database(piw_home), run_id=state.run_id)
    final = continue_run(made.spec, piw_home, options(ScriptedProvider({}), None))
    assert final.status == "completed"
    assert final.final_output["approval"] == {"decision": "continue", "provenance": "timeout"}
    assert final.final_output["replans"] == 0
