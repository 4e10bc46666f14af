"""A home of many runs, written directly: bundles with a small valid trace and their runs index rows.

Running ten thousand workflows would take minutes; these bundles are what such runs leave as far as listing,
filtering and removing are concerned (``run_started``, a terminal event, manifest, definition), and each index row
carries its trace's stamp, so the index is current and nothing is refolded (``piw.store.db.index``).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.store.db.database import open_database
from piw.store.db.index import COLUMN_NAMES, from_ms, search_text, trace_stamp

WORKFLOWS = ("triage", "digest", "backup", "report")
STATUSES = ("completed", "failed", "cancelled", "timed_out", "completed", "completed")
WORDS = ("invoice", "crash", "weekly", "alpha", "beta", "gamma", "Zürich")
BASE_MS = 1_780_000_000_000  # 2026-05-28


@dataclass(frozen=True)
class GenRun:
    run_id: str
    workflow: str
    title: str
    status: str
    started_ms: int
    input: dict[str, Any]
    parent: str | None = None
    schedule: str | None = None


def plan_runs(count: int, seed: int = 7) -> list[GenRun]:
    """``count`` runs a minute apart, oldest first, with varied workflows, statuses, inputs, parents, schedules."""
    rng = random.Random(seed)
    runs: list[GenRun] = []
    for index in range(count):
        started = BASE_MS + index * 60_000
        stamp = from_ms(started) or ""
        compact = stamp.replace("-", "").replace(":", "").replace(".", "")[:15] + stamp[20:23] + "Z"
        workflow = WORKFLOWS[index % len(WORKFLOWS)]
        parent = runs[index - 3].run_id if index % 97 == 5 and index >= 3 else None
        runs.append(
            GenRun(
                run_id=f"{compact}-{workflow}-{index:08x}",
                workflow=workflow,
                title=f"{workflow} {rng.choice(WORDS)} #{index}",
                status=rng.choice(STATUSES) if index % 50 else "waiting",
                started_ms=started,
                input={"text": f"{rng.choice(WORDS)} item {index}", "n": index},
                parent=parent,
                schedule="nightly" if index % 10 == 3 else None,
            )
        )
    return runs


def _line(seq: int, at: int, run_id: str, type_: str, payload: dict[str, Any]) -> str:
    return json.dumps(
        {"seq": seq, "at": from_ms(at), "scope": "run", "type": type_, "runId": run_id, "payload": payload},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def write_home(home: Path, runs: list[GenRun], *, whole: bool = True) -> None:
    """Write each run's bundle and its index row (one transaction for the rows). ``whole=False`` writes only the
    trace (what listing and filtering read): a third of the files, for the 10,000-run filter test."""
    root = home / "runs"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    source = {"kind": "builtin", "id": "generated", "revision": 1}
    snapshot = json.dumps(
        {
            "schema": "pi-workflows.definition-snapshot.v1",
            "name": "g",
            "startAt": "a",
            "nodes": {"a": {"nodeType": "compute"}},
            "edges": [],
        }
    )
    rows = []
    for run in runs:
        folder = f"{root}/{run.run_id}"
        os.mkdir(folder, 0o700)
        started: dict[str, Any] = {
            "workflowName": run.workflow,
            "runTitle": run.title,
            "input": run.input,
            "workflowSource": source,
            "definitionDigest": "sha256:" + "0" * 64,
            "maxSteps": 100,
        }
        if run.parent:
            started["continuedFrom"] = {"runId": run.parent, "nodeId": "a"}
        if run.schedule:
            started["schedule"] = {"name": run.schedule, "fireAt": from_ms(run.started_ms)}
        finished = run.started_ms + 1_000
        end_type = {
            "waiting": "run_waiting",
            "completed": "run_completed",
            "failed": "run_failed",
            "cancelled": "run_cancelled",
            "timed_out": "run_timed_out",
        }[run.status]
        end = (
            {"status": run.status, "error": "boom"}
            if run.status in ("failed", "timed_out")
            else {"status": run.status, "finalOutput": None}
        )
        if run.status == "waiting":
            end = {"status": "waiting", "waitingOn": "a", "finalOutput": None}
        trace = _line(1, run.started_ms, run.run_id, "run_started", started) + "\n"
        trace += _line(2, finished, run.run_id, end_type, end) + "\n"
        _write(f"{folder}/trace.ndjson", trace)
        if whole:
            _write(f"{folder}/workflow.json", snapshot)
        manifest = {
            "schema": "pi-workflows.run-bundle.v1",
            "runId": run.run_id,
            "workflowName": run.workflow,
            "runTitle": run.title,
            "workflowSource": source,
            "definitionDigest": "sha256:" + "0" * 64,
            "startedAt": from_ms(run.started_ms),
            "finishedAt": from_ms(finished),
            "status": run.status,
            "traceSchema": "pi-workflows.trace-event.v1",
        }
        if whole:
            _write(f"{folder}/manifest.json", json.dumps(manifest))
        values = {
            "run_id": run.run_id,
            "workflow_name": run.workflow,
            "run_title": run.title,
            "status": run.status,
            "paused": 0,
            "parent_run_id": run.parent,
            "started_at": run.started_ms,
            "updated_at": finished,
            "finished_at": finished,
            "trace_seq": 2,
            "current_node": None,
            "notice": None,
            "cost": None,
            "damage_line": None,
            "usage_json": None,
            "trace_stamp": trace_stamp(Path(folder) / "trace.ndjson"),
            "search_text": search_text(run.title, run.input),
            "schedule_name": run.schedule,
            "fire_at": run.started_ms if run.schedule else None,
        }
        rows.append(tuple(values[name] for name in COLUMN_NAMES))
    db = open_database(home)
    with db.transaction() as conn:
        conn.executemany(
            f"INSERT OR REPLACE INTO runs ({', '.join(COLUMN_NAMES)}) VALUES ({', '.join('?' * len(COLUMN_NAMES))})",
            rows,
        )
    db.created = False


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
