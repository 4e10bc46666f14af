"""A long ``piw watch`` holds the steps before the run's newest fold checkpoint as that checkpoint's (read back only
when something reads them), and its state stays the full fold of the trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piw.store import foldcache
from piw.store.bundle import Bundle
from piw.store.fold import fold
from piw.store.trace import TraceEvent, read_trace
from piw.views import follow
from piw.views.follow import Follower

RUN_ID = "20260101T000000000Z-follow-00000001"


def _pairs(start: int, count: int) -> list[TraceEvent]:
    events = []
    for index in range(count):
        seq = start + 2 * index
        node, attempt = f"n{index % 3}", f"a{seq}"
        at = f"2026-01-01T00:00:{seq // 1000 % 60:02d}.{seq % 1000:03d}Z"
        events.append(
            TraceEvent(seq, at, "node", "node_started", RUN_ID, {"nodeType": "compute"}, node, attempt)
        )
        payload = {"outcome": "ok", "durationMs": 1, "output": {"n": seq}}
        events.append(TraceEvent(seq + 1, at, "node", "node_finished", RUN_ID, payload, node, attempt))
    return events


@pytest.fixture
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Bundle:
    monkeypatch.setattr(foldcache, "CHECKPOINT_EVERY", 4)
    monkeypatch.setattr(follow, "SHED_EVERY", 8)
    path = tmp_path / "runs" / RUN_ID
    (path / "session").mkdir(parents=True)
    snapshot = {"schema": "pi-workflows.definition-snapshot.v1", "name": "f", "startAt": "n0",
                "nodes": {f"n{i}": {"nodeType": "compute"} for i in range(3)}, "edges": []}  # fmt: skip
    (path / "workflow.json").write_text(json.dumps(snapshot), encoding="utf-8")
    started = TraceEvent(1, "2026-01-01T00:00:00.000Z", "run", "run_started", RUN_ID, {"workflowName": "f"})
    (path / "trace.ndjson").write_bytes(b"".join(e.encode() for e in [started, *_pairs(2, 3)]))
    return Bundle(RUN_ID, path)


def test_a_long_watch_sheds_the_steps_before_the_newest_checkpoint(bundle: Bundle) -> None:
    follower = Follower(bundle)
    follower.poll()
    for round_ in range(4):
        appended = _pairs(follower.state.trace_seq + 1, 10)
        with bundle.trace_path.open("ab") as out:
            out.write(b"".join(event.encode() for event in appended))
        foldcache.replay(
            bundle.path, RUN_ID, write=True
        )  # the checkpoints the run's writer leaves as it appends
        follower.poll()
        expected = fold(read_trace(bundle.trace_path).events)
        held = follower.state.steps._shared
        assert held.lazy > 0 and len(held._list) < len(expected.steps), (
            round_
        )  # the older steps: not in memory
        assert follower.state == expected  # (which reads them back)
        assert list(follower.state.steps) == list(expected.steps)
