"""The crash matrix with agents: shell effects counted in a file, a notify, a submit agent and an
assistant agent answered by the loopback stub, SIGKILLed before and after every trace append, then resumed.

Every case must end with the uninterrupted run's final output, no completed node executed again, exactly one
notification (one outbox row, one ``notification_queued``, one conversation entry), at most one visible assistant
reply, and no model request for a step whose result was already recorded. Starts and resumes run in forked
children (the library calls ``piw run`` and ``piw resume`` make); the model is a real HTTP server in this process.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import piw.providers
from piw.errors import PiwError
from piw.store.db.run_database import open_run_database
from piw.store.fold import fold
from piw.store.trace import NODE_TERMINAL_TYPES, RUN_TERMINAL_TYPES, read_trace
from piw.testing import OpenAIStub, StubReply
from tests.support.paths import WORKFLOW_FIXTURES
from tests.test_crash_matrix import in_child

WORKFLOW = WORKFLOW_FIXTURES / "crash_agents.workflow.py"
NODES = ("prepare", "plan", "tell", "reply", "archive", "finish")
AGENTS = ("plan", "reply")
REPLY = "The release plan has three steps, ending with shipping v2."
PLAN = {"steps": 3, "title": "Ship v2"}
STEP = re.compile(r"step (\w+), attempt ([0-9a-f]{32})")


def answer(body: dict[str, Any]) -> StubReply:
    """The stub's model: submit the plan when the ``workflow`` tool is offered, else reply in prose."""
    tools = [tool.get("function", {}).get("name") for tool in body.get("tools") or []]
    if "workflow" in tools:
        return StubReply.tool("workflow", {"action": "submit", "output": PLAN}, "call_plan")
    return StubReply.text(REPLY)


def node_of(body: dict[str, Any]) -> str:
    """The step a request was made for: the last step contract in its messages."""
    found = STEP.findall(json.dumps(body.get("messages", []), ensure_ascii=False))
    return found[-1][0] if found else "?"


@pytest.fixture(scope="module")
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        server.respond = answer
        yield server


class Case:
    def __init__(self, root: Path, stub: OpenAIStub) -> None:
        self.root, self.stub = root, stub
        root.mkdir(parents=True, exist_ok=True)

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def log(self) -> Path:
        return self.root / "effects.log"

    @property
    def run_id(self) -> str:
        (run_id,) = [p.name for p in (self.home / "runs").iterdir() if not p.name.startswith(".")]
        return run_id

    @property
    def bundle(self) -> Path:
        return self.home / "runs" / self.run_id

    def _options(self) -> Any:
        from piw.agent_steps.attempt import AgentSettings
        from piw.agent_steps.executor import AgentExecutor
        from piw.run.runner import ForegroundOptions

        provider = self.stub.provider()
        executor = AgentExecutor(AgentSettings(provider_factory=lambda: provider))
        return ForegroundOptions(agent_executor_factory=lambda workflow: executor)

    def _call(self, body: Any) -> int:
        piw.providers.ALLOW_MODEL_REQUESTS = False  # loopback only, in the child too
        try:
            body()
        except PiwError as exc:
            (self.root / "error.txt").write_text(str(exc))
            return 2
        return 0

    def start(self, **env: str) -> int:
        from piw.run.runner import start_run

        raw = {"log": str(self.log)}
        return in_child(
            lambda: self._call(lambda: start_run(str(WORKFLOW), self.home, raw, None, self._options())), env
        )

    def resume(self) -> int:
        from piw.run.runner import resume_run

        return in_child(lambda: self._call(lambda: resume_run(self.run_id, self.home, self._options())), {})

    def requests_since(self, start: int) -> list[str]:
        return [node_of(body) for body in self.stub.requests[start:]]

    def session(self) -> list[dict[str, Any]]:
        path = self.bundle / "session" / "entries.ndjson"
        return [
            json.loads(line)["entry"]["message"] for line in path.read_text(encoding="utf-8").splitlines()
        ]


def replies(messages: list[dict[str, Any]]) -> int:
    """Visible assistant replies with the reply text (what the person reads)."""
    return sum(
        1
        for m in messages
        if m.get("role") == "assistant"
        and any(block.get("type") == "text" and block.get("text") == REPLY for block in m.get("content", []))
    )


@pytest.fixture(scope="module")
def reference(stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    case = Case(tmp_path_factory.mktemp("agents-reference"), stub)
    before = len(stub.requests)
    assert case.start() == 0
    events = read_trace(case.bundle / "trace.ndjson").events
    return {
        "final": fold(events).final_output,
        "count": len(events),
        "types": [e.type for e in events],
        "requests": case.requests_since(before),
    }


FULL = os.environ.get("PIW_CRASH_MATRIX") == "full"
"""``.ci/run`` sets ``PIW_CRASH_MATRIX=full`` for a phase of its own: the gate kills after every append (what the issue
asks, spread over :data:`CHUNKS` tests so both xdist workers share it); the full matrix also kills before every one."""
CHUNKS = 4


def crash_points(reference: dict[str, Any], mode: str, chunk: int) -> list[tuple[str, int]]:
    """Every ``CHUNKS``-th crash point of ``mode``, starting at ``chunk``: the chunks together cover every append."""
    count = reference["count"]
    ks = range(1, count) if mode == "after" else range(2, count + 1)
    return [(mode, k) for k in ks if k % CHUNKS == chunk]


def run_points(points: list[tuple[str, int]], stub: OpenAIStub, root: Path) -> list[dict[str, Any]]:
    """Start the workflow killed at each point, resume it, and record what happened for :func:`check`."""
    results = []
    for mode, k in points:
        case = Case(root / f"{mode}-{k}", stub)
        first = len(stub.requests)
        crashed = case.start(**{f"PIW_TEST_KILL_{mode.upper()}_APPEND": str(k)})
        prefix = read_trace(case.bundle / "trace.ndjson").events
        session_at_crash = case.session() if (case.bundle / "session" / "entries.ndjson").exists() else []
        middle = len(stub.requests)
        resumed = case.resume()
        results.append({
            "case": case, "mode": mode, "k": k, "crashed": crashed, "resumed": resumed, "prefix": prefix,
            "session_at_crash": session_at_crash, "before": case.requests_since(first)[: middle - first],
            "after": case.requests_since(middle),
        })  # fmt: skip
    return results


def test_the_reference_run_has_every_kind_of_effect(reference: dict[str, Any]) -> None:
    types = set(reference["types"])
    assert {
        "agent_prompt_sent",
        "assistant_completion_recorded",
        "notification_queued",
        "run_completed",
    } <= types
    assert reference["requests"] == ["plan", "reply"]  # one model request per agent step
    assert reference["final"] == {
        "prepared": "prepare done",
        "plan": PLAN,
        "told": True,
        "reply": REPLY,
        "archived": "archive done",
    }


def check(result: dict[str, Any], reference: dict[str, Any]) -> None:
    case: Case = result["case"]
    assert result["crashed"] == -9, (
        result["crashed"],
        (case.root / "error.txt").read_text() if (case.root / "error.txt").exists() else "",
    )
    assert result["resumed"] == 0, (
        (case.root / "error.txt").read_text() if (case.root / "error.txt").exists() else ""
    )
    events = read_trace(case.bundle / "trace.ndjson").events
    final = fold(events)
    assert final.status == "completed" and final.final_output == reference["final"]
    assert [e.type in RUN_TERMINAL_TYPES for e in events].count(True) == 1

    terminal = {e.attempt_id: e for e in events if e.type in NODE_TERMINAL_TYPES}
    assert Counter(e.node_id for e in terminal.values()) == Counter(NODES)  # each node finished exactly once
    abandoned = {
        e.payload["abandonedAttemptId"]
        for e in events
        if e.type == "run_resumed" and "abandonedAttemptId" in e.payload
    }
    effects = Counter(tuple(line.split()) for line in case.log.read_text().splitlines())
    for (node, attempt), times in effects.items():
        assert times == 1, (node, attempt)  # a shell attempt ran once
        assert attempt in terminal or attempt in abandoned, (node, attempt)
    finished_before = {e.node_id for e in result["prefix"] if e.type in NODE_TERMINAL_TYPES}
    for attempt, event in terminal.items():
        if event.node_id in ("prepare", "archive"):
            assert effects[(event.node_id, attempt)] == 1
    for node in ("prepare", "archive"):
        if node in finished_before:  # a completed shell node was never executed again
            assert sum(1 for (name, _a) in effects if name == node) == 1

    queued = [e for e in events if e.type == "notification_queued"]
    assert len(queued) == 1
    (row,) = open_run_database(case.home).outbox.notifications_of(case.run_id)
    assert row.notification_id == queued[0].payload["notificationId"] and row.delivered_at is not None
    messages = case.session()
    notes = [m for m in messages if m.get("customType") == "pi-workflows-notification"]
    assert [m["content"] for m in notes] == ["plan ready: Ship v2"]

    assert replies(messages) == 1  # at most one visible reply (exactly one, the run completed)
    assert sum(1 for e in events if e.type == "assistant_completion_recorded") == 1
    for node in AGENTS:  # no model request for a step already recorded
        if node in finished_before:
            assert node not in result["after"], (node, result["after"])
    if replies(result["session_at_crash"]) == 1:
        assert "reply" not in result["after"]  # the reply was already visible: adopted, never asked again
    assert Counter(result["before"] + result["after"]) <= Counter({"plan": 1, "reply": 1})


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize(
    "mode",
    ["after", pytest.param("before", marks=pytest.mark.skipif(not FULL, reason="PIW_CRASH_MATRIX=full"))],
)
def test_every_agent_crash_point_resumes_to_the_same_result(
    mode: str, chunk: int, reference: dict[str, Any], stub: OpenAIStub, tmp_path: Path
) -> None:
    points = crash_points(reference, mode, chunk)
    assert points, "every chunk has crash points"
    failures = []
    matrix = run_points(points, stub, tmp_path)
    for result in matrix:
        try:
            check(result, reference)
        except AssertionError as exc:
            failures.append(f"{result['mode']}-{result['k']}: {exc}")
    passed = len(matrix) - len(failures)
    assert not failures, f"{passed}/{len(matrix)} crash points passed:\n" + "\n".join(failures)
