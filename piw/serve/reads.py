"""The read routes: runs (filtered as ``piw runs``), a run's state, steps, updates, progress and what it waits for.

Each one reads what ``piw inspect`` reads (``docs/serve.md``, "Reading"); ``GET /api/runs/{run_id}`` streams the
bytes of ``piw inspect RUN --json``. Run ids may be given as ``piw`` takes them (an id, a unique prefix, ``latest``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse

from piw.errors import UsageError
from piw.serve.auth import Reader
from piw.store.runref import resolve_run_id

router = APIRouter(prefix="/api")


def home_of(request: Request) -> Path:
    home = request.app.state.home
    assert isinstance(home, Path)
    return home


def run_of(request: Request, run_id: str) -> str:
    return resolve_run_id(home_of(request), run_id)


@router.get("/runs", summary="List runs, newest first (the filters of 'piw runs').")
def list_runs(
    request: Request,
    status: str | None = Query(None, description="A run status, or waiting / answered as in 'piw runs'."),
    limit: int | None = Query(None, ge=1, description="At most this many runs."),
    _: Any = Reader,
) -> list[dict[str, Any]]:
    from piw.store.history import RUN_FILTERS, run_summaries

    if status is not None and status not in RUN_FILTERS:
        raise UsageError(f"Unknown status {status!r}; use one of: {', '.join(RUN_FILTERS)}.")
    return [row.to_json() for row in run_summaries(home_of(request), status, limit)]


@router.get("/waiting", summary="What needs an answer, across runs (as 'piw waiting').")
def waiting(request: Request, _: Any = Reader) -> list[dict[str, Any]]:
    from piw.views.waits import waiting_items

    base = str(request.base_url).rstrip("/")
    return [item.to_json(base) for item in waiting_items(home_of(request))]


@router.get("/runs/{run_id}", summary="A run's replayed state: the JSON of 'piw inspect RUN --json'.")
def run_state(
    request: Request,
    run_id: str,
    at: int | None = Query(None, ge=1, description="Replay only events 1..at (time travel)."),
    _: Any = Reader,
) -> StreamingResponse:
    from piw.views.waits import state_document

    pieces = list(state_document(home_of(request), run_of(request, run_id), at))
    return StreamingResponse(iter(pieces), media_type="application/json")


def _load(request: Request, run_id: str) -> Any:
    from piw.views.source import load_run

    return load_run(home_of(request), run_of(request, run_id))


@router.get("/runs/{run_id}/steps", summary="One row per attempt, as the steps view.")
def steps(request: Request, run_id: str, _: Any = Reader) -> list[dict[str, Any]]:
    from piw.store.state_json import step_to_json

    return [step_to_json(step) for step in _load(request, run_id).state.steps]


@router.get("/runs/{run_id}/updates", summary="Every update in order, and the current value per (type, key).")
def updates(request: Request, run_id: str, _: Any = Reader) -> dict[str, Any]:
    from piw.store.state_json import update_to_json

    run = _load(request, run_id)
    history = [
        {"seq": event.seq, "at": event.at, "nodeId": event.node_id, **dict(event.payload)}
        for event in run.update_events()
    ]
    return {"history": history, "current": [update_to_json(r) for r in run.state.sorted_updates()]}


@router.get("/runs/{run_id}/progress", summary="Every progress track: its line, estimate and latest sample.")
def progress(request: Request, run_id: str, _: Any = Reader) -> list[dict[str, Any]]:
    from piw.views.progress import Tracks, track_lines

    run = _load(request, run_id)
    tracks = Tracks().feed(run.update_events())
    finished = run.state.status not in ("running", "waiting")
    return [track_json(line) for line in track_lines(tracks, datetime.now(UTC), finished=finished)]


def track_json(line: Any) -> dict[str, Any]:
    estimate = line.estimate
    return {
        "key": line.key,
        "line": line.line,
        "data": dict(estimate.data),
        "sampleCount": estimate.sample_count,
        "remainingMedianMs": estimate.remaining_median_ms,
        "confidence": estimate.confidence,
        "latestAt": line.latest_at,
        "staleMs": line.stale_ms,
    }


@router.get(
    "/runs/{run_id}/waiting", summary="What the run waits for: the request, its digest, the commands."
)
def run_waiting(request: Request, run_id: str, _: Any = Reader) -> dict[str, Any]:
    from piw.store.bundle import open_bundle
    from piw.store.fold import fold
    from piw.views.waits import decision_summary

    home = home_of(request)
    resolved = run_of(request, run_id)
    state = fold(open_bundle(home, resolved).read_trace().events)
    summary = decision_summary(home, state)
    if summary is None:
        raise UsageError(f"Run {resolved} is not waiting for an answer ({state.status}).")
    return summary


@router.get("/workflows", summary="The workflows a run may be started of (as 'piw list').")
def workflows(request: Request, _: Any = Reader) -> list[dict[str, str]]:
    from piw.run.starting import startable

    return [{"id": name, "origin": label} for name, (label, _path) in startable(home_of(request)).items()]
