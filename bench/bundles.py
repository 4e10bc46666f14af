"""Synthetic run bundles for the benchmarks: a real bundle layout with a long, valid trace.

``make_bundle(home, events)`` writes ``workflow.json`` (a 12-node loop), ``manifest.json`` and a trace of
``run_started``, then ``node_started``/``node_finished`` pairs cycling over the nodes (a small output each) and,
unless ``running``, ``run_completed`` — the shape of a long compute loop, the case where per-event costs show.
Lines are the writer's own compact encoding. ``state.json`` is not written: readers must fold.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import orjson

NODES = [f"node_{i:02d}" for i in range(12)]


def run_id_for(events: int, index: int = 0) -> str:
    return f"20260101T{index // 3600 % 24:02d}{index // 60 % 60:02d}{index % 60:02d}000Z-bench-{events:08x}"


def _at(seq: int) -> str:
    ms = seq * 3
    return f"2026-01-01T{ms // 3_600_000 % 24:02d}:{ms // 60_000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def make_bundle(home: Path, events: int, *, index: int = 0, running: bool = False) -> str:
    """Write one bundle under ``home/runs`` with exactly ``events`` trace lines; returns its run id."""
    run_id = run_id_for(events, index)
    bundle = home / "runs" / run_id
    (bundle / "session").mkdir(parents=True, mode=0o700)
    nodes = {node: {"nodeType": "compute"} for node in NODES}
    edges = [{"from": a, "to": b} for a, b in zip(NODES, NODES[1:] + NODES[:1], strict=True)]
    snapshot = {"schema": "pi-workflows.definition-snapshot.v1", "name": "bench", "startAt": NODES[0],
                "nodes": nodes, "edges": edges}  # fmt: skip
    (bundle / "workflow.json").write_bytes(orjson.dumps(snapshot))
    source = {"kind": "file", "path": "/bench/bench.workflow.py", "hash": "0" * 64}
    manifest = {"schema": "pi-workflows.run-bundle.v1", "runId": run_id, "workflowName": "bench",
                "workflowSource": source, "definitionDigest": "sha256:" + "0" * 64, "startedAt": _at(1),
                "status": "running" if running else "completed", "traceSchema": "pi-workflows.trace-event.v1",
                "paths": {"workflow": "workflow.json", "state": "state.json", "trace": "trace.ndjson"}}  # fmt: skip
    (bundle / "manifest.json").write_bytes(orjson.dumps(manifest))
    with (bundle / "trace.ndjson").open("wb", buffering=1 << 20) as out:
        started = {"workflowName": "bench", "input": {}, "workflowSource": source,
                   "definitionDigest": "sha256:" + "0" * 64, "maxSteps": events}  # fmt: skip
        out.write(_line(1, "run", "run_started", run_id, started))
        seq = 1
        last = events - (0 if running else 1)
        while seq < last:
            node = NODES[(seq // 2) % len(NODES)]
            attempt = uuid.uuid4().hex
            seq += 1
            out.write(_line(seq, "node", "node_started", run_id, {"nodeType": "compute"}, node, attempt))
            if seq >= last:
                break
            seq += 1
            output = {"n": seq, "label": f"item {seq}", "ok": True}
            payload = {"outcome": "ok", "durationMs": seq % 17, "output": output}
            out.write(_line(seq, "node", "node_finished", run_id, payload, node, attempt))
        if not running:
            seq += 1
            out.write(_line(seq, "run", "run_completed", run_id, {"status": "completed", "finalOutput": {}}))
    os.chmod(bundle / "trace.ndjson", 0o600)
    return run_id


def _line(
    seq: int,
    scope: str,
    kind: str,
    run_id: str,
    payload: dict[str, object],
    node: str = "",
    attempt: str = "",
) -> bytes:
    data: dict[str, object] = {"seq": seq, "at": _at(seq), "scope": scope, "type": kind, "runId": run_id}
    if node:
        data["nodeId"], data["attemptId"] = node, attempt
    data["payload"] = payload
    return orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
