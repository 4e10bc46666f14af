"""monitor built-in (builtins.md §7): every acceptance row through the engine, on scripted replies and an injected
clock (``FakeClock``: a wait advances the clock instead of sleeping), plus the durable wait SIGKILLed mid-wait.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support.builtin_harness import (
    BUILTINS,
    T0,
    BuiltinRun,
    FakeClock,
    RunBuiltin,
    assert_no_hidden_reasoning,
    no_runs,
)

TASK = "Watch the import and report how many files are loaded."


def observation(
    route: str = "continue", report: str = "Loaded 10 of 100 files.", **extra: Any
) -> dict[str, Any]:
    return {"submit": {"route": route, "report": report, **extra}}


def track(key: str, completed: int, total: int = 100, status: str = "running") -> dict[str, Any]:
    return {"key": key, "schema": "pi-workflows.progress.v1", "status": status, "label": key, "completed": completed,
            "total": total, "unit": "files"}  # fmt: skip


def json_messages(messages: list[Any]) -> str:
    return json.dumps([m.model_dump() for m in messages])


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def monitor(
    run_builtin: RunBuiltin, observations: list[Any], clock: FakeClock | None = None, **extra: Any
) -> Any:
    run_input = {"task": TASK, **extra}
    return run_builtin("monitor", run_input, {"observe": observations}, clock=clock or FakeClock())


# ---- 1, 2, 3: checks, reports, the end ---------------------------------------------------------------------------


def test_the_first_check_starts_at_once(run_builtin: RunBuiltin) -> None:
    clock = FakeClock()
    run = monitor(run_builtin, [observation("stop")], clock)
    assert [s.node_id for s in run.state.steps][:2] == ["prepare", "observe"]  # type: ignore[union-attr]
    assert clock.waits == [] and run.started("sleep") == []
    assert run.output("guard")[0]["observedAt"] == "2026-03-02T09:00:00.000Z"


def test_continue_continue_stop_reports_three_times_and_finishes(run_builtin: RunBuiltin) -> None:
    clock = FakeClock()
    reports = [observation(report="One."), observation(report="Two."), observation("stop", report="Three.")]
    run = monitor(run_builtin, reports, clock, everyMinutes=30)
    assert run.status == "completed", run.state and run.state.error
    assert run.notifications() == [
        "One.\n\nCheck 1 of at most 1000. Next check in about 30 min.",
        "Two.\n\nCheck 2 of at most 1000. Next check in about 30 min.",
        "Three.\n\nCheck 3: the stop condition is met. Monitoring has stopped.",
    ]
    assert run.final == {"reason": "stop", "checks": 3, "lastReport": "Three.",
                         "lastCheckAt": "2026-03-02T10:00:00.000Z"}  # fmt: skip
    types = run.types()
    assert types.index("run_completed") > max(i for i, t in enumerate(types) if t == "notification_queued")
    assert clock.waits == [1800.0, 1800.0]
    assert len(run.started("observe")) == 3 and len(run.started("report")) == 3  # each check reported once


def test_the_check_ceiling_ends_the_run_with_its_footer(run_builtin: RunBuiltin) -> None:
    run = monitor(run_builtin, [observation(), observation()], maxChecks=2, everyMinutes=5)
    assert run.final["reason"] == "ceiling" and run.final["checks"] == 2
    assert run.notifications()[-1] == (
        "Loaded 10 of 100 files.\n\nCheck 2 reached the limit of 2 checks. Monitoring has stopped; start a new "
        "monitor run to keep watching."
    )
    assert run.provider is not None and len(run.provider.requests) == 2


# ---- 4: rejected observations --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        ({"route": "continue"}, "report: Field required"),
        ({"route": "continue", "report": "   "}, "report must not be blank"),
        ({"route": "continue_quiet", "report": "x"}, "route: Input should be 'continue' or 'stop'"),
        (
            {"route": "stop", "report": "x", "progress": [track("a", 1), track("a", 2)]},
            "key 'a' appears twice",
        ),
        (
            {"route": "stop", "report": "x", "progress": [{"key": "a", "status": "running"}]},
            "progress.schema",
        ),
        ({"route": "stop", "report": "x", "eta": "soon"}, "eta: Extra inputs are not permitted"),
    ],
)
def test_an_observation_without_a_valid_report_is_rejected_in_attempt(
    run_builtin: RunBuiltin, bad: dict[str, Any], needle: str
) -> None:
    run = monitor(run_builtin, [{"submit": bad}, observation("stop")])
    assert run.status == "completed", run.state and run.state.error
    assert len(run.started("observe")) == 1 and len(run.notifications()) == 1
    errors = [str(m["content"]) for m in run.messages if m["role"] == "toolResult" and m.get("isError")]
    assert (
        len(errors) == 1
        and errors[0].startswith("Output rejected for step observe: ")
        and needle in errors[0]
    )


# ---- 5, 9: schedule and progress updates -----------------------------------------------------------------------


def test_each_non_final_check_publishes_its_schedule(run_builtin: RunBuiltin) -> None:
    run = monitor(run_builtin, [observation(), observation(), observation("stop")], everyMinutes=45)
    schedules = run.updates("monitor.schedule")
    assert len(schedules) == 2
    for update in schedules:
        data = update["data"]
        assert update["key"] == "monitor" and data["schema"] == "pi-workflows.monitor-schedule.v1"
        assert data["everyMinutes"] == 45
        assert parse(data["nextCheckAt"]) - parse(data["lastCheckAt"]) >= timedelta(minutes=45)
    assert run.output("schedule")[0] == {k: v for k, v in schedules[0]["data"].items() if k != "schema"}
    for node in ("publish_progress", "schedule", "sleep"):
        assert run.snapshot["nodes"][node]["actionExecution"] == {"kind": "function", "effect": "idempotent"}


def test_no_tracks_publish_nothing_then_three_tracks_publish_one_each(run_builtin: RunBuiltin) -> None:
    second = observation("continue", progress=[track("a", 10), track("b", 20), track("c", 30)])
    third = observation("stop", progress=[track("a", 40), track("b", 20), track("c", 90)])
    run = monitor(run_builtin, [observation(), second, third], everyMinutes=10)
    progress = run.updates("progress")
    assert [u["key"] for u in progress] == ["a", "b", "c", "a", "b", "c"]
    assert progress[0]["data"] == {k: v for k, v in track("a", 10).items() if k != "key"}
    first, _, last = run.output("estimate")
    assert first == {"history": {}, "estimates": [], "lines": ""}
    assert [e["key"] for e in last["estimates"]] == ["a", "b", "c"]
    assert [len(last["history"][k]) for k in "abc"] == [2, 2, 2]
    estimates = {e["key"]: e for e in last["estimates"]}
    assert estimates["a"]["remainingMedianMs"] != estimates["c"]["remainingMedianMs"]  # each its own estimate
    assert "Progress: a  40/100 files" in run.notifications()[-1]


def test_tracks_absent_from_a_check_are_dropped_from_the_history(run_builtin: RunBuiltin) -> None:
    run = monitor(
        run_builtin,
        [observation(progress=[track("a", 1), track("b", 2)]), observation("stop", progress=[track("b", 3)])],
    )
    assert run.output("estimate")[-1]["history"].keys() == {"b"}


# ---- 6, 7, 8: the durable wait ---------------------------------------------------------------------------------


def park_during_first_wait(after_minutes: float) -> FakeClock:
    """A clock whose first wait is interrupted (SIGINT, as Ctrl-C) ``after_minutes`` into the interval."""
    clock = FakeClock()

    def interrupt(fake: FakeClock, event: threading.Event, seconds: float) -> None:
        if len(fake.waits) == 1:
            fake.advance(after_minutes * 60)
            signal.raise_signal(signal.SIGINT)  # the engine sets the attempt's cancel event, then unwinds
            event.wait(5)

    clock.on_wait = interrupt
    return clock


def test_a_wait_interrupted_at_10_of_30_and_resumed_at_25_checks_at_30(
    run_builtin: RunBuiltin, resume_builtin: Any, piw_home: Path
) -> None:
    from piw.errors import RunInterrupted

    with pytest.raises(RunInterrupted):
        monitor(run_builtin, [observation()], park_during_first_wait(10), everyMinutes=30)
    (run_id,) = [p.name for p in (piw_home / "runs").iterdir() if not p.name.startswith(".")]
    later = FakeClock(T0 + timedelta(minutes=25))
    run = resume_builtin(run_id, {"observe": [observation("stop")]}, clock=later)
    assert run.status == "completed", run.state and run.state.error
    assert later.waits == [300.0]  # only what remained until nextCheckAt
    assert run.output("guard")[-1] == {"check": 2, "reason": "stop", "observedAt": "2026-03-02T09:30:00.000Z"}
    assert len(run.finished("schedule")) == 1  # the schedule is not recomputed
    assert [e["payload"]["outcome"] for e in run.finished("sleep")] == ["ok"]


def test_resumed_after_next_check_at_the_check_runs_at_once(
    run_builtin: RunBuiltin, resume_builtin: Any, piw_home: Path
) -> None:
    from piw.errors import RunInterrupted

    with pytest.raises(RunInterrupted):
        monitor(run_builtin, [observation()], park_during_first_wait(10), everyMinutes=30)
    (run_id,) = [p.name for p in (piw_home / "runs").iterdir() if not p.name.startswith(".")]
    later = FakeClock(T0 + timedelta(minutes=55))
    run = resume_builtin(run_id, {"observe": [observation("stop")]}, clock=later)
    assert later.waits == [0.0]
    assert run.output("guard")[-1]["observedAt"] == "2026-03-02T09:55:00.000Z"


def test_cancel_during_the_wait_ends_the_run_with_no_further_check(run_builtin: RunBuiltin) -> None:
    clock = FakeClock()
    # What `piw cancel` does to the running attempt: it sets its cancel event, which the wait is blocked on.
    clock.on_wait = lambda fake, event, seconds: event.set()
    run = monitor(run_builtin, [observation(), observation("stop")], clock)
    assert run.status == "cancelled"
    assert len(run.started("observe")) == 1 and len(run.notifications()) == 1
    assert run.finished("sleep")[0]["payload"]["outcome"] == "cancelled"
    assert run.types()[-1] == "run_cancelled" and run.final is None
    assert (
        len(run.updates("monitor.schedule")) == 1 and run.provider is not None and run.provider.pending() == 1
    )


def test_a_failed_observation_fails_the_run_and_invents_no_report(run_builtin: RunBuiltin) -> None:
    run = monitor(run_builtin, [{"error": "the model is down"}])
    assert run.status == "failed" and run.notifications() == [] and run.started("report") == []


def test_the_wait_survives_sigkill_and_resumes_with_its_check_count_and_next_check_time(
    piw_home: Path, tmp_path: Path, resume_builtin: Any
) -> None:
    # A real `piw run` process, killed with SIGKILL while it waits between checks; the resumed run (on an
    # injected clock, so the test does not sleep 30 minutes) continues from the recorded nextCheckAt.
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"observe": [observation(report="First look.")]}), encoding="utf-8")
    env = {**os.environ, "PIW_HOME": str(piw_home), "NO_COLOR": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "piw", "run", "monitor", "--input", json.dumps({"task": TASK, "maxChecks": 3}),
         "--provider", "scripted", "--script", str(replies)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        trace: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            bundles = [p for p in (piw_home / "runs").glob("*") if (p / "trace.ndjson").exists()]
            if bundles:
                lines = (bundles[0] / "trace.ndjson").read_text(encoding="utf-8").splitlines()
                trace = [json.loads(line) for line in lines if line.endswith("}")]
                if any(e["type"] == "node_started" and e.get("nodeId") == "sleep" for e in trace):
                    break
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            time.sleep(0.05)
        else:
            pytest.fail("the run never reached its wait")
        process.send_signal(signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    run_id = bundles[0].name
    schedule = next(
        e["payload"]["output"]
        for e in trace
        if e["type"] == "node_finished" and e.get("nodeId") == "schedule"
    )
    next_check = parse(schedule["nextCheckAt"])
    assert next_check - parse(schedule["lastCheckAt"]) >= timedelta(minutes=30)
    clock = FakeClock(next_check - timedelta(minutes=7))
    run = resume_builtin(run_id, {"observe": [observation("stop", report="Done.")]}, clock=clock)
    assert run.status == "completed", run.state and run.state.error
    assert clock.waits == [420.0]  # 7 minutes: the remainder, not a fresh 30-minute interval
    assert run.final["checks"] == 2 and run.final["reason"] == "stop"
    assert run.output("schedule") == [schedule]  # the recorded next check time carried over, unchanged
    assert "This is check 2 of at most 3" in run.prompts("observe")[-1]
    assert run.notifications() == [
        "First look.\n\nCheck 1 of at most 3. Next check in about 30 min.",
        "Done.\n\nCheck 2: the stop condition is met. Monitoring has stopped.",
    ]


# ---- 10, 11, 12 ------------------------------------------------------------------------------------------------


def test_reports_start_no_model_request(run_builtin: RunBuiltin) -> None:
    run = monitor(run_builtin, [observation(), observation("stop")])
    assert run.provider is not None and len(run.provider.requests) == 2 == len(run.notifications())
    assert run.snapshot["nodes"]["report"]["nodeType"] == "notify"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"extra": 1}, "extra: Extra inputs are not permitted"),
        ({"everyMinutes": 0}, "everyMinutes: Input should be greater than or equal to 1"),
        ({"everyMinutes": 1441}, "everyMinutes: Input should be less than or equal to 1440"),
        ({"everyMinutes": "5"}, "everyMinutes: Input should be a valid integer"),
        ({"maxChecks": 0}, "maxChecks: Input should be greater than or equal to 1"),
        ({"maxChecks": 1001}, "maxChecks: Input should be less than or equal to 1000"),
        ({"task": "t" * 8_001}, "task: String should have at most 8000 characters"),
        ({"task": "  "}, "task must not be blank"),
        ({"stopWhen": ""}, "stopWhen: String should have at least 1 character"),
        ({"stopWhen": "s" * 4_001}, "stopWhen: String should have at most 4000 characters"),
    ],
)
def test_bad_input_is_rejected_before_a_run_exists(
    cli: Any, piw_home: Path, extra: dict[str, Any], needle: str
) -> None:
    done = cli("run", "monitor", "--input", json.dumps({"task": TASK, **extra}), "--provider", "scripted")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("Error: Invalid input for monitor: ") and needle in line
    assert no_runs(piw_home)


def test_the_prompt_holds_the_check_number_the_limit_and_the_ceiling(run_builtin: RunBuiltin) -> None:
    run = monitor(run_builtin, [observation(report="Earlier."), observation("stop")], maxChecks=7, everyMinutes=15,
                  stopWhen="All files are loaded.")  # fmt: skip
    first, second = run.prompts("observe")
    assert (
        "This is check 1 of at most 7, one every 15 minutes; a monitor run never makes more than 1000 checks."
        in first
    )
    assert "This is check 2 of at most 7" in second
    assert "<<<DATA STOP_WHEN " in first and "<<<DATA TASK " in first
    assert "<<<DATA PREVIOUS_REPORT " not in first and "<<<DATA PREVIOUS_REPORT " in second
    assert "Earlier." in second.split("<<<DATA PREVIOUS_REPORT ")[1]
    assert "Read only: never modify, start, stop or send anything." in first
    assert_no_hidden_reasoning([first, second])
    assert run.snapshot["nodes"]["observe"]["tools"] == ["read", "grep", "find", "ls"]
    assert run.snapshot["nodes"]["observe"]["timeoutMs"] == 3_600_000
    assert run.snapshot["nodes"]["observe"]["context"] == "step"  # the conversation does not grow per check
    assert run.provider is not None and "Earlier." not in json_messages(
        run.provider.requests[1].messages[:-1]
    )
    without = monitor(run_builtin, [observation("stop")]).prompts("observe")[0]
    assert 'Answer route "stop" only when the task defines an end state and it has been reached' in without


def test_the_shipped_example_runs_offline(run_builtin: RunBuiltin) -> None:
    example = json.loads((BUILTINS / "monitor.input.json").read_text(encoding="utf-8"))
    replies = json.loads((BUILTINS / "monitor.replies.json").read_text(encoding="utf-8"))
    clock = FakeClock()
    run = run_builtin("monitor", example, replies, clock=clock)
    assert run.status == "completed" and run.final["reason"] == "stop" and clock.waits == [60.0]
    assert isinstance(run, BuiltinRun) and len(run.notifications()) == 2


def test_piw_cancel_from_another_terminal_ends_the_wait_at_once(
    cli: Any, piw_home: Path, tmp_path: Path
) -> None:
    # A real `piw run` waits 30 minutes between checks; `piw cancel` from another terminal ends it right away.
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps({"observe": [observation(report="First look.")]}), encoding="utf-8")
    process = cli.popen("run", "monitor", "--input", json.dumps({"task": TASK}), "--provider", "scripted",
                        "--script", str(replies))  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        run_id = None
        while time.monotonic() < deadline and run_id is None:
            for bundle in (piw_home / "runs").glob("*"):
                trace = bundle / "trace.ndjson"
                if trace.exists() and '"nodeId":"sleep"' in trace.read_text(encoding="utf-8"):
                    run_id = bundle.name
            assert process.poll() is None
            time.sleep(0.05)
        assert run_id is not None, "the run never reached its wait"
        done = cli("cancel", run_id)
        assert done.returncode == 0, done.stderr
        process.wait(30)  # far less than the 30-minute wait it was in
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1
    events = [
        json.loads(line) for line in (piw_home / "runs" / run_id / "trace.ndjson").read_text().splitlines()
    ]
    assert events[-1]["type"] == "run_cancelled"
    sleeps = [e for e in events if e["type"] == "node_failed" and e.get("nodeId") == "sleep"]
    assert [e["payload"]["outcome"] for e in sleeps] == ["cancelled"]
    assert sum(1 for e in events if e["type"] == "node_started" and e.get("nodeId") == "observe") == 1
    assert sum(1 for e in events if e["type"] == "notification_queued") == 1
