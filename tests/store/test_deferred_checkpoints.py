"""Fold checkpoints a cold read leaves to the detached writer: started after the answer, the same files as ever.

A command that ends at its answer (``piw inspect``, ``piw watch --once``) may hand its cache writes to a detached
process (``piw.store.detached``). That process is forked only once the answer is flushed (the entry point calls
``run_pending``), and for a long read it also hashes the trace bytes the read folded, reading them again only when
the file is the very one that was read (``piw.store.foldcache._seal_later``). Either way it must leave exactly the
checkpoints, and the ``verified.json``, that a read writing them itself leaves.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from piw.store import detached, foldcache
from piw.store.checkpoint_files import checkpoint_dir
from piw.store.fold import fold
from piw.store.foldcache import replay
from piw.store.trace import TraceEvent, read_trace
from piw.wire import RUN_BUNDLE_SCHEMA
from tests.support.cli import Cli

RUN_ID = "20260101T000000000Z-later-00000001"


def _trace(pairs: int, run_id: str = RUN_ID) -> bytes:
    events = [
        TraceEvent(1, "2026-01-01T00:00:00.000Z", "run", "run_started", run_id, {"workflowName": "later"})
    ]
    for index in range(pairs):
        attempt = f"attempt-{index:08d}"
        node = f"node_{index % 7}"
        at = f"2026-01-01T00:{index // 60000 % 60:02d}:{index // 1000 % 60:02d}.{index % 1000:03d}Z"
        started = TraceEvent(
            len(events) + 1, at, "node", "node_started", run_id, {"nodeType": "compute"}, node, attempt
        )
        events.append(started)
        output = {"n": index, "label": f"item {index} " + "x" * 100}
        payload = {"outcome": "ok", "durationMs": index % 17, "output": output}
        events.append(
            TraceEvent(len(events) + 1, at, "node", "node_finished", run_id, payload, node, attempt)
        )
    events.append(TraceEvent(len(events) + 1, "2026-01-01T01:00:00.000Z", "run", "run_completed", run_id,
                             {"status": "completed", "finalOutput": {}}))  # fmt: skip
    return b"".join(event.encode() for event in events)


def _bundle(root: Path, trace: bytes) -> Path:
    bundle = root / "runs" / RUN_ID
    if bundle.exists():
        shutil.rmtree(bundle)
    (bundle / "session").mkdir(parents=True)
    snapshot = {"schema": "pi-workflows.definition-snapshot.v1", "name": "later", "startAt": "node_0",
                "nodes": {f"node_{i}": {"nodeType": "compute"} for i in range(7)}, "edges": []}  # fmt: skip
    (bundle / "workflow.json").write_text(json.dumps(snapshot), encoding="utf-8")
    manifest = {"schema": RUN_BUNDLE_SCHEMA, "runId": RUN_ID, "workflowName": "later", "status": "completed"}
    (bundle / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    (bundle / "trace.ndjson").write_bytes(trace)
    return bundle


def _files(bundle: Path) -> dict[str, bytes]:
    directory = checkpoint_dir(bundle)
    return (
        {path.name: path.read_bytes() for path in sorted(directory.iterdir())} if directory.is_dir() else {}
    )


@pytest.fixture
def forks(monkeypatch: pytest.MonkeyPatch) -> list[Callable[[], None]]:
    """Detached writes allowed, and the work each fork would run kept here instead (run it to write)."""
    kept: list[Callable[[], None]] = []
    monkeypatch.setattr(detached, "allowed", lambda: True)
    monkeypatch.setattr(detached, "_fork", kept.append)
    monkeypatch.setattr(detached, "_pending", [])
    return kept


def test_detached_work_waits_for_the_answer(forks: list[Callable[[], None]]) -> None:
    """``run_detached`` only queues: the fork comes from ``run_pending``, which the entry point calls after
    flushing the answer, and all the queued work goes to one fork."""
    done: list[int] = []
    detached.run_detached(lambda: done.append(1))
    detached.run_detached(lambda: done.append(2))
    assert forks == [] and done == []
    detached.run_pending()
    assert len(forks) == 1 and done == []
    forks[0]()
    assert done == [1, 2]
    detached.run_pending()  # nothing left
    assert len(forks) == 1


@pytest.mark.parametrize("later_from", [0, 1 << 40])
def test_a_read_that_leaves_its_checkpoints_for_later_leaves_the_same_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forks: list[Callable[[], None]], later_from: int
) -> None:
    """Hashed again by the detached writer (``later_from`` 0) or while read: nothing is written before the fork,
    and then the very checkpoints and ``verified.json`` a read that writes them itself leaves."""
    monkeypatch.setattr(foldcache, "CHECKPOINT_EVERY", 50)
    monkeypatch.setattr(foldcache, "_DETACH_STEPS", 1)
    trace = _trace(300)
    reference = _bundle(tmp_path / "reference", trace)
    monkeypatch.setattr(detached, "allowed", lambda: False)
    replay(reference, RUN_ID)
    expected = _files(reference)
    assert (
        len([name for name in expected if name.endswith(".ckpt")])
        == len(read_trace(reference / "trace.ndjson").events) // 50
    )

    monkeypatch.setattr(detached, "allowed", lambda: True)
    monkeypatch.setattr(foldcache, "_LATER_FROM", later_from)
    bundle = _bundle(tmp_path / "later", trace)
    state = replay(bundle, RUN_ID).state
    assert state == fold(read_trace(bundle / "trace.ndjson").events)
    assert _files(bundle) == {} and forks == []
    detached.run_pending()
    forks[0]()
    files = _files(bundle)
    verified = json.loads(files.pop("verified.json"))
    assert verified == {**json.loads(expected.pop("verified.json")), "trace": verified["trace"]}
    assert files == expected


def test_a_trace_that_changed_before_the_detached_writer_hashes_it_gets_no_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forks: list[Callable[[], None]]
) -> None:
    """The writer hashes bytes it reads again only from the very file the read folded (same identity): an
    appended line (another identity) means no checkpoint, and the next read still folds the whole trace."""
    monkeypatch.setattr(foldcache, "CHECKPOINT_EVERY", 50)
    monkeypatch.setattr(foldcache, "_LATER_FROM", 0)
    trace = _trace(300)
    bundle = _bundle(tmp_path, trace[: trace.rindex(b"\n", 0, -1) + 1])  # without run_completed
    replay(bundle, RUN_ID)
    time.sleep(0.01)  # (a modification time of its own, on a coarse clock)
    with (bundle / "trace.ndjson").open("ab") as out:
        out.write(trace[trace.rindex(b"\n", 0, -1) + 1 :])
    detached.run_pending()
    forks[0]()
    assert _files(bundle) == {}
    monkeypatch.setattr(detached, "allowed", lambda: False)
    assert replay(bundle, RUN_ID).state == fold(read_trace(bundle / "trace.ndjson").events)


def test_a_cold_inspect_of_a_long_run_still_leaves_its_checkpoints(cli: Cli, tmp_path: Path) -> None:
    """The whole ``piw inspect RUN --json`` process: its answer is the state, and the detached writer it starts
    after the answer leaves the checkpoints an in-process read leaves (the trace is long enough, 8 MB or more,
    for the writer to hash it too)."""
    trace = _trace(36_000)
    assert len(trace) >= 8 << 20  # (foldcache._LATER_FROM)
    bundle = _bundle(cli.home, trace)
    reference = _bundle(tmp_path / "reference", trace)
    env = {"PIW_TEST_CHECKPOINT_EVERY": "20000"}
    done = cli.process("inspect", RUN_ID, "--json", env=env)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["traceSeq"] == len(read_trace(bundle / "trace.ndjson").events)
    monkey = pytest.MonkeyPatch()
    with monkey.context() as patch:
        patch.setattr(foldcache, "CHECKPOINT_EVERY", 20_000)
        replay(reference, RUN_ID)
    expected = _files(reference)
    assert len([name for name in expected if name.endswith(".ckpt")]) == 3
    deadline = time.monotonic() + 60  # the detached writer ends on its own: wait for its last file
    while "verified.json" not in _files(bundle) and time.monotonic() < deadline:
        time.sleep(0.05)
    files = _files(bundle)
    verified, reference_verified = (
        json.loads(files.pop("verified.json")),
        json.loads(expected.pop("verified.json")),
    )
    assert verified == {**reference_verified, "trace": verified["trace"]}
    assert files == expected
