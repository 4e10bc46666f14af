"""The crash matrix: SIGKILL a run before and after every trace append, resume it, check the result.

The test-only hook ``PIW_TEST_KILL_AFTER_APPEND=k`` (``…_BEFORE_APPEND``) makes the writer kill its own
process right after (before) trace line ``k`` is written. A process crash keeps every written byte, so "before
fsync" and "after fsync" are the same point here; "before the write" is the moment after the previous line
plus whatever effect ran in between (a shell command, a notification's session entry).

The matrix forks a child per start and per resume (the library calls ``piw run`` and ``piw resume`` make),
which keeps ~80 crashes fast; the CLI path is crashed for real at a few points below and in
``tests/run/test_resume.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from piw.errors import PiwError
from piw.store.bundle import Bundle, load_state
from piw.store.db.run_database import open_run_database
from piw.store.fold import fold, state_to_json
from piw.store.trace import NODE_TERMINAL_TYPES, RUN_TERMINAL_TYPES, read_trace
from tests.support.cli import PIW_COMMAND
from tests.support.paths import WORKFLOW_FIXTURES

WORKFLOW = WORKFLOW_FIXTURES / "crash.workflow.py"
NODES = ("first", "broken", "act", "cmd", "tell", "sub/inside", "last")


def in_child(body: Callable[[], int], env: dict[str, str]) -> int:
    """Run ``body`` in a forked child with extra environment; its exit code, or ``-signal`` when killed."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 70
        try:
            os.environ.update(env)
            code = body()
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


@dataclass
class Case:
    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def log(self) -> Path:
        return self.root / "effects.log"

    @property
    def result_file(self) -> Path:
        return self.root / "result.json"

    def _report(self, call: Callable[[], Any]) -> int:
        try:
            state = call()
        except PiwError as exc:
            self.result_file.write_text(json.dumps({"error": str(exc)}))
            return 2
        self.result_file.write_text(json.dumps({"status": state.status, "finalOutput": state.final_output}))
        return 0

    def start(self, **env: str) -> int:
        from piw.run.runner import ForegroundOptions, start_run

        raw = {"log": str(self.log)}
        return in_child(
            lambda: self._report(lambda: start_run(str(WORKFLOW), self.home, raw, None, ForegroundOptions())),
            env,
        )

    def resume(self, **env: str) -> int:
        from piw.run.runner import ForegroundOptions, resume_run

        return in_child(
            lambda: self._report(lambda: resume_run(self.run_id, self.home, ForegroundOptions())), env
        )

    def result(self) -> dict[str, Any]:
        return json.loads(self.result_file.read_text())

    def piw(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("PIW_TEST_")}
        full_env.update(PIW_HOME=str(self.home), NO_COLOR="1", **env)
        return subprocess.run(
            [*PIW_COMMAND, *args],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            cwd=self.root,
        )

    @property
    def run_id(self) -> str:
        (run_id,) = [p.name for p in (self.home / "runs").iterdir()]
        return run_id

    @property
    def bundle(self) -> Path:
        return self.home / "runs" / self.run_id


def run_case(root: Path, mode: str, k: int) -> dict[str, Any]:
    """Crash at ``k`` (``mode`` before/after), resume, and return what the checks need."""
    case = Case(root / f"{mode}-{k}")
    case.root.mkdir(parents=True)
    crashed = case.start(**{f"PIW_TEST_KILL_{mode.upper()}_APPEND": str(k)})
    resumed = case.resume()
    return {"case": case, "crashed": crashed, "resumed": resumed, "result": case.result()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An uninterrupted run of the same workflow."""
    case = Case(tmp_path_factory.mktemp("reference"))
    assert case.start() == 0
    events = read_trace(case.bundle / "trace.ndjson").events
    return {"final": case.result()["finalOutput"], "count": len(events), "types": [e.type for e in events]}


@pytest.fixture(scope="module")
def matrix(reference: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root = tmp_path_factory.mktemp("matrix")
    count = reference["count"]
    points = [("after", k) for k in range(1, count + 1)] + [("before", k) for k in range(2, count + 1)]
    return [run_case(root, mode, k) for mode, k in points]


def test_reference_run_uses_every_non_agent_event(reference: dict[str, Any]) -> None:
    assert set(reference["types"]) == {
        "run_started",
        "node_started",
        "node_finished",
        "node_failed",
        "update_published",
        "process_started",
        "notification_queued",
        "include_entered",
        "include_exited",
        "run_completed",
    }
    assert reference["final"]["broken"] == "failed" and reference["final"]["sub"] == {"doubled": 42}


def check(result: dict[str, Any], reference: dict[str, Any]) -> None:
    case: Case = result["case"]
    assert result["crashed"] == -9
    events = read_trace(case.bundle / "trace.ndjson").events  # parses: seq contiguous, no damage
    if result["resumed"] == 2:
        # the crash came after the terminal event: the run had ended, resume says so and writes nothing
        assert result["result"]["error"].endswith("already ended (completed); nothing to resume.")
        assert case.root.name == f"after-{reference['count']}"
    else:
        assert result["resumed"] == 0 and result["result"]["finalOutput"] == reference["final"]
        on_disk = json.loads((case.bundle / "state.json").read_text(encoding="utf-8"))
        assert state_to_json(fold(events)) == on_disk  # the cache was refreshed before the lock was released
    final = fold(events)
    assert final.status == "completed" and final.final_output == reference["final"]
    assert load_state(Bundle(case.run_id, case.bundle)) == final  # a stale cache never shows through
    assert [e.type in RUN_TERMINAL_TYPES for e in events].count(True) == 1 and events[
        -1
    ].type == "run_completed"

    terminal = {e.attempt_id: e for e in events if e.type in NODE_TERMINAL_TYPES}
    finished_nodes = Counter(e.node_id for e in terminal.values())
    assert finished_nodes == Counter(
        NODES
    )  # every node finished exactly once: none re-executed after finishing
    abandoned = {
        e.payload["abandonedAttemptId"]
        for e in events
        if e.type == "run_resumed" and "abandonedAttemptId" in e.payload
    }
    executions = Counter(tuple(line.split()) for line in case.log.read_text().splitlines())
    for (node, attempt), times in executions.items():
        assert times == 1, (node, attempt)  # an attempt id is never reused
        if attempt not in terminal:
            assert attempt in abandoned, (node, attempt)  # ran, was interrupted, and was named abandoned
    for attempt, event in terminal.items():
        if event.node_id not in ("tell",):
            assert executions[(event.node_id, attempt)] == 1, event.node_id  # the recorded attempt really ran
    for attempt in abandoned:
        assert attempt not in terminal

    queued = [e for e in events if e.type == "notification_queued"]
    assert len(queued) == 1  # no duplicate notification
    (row,) = open_run_database(case.home).outbox.notifications_of(
        case.run_id
    )  # one outbox row, the one queued
    assert row.notification_id == queued[0].payload["notificationId"] and row.content == "told ran"
    if result["resumed"] == 0:
        assert row.delivered_at is not None  # delivered by the process that finished the run, if not before
    session = (case.bundle / "session" / "entries.ndjson").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["entry"]["message"]["content"] for line in session] == ["told ran"]
    assert len(final.updates) == 1


def test_every_crash_point_resumes_to_the_same_result(
    matrix: list[dict[str, Any]], reference: dict[str, Any]
) -> None:
    failures = []
    for result in matrix:
        try:
            check(result, reference)
        except AssertionError as exc:
            failures.append(f"{result['case'].root.name}: {exc}")
    assert not failures, "\n".join(failures)


def test_matrix_covers_interrupted_effects(matrix: list[dict[str, Any]]) -> None:
    """Some crash points fall between an effect and its terminal event; those attempts were rerun."""
    rerun = 0
    for result in matrix:
        events = read_trace(result["case"].bundle / "trace.ndjson").events
        rerun += any(e.type == "run_resumed" and "abandonedAttemptId" in e.payload for e in events)
    assert rerun >= 7


def test_a_crash_before_run_started_leaves_no_run(tmp_path: Path) -> None:
    case = Case(tmp_path)
    done = case.piw(
        "run", str(WORKFLOW), "--input", json.dumps({"log": str(case.log)}), PIW_TEST_KILL_BEFORE_APPEND="1"
    )
    assert done.returncode == -9
    listed = case.piw("runs", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout) == []  # readers skip an incomplete bundle
    refused = case.piw("resume", case.run_id)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert (
        refused.stderr
        == f"Error: Run {case.run_id} never started (its trace is empty); start it again with piw run.\n"
    )


@pytest.mark.parametrize(("mode", "k"), [("after", 7), ("before", 12), ("after", 12)])
def test_cli_crash_and_resume(tmp_path: Path, reference: dict[str, Any], mode: str, k: int) -> None:
    """The same crash through the real console script: ``piw run`` killed, ``piw resume`` finishes it."""
    case = Case(tmp_path)
    raw = json.dumps({"log": str(case.log)})
    done = case.piw(
        "run", str(WORKFLOW), "--input", raw, "--json", **{f"PIW_TEST_KILL_{mode.upper()}_APPEND": str(k)}
    )
    assert done.returncode == -9 and done.stdout == ""
    resumed = case.piw("resume", case.run_id, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {
        "runId": case.run_id,
        "status": "completed",
        "finalOutput": reference["final"],
        "error": None,
    }
    check(
        {"case": case, "crashed": -9, "resumed": 0, "result": {"finalOutput": reference["final"]}}, reference
    )


def test_repeated_crashes_during_resume(tmp_path: Path, reference: dict[str, Any]) -> None:
    case = Case(tmp_path)
    code = case.start(PIW_TEST_KILL_AFTER_APPEND="3")
    for _ in range(30):
        if code != -9:
            break
        seq = len(read_trace(case.bundle / "trace.ndjson").events)
        # +4 always lets one more attempt finish: run_resumed, node_started, an attempt event, its terminal
        code = case.resume(PIW_TEST_KILL_AFTER_APPEND=str(seq + 4))
    assert code == 0 and case.result()["finalOutput"] == reference["final"]
    events = read_trace(case.bundle / "trace.ndjson").events
    assert sum(e.type == "run_resumed" for e in events) >= 5
    assert Counter(e.node_id for e in events if e.type in NODE_TERMINAL_TYPES) == Counter(NODES)
