"""Shared pieces of the viewer tests: bundles written line by line, a fixed clock, and driving the app.

Bundles are written with the trace's own encoder (``TraceEvent.encode``), exactly the bytes a writer commits,
so the app reads real trace lines; they are built in code where the shape matters (progress tracks at 0 %,
partial, 100 % and without a total; a long run for the bench) and come from real CLI runs elsewhere
(``tests.support.views.shared_runs``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from piw.app.text import screen_text
from piw.app.viewer import ViewerApp
from piw.store.fold import fold, state_to_json
from piw.store.trace import TraceEvent, read_trace
from piw.wire import RUN_BUNDLE_SCHEMA

BASE = datetime(2026, 1, 1, tzinfo=UTC)
PROGRESS = "pi-workflows.progress.v1"
PROGRESS_RUN = "20260101T000000000Z-tracks-00000001"
NOW = BASE + timedelta(minutes=5)
"""The fixed clock of every viewer test: a little after the synthetic runs' last events."""


def at(seconds: float) -> str:
    return (BASE + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class BundleWriter:
    """Writes a run bundle: snapshot, manifest, then trace events one line at a time."""

    def __init__(self, home: Path, run_id: str, nodes: dict[str, str], edges: list[dict[str, Any]]) -> None:
        self.run_id = run_id
        self.path = home / "runs" / run_id
        (self.path / "session").mkdir(parents=True)
        snapshot = {
            "schema": "pi-workflows.definition-snapshot.v1",
            "name": run_id.split("-")[1],
            "startAt": next(iter(nodes)),
            "nodes": {node: {"nodeType": kind} for node, kind in nodes.items()},
            "edges": edges,
        }
        (self.path / "workflow.json").write_text(json.dumps(snapshot), encoding="utf-8")
        manifest = {"schema": RUN_BUNDLE_SCHEMA, "runId": run_id, "workflowName": snapshot["name"]}
        (self.path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
        self.trace = (self.path / "trace.ndjson").open("ab")
        self.seq = 0
        self.clock = 0.0

    def event(self, scope: str, kind: str, payload: dict[str, Any], node: str | None = None,
              attempt: str | None = None, seconds: float = 1.0) -> None:  # fmt: skip
        self.seq += 1
        self.clock += seconds
        line = TraceEvent(self.seq, at(self.clock), scope, kind, self.run_id, payload, node, attempt)
        self.trace.write(line.encode())

    def progress(self, key: str, seconds: float = 1.0, **data: Any) -> None:
        payload = {
            "updateId": f"u{self.seq}",
            "type": "progress",
            "key": key,
            "data": {"schema": PROGRESS, **data},
        }
        self.event("node", "update_published", payload, "work", "a1", seconds)

    def close(self, *, cache_state: bool = True) -> Path:
        self.trace.close()
        if cache_state:
            state = fold(read_trace(self.path / "trace.ndjson").events)
            (self.path / "state.json").write_text(json.dumps(state_to_json(state)), encoding="utf-8")
        return self.path


def write_progress_run(home: Path) -> str:
    """A running run whose action publishes four tracks: 0 %, partial, 100 %, and one without a total."""
    writer = BundleWriter(home, PROGRESS_RUN, {"work": "action", "report": "compute"}, [
        {"from": "work", "to": "report"}])  # fmt: skip
    writer.event("run", "run_started", {"workflowName": "tracks", "runTitle": "Progress tracks", "input": {}})
    writer.event("node", "node_started", {"nodeType": "action", "statusDetail": "Copying"}, "work", "a1")
    for step in range(4):
        writer.progress("load", status="pending", label="Load", completed=0, total=50, unit="files")
        writer.progress("rows", status="running", label="Rows", completed=100 + 120 * step, total=1000,
                        unit="rows", seconds=20)  # fmt: skip
        writer.progress("scan", status="running", label="Scan", completed=250 * (step + 1), unit="items")
    writer.progress("copy", status="completed", label="Copy", completed=10, total=10, unit="files")
    return writer.close().name


PARENT_RUN = "20260101T000000000Z-lineage-00000001"
FORK_RUN = "20260101T000001000Z-lineage-00000002"


def write_fork_with_budget(home: Path) -> tuple[str, str]:
    """A parent run and a fork of it at seq 3 that runs under a budget and records two priced requests."""
    for run_id, extra in ((PARENT_RUN, {}), (FORK_RUN, {"forkedFrom": {"runId": PARENT_RUN, "seq": 3},
                                                        "budget": {"costUsd": 2.5, "modelRequests": 5}})):  # fmt: skip
        writer = BundleWriter(home, run_id, {"ask": "agent"}, [])
        writer.event("run", "run_started", {"workflowName": "lineage", "input": {}, **extra})
        writer.event("node", "node_started", {"nodeType": "agent"}, "ask", "a1")
        if extra:
            for _ in range(2):
                usage = {"requests": 1, "input": 600, "output": 40, "cost": 0.006, "step": "a1"}
                writer.event("agent", "usage_recorded", usage, "ask", "a1")
        usage = {"requests": 2, "input": 1200, "output": 80, "cacheRead": 0, "cacheWrite": 0, "cost": 0.012}
        writer.event("node", "node_finished", {"outcome": "ok", "durationMs": 5, "output": "hi", "usage": usage},
                     "ask", "a1")  # fmt: skip
        writer.event("run", "run_completed", {"status": "completed", "finalOutput": "hi"})
        writer.close()
        if extra:
            manifest_path = writer.path / "manifest.json"
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            manifest["forkedFrom"] = extra["forkedFrom"]
            manifest_path.write_text(json.dumps(manifest), encoding="utf-8")
    return PARENT_RUN, FORK_RUN


def run_app(
    app: ViewerApp,
    steps: Callable[[Any], Awaitable[None]],
    size: tuple[int, int] = (120, 40),
) -> None:
    """Run ``app`` headless at ``size`` and drive it with ``steps(pilot)``."""

    async def main() -> None:
        async with app.run_test(size=size, notifications=True) as pilot:
            await ready(pilot)
            await steps(pilot)

    asyncio.run(main())


async def settle(pilot: Any, condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Let the app process messages until ``condition`` holds (bounded by ``timeout``; a busy machine only
    makes it take longer)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        await pilot.pause(0.02)
    workers = [(worker.name, worker.state, worker.error) for worker in pilot.app.workers]
    raise AssertionError(f"gave up waiting for {what} (workers {workers}):\n{screen_text(pilot.app)}")


async def ready(pilot: Any) -> None:
    """Wait until the runs list has read the runs (a worker thread) and an open run has read its trace."""
    from piw.app.run_screen import RunScreen
    from piw.app.runs_screen import RunsScreen

    app = pilot.app
    deadline = time.monotonic() + 60
    while True:
        await pilot.pause()
        lists = [s for s in app.screen_stack if isinstance(s, RunsScreen)]
        runs = [s for s in app.screen_stack if isinstance(s, RunScreen)]
        if all(s.loaded for s in lists) and all(s.indexed_drawn for s in runs):
            break
        assert time.monotonic() < deadline, "the viewer did not read its runs within 60 s"
        await pilot.pause(0.01)
    await pilot.pause()


def text(pilot: Any) -> str:
    return screen_text(pilot.app)
