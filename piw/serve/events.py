"""``GET /api/runs/{run_id}/events``: a run's new trace events and progress as server-sent events.

Each trace line is sent as it is committed (``event: trace``, ``id:`` its ``seq``, ``data:`` the line exactly as
in ``trace.ndjson``); a progress update is also sent as ``event: progress`` with ``{key, at, data}``. A client that
reconnects with ``Last-Event-ID`` (or ``?after=SEQ``) gets every event after that one; without either it gets
only events committed after it connected. When the run stops (completed, waiting, failed, …) the stream sends
``event: end`` and closes. In database mode the run's mirror is brought up to date before each read
(``docs/serve.md``, "Live events").
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from piw.serve.auth import Reader
from piw.serve.reads import home_of, run_of

router = APIRouter(prefix="/api")

POLL_S = 0.1
KEEPALIVE_S = 15.0
CHUNK = 1 << 20
ENDING = frozenset(
    ("run_completed", "run_waiting", "run_failed", "run_timed_out", "run_cancelled", "run_interrupted")
)


@dataclass
class Follower:
    """Complete new lines of one trace file from a byte offset on; a shrunk file starts again at 0."""

    path: Path
    offset: int = 0
    partial: bytes = b""

    def size(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def start_at_end(self) -> None:
        """Follow from the end of the last complete line: only what is committed from now on."""
        size = self.size()
        if size == 0:
            return
        with self.path.open("rb") as handle:
            start = max(0, size - CHUNK)
            handle.seek(start)
            data = handle.read(size - start)
        cut = data.rfind(b"\n")
        self.offset = start + cut + 1 if cut >= 0 else start

    def read(self) -> tuple[list[bytes], bool]:
        """New complete lines, and whether the file shrank (repaired) so they start again at line 1."""
        size = self.size()
        restarted = size < self.offset
        if restarted:
            self.offset, self.partial = 0, b""
        if size == self.offset:
            return [], restarted
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read(min(size - self.offset, CHUNK))
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        return [line for line in lines if line.strip()], restarted


def frame(event: str, data: str, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {data}\n\n".encode()


def frames_of(line: bytes) -> tuple[list[bytes], int | None, str | None]:
    """The frames for one trace line, its ``seq`` and its type (``None`` for a line that does not parse)."""
    try:
        event: Any = json.loads(line)
        seq, kind = int(event["seq"]), str(event["type"])
    except (ValueError, KeyError, TypeError):
        return [], None, None
    text = line.decode("utf-8", "replace")
    out = [frame("trace", text, seq)]
    payload = event.get("payload") or {}
    if kind == "update_published" and isinstance(payload, dict) and payload.get("type") == "progress":
        progress = {"key": payload.get("key"), "at": event.get("at"), "data": payload.get("data")}
        out.append(frame("progress", json.dumps(progress, ensure_ascii=False, separators=(",", ":")), seq))
    return out, seq, kind


async def stream(request: Request, home: Path, run_id: str, after: int | None) -> AsyncIterator[bytes]:
    from piw.store.bundle import open_bundle
    from piw.store.place import sync_mirror

    await asyncio.to_thread(sync_mirror, home, run_id)
    from piw.store.bundle import load_state

    bundle = open_bundle(home, run_id)
    follower = Follower(bundle.trace_path)
    yield b": connected\n\n"
    if after is None:
        follower.start_at_end()
        state = await asyncio.to_thread(load_state, bundle)
        if state.is_terminal:  # nothing more will be committed
            yield frame("end", json.dumps({"runId": run_id, "status": state.status}))
            return
    idle = 0.0
    while not await request.is_disconnected():
        await asyncio.to_thread(sync_mirror, home, run_id)
        lines, restarted = await asyncio.to_thread(follower.read)
        if restarted:
            yield frame("restart", "{}")
        ended = False
        for line in lines:
            frames, seq, kind = frames_of(line)
            if seq is None or (after is not None and seq <= after):
                continue
            for piece in frames:
                yield piece
            ended = ended or kind in ENDING
        if ended:
            yield frame("end", json.dumps({"runId": run_id}))
            return
        if lines:
            idle = 0.0
            continue
        idle += POLL_S
        if idle >= KEEPALIVE_S:
            idle = 0.0
            yield b": keepalive\n\n"
        await asyncio.sleep(POLL_S)


@router.get("/runs/{run_id}/events", summary="New trace events and progress, as server-sent events.")
def events(
    request: Request,
    run_id: str,
    after: int | None = Query(None, ge=0, description="Send every event after this seq (0: from the start)."),
    last_event_id: str | None = Header(None, alias="Last-Event-ID"),
    _: Any = Reader,
) -> StreamingResponse:
    home = home_of(request)
    resolved = run_of(request, run_id)
    if after is None and last_event_id and last_event_id.strip().isdigit():
        after = int(last_event_id.strip())
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        stream(request, home, resolved, after), media_type="text/event-stream", headers=headers
    )
