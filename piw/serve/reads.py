"""The read routes: runs (filtered as ``piw runs``), a run's state, steps, updates, progress and what it waits for.

Each one reads what ``piw inspect`` reads (``docs/serve.md``, "Reading"); ``GET /api/runs/{run_id}`` streams the
bytes of ``piw inspect RUN --json``. Run ids may be given as ``piw`` takes them (an id, a unique prefix, ``latest``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

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
    status: Annotated[
        list[str] | None,
        Query(
            description="Run statuses (repeat, or comma-separated), or waiting / answered as in 'piw runs'."
        ),
    ] = None,
    workflow: str | None = Query(None, description="Only runs of this workflow."),
    since: str | None = Query(None, description="Started since: a date, an instant or an age (2d, 3h)."),
    until: str | None = Query(
        None, description="Started before: a date (that day included), an instant, an age."
    ),
    search: str | None = Query(None, description="Title or input contains this text."),
    parent: str | None = Query(None, description="Only the continuations of this run."),
    schedule: str | None = Query(None, description="Only runs started by this schedule's fires."),
    limit: int | None = Query(None, description="At most this many runs."),
    _: Any = Reader,
) -> list[dict[str, Any]]:
    from piw.store.history import find_runs
    from piw.store.run_query import query_of

    home = home_of(request)
    query = query_of(home, status, workflow, since, until, search, parent, schedule, limit)
    return [row.to_json() for row in find_runs(home, query)]


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
    steps: Literal["all", "none"] = Query(
        "all", description="none: leave 'steps' empty (a long run's state at once; page /steps instead)."
    ),
    _: Any = Reader,
) -> StreamingResponse:
    from piw.views.waits import state_document

    pieces = list(state_document(home_of(request), run_of(request, run_id), at, steps=steps == "all"))
    return StreamingResponse(iter(pieces), media_type="application/json")


def _load(request: Request, run_id: str) -> Any:
    from piw.views.source import load_run

    return load_run(home_of(request), run_of(request, run_id))


@router.get(
    "/runs/{run_id}/steps", summary="One row per attempt, as the steps view (paged by offset, limit)."
)
def steps(
    request: Request,
    run_id: str,
    offset: int = Query(0, ge=0, description="Skip this many attempts (oldest first)."),
    limit: int | None = Query(None, ge=1, description="At most this many attempts."),
    _: Any = Reader,
) -> list[dict[str, Any]]:
    from piw.store.state_json import step_to_json

    records = _load(request, run_id).state.steps
    end = len(records) if limit is None else min(len(records), offset + limit)
    return [step_to_json(step) for step in records[offset:end]]


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
    from piw.service.starting import startable

    return [{"id": name, "origin": label} for name, (label, _path) in startable(home_of(request)).items()]
