"""The progress view and the compact progress panel (``updates-progress.md`` §8).

Samples come from the trace's ``progress`` updates, kept per track in a :class:`piw.progress.ProgressWindow`
(the first sample plus the latest nine), so memory is bounded by the number of tracks however long the run is.
Clocks are recomputed from ``now`` on every render and never write: elapsed time, sample age, and the ETA,
whose measured bounds count down from the latest sample until they read ``ETA awaiting a new sample``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime

from rich.console import Console
from rich.text import Text

from piw.progress import (
    TERMINAL_STATUSES,
    ProgressEstimate,
    ProgressInvalid,
    ProgressSample,
    ProgressWindow,
    estimate_progress,
    format_progress_line,
    format_remaining,
    parse_instant,
    prioritize_progress_estimates,
    validate_progress_data,
)
from piw.store.replay import RunState
from piw.store.trace import TraceEvent
from piw.views.base import View, safe
from piw.views.updates import EventSource

PANEL_TRACKS = 4
STALE_MS = 60_000


@dataclass
class Track:
    """One progress key's bounded sample history."""

    key: str
    window: ProgressWindow = field(default_factory=ProgressWindow)
    latest_at: str = ""


class Tracks:
    """Progress tracks in first-publication order, fed one trace event at a time."""

    def __init__(self) -> None:
        self.tracks: dict[str, Track] = {}

    def add(self, event: TraceEvent) -> None:
        payload = event.payload
        if event.type != "update_published" or payload.get("type") != "progress":
            return
        at, key, data = parse_instant(event.at), payload.get("key"), payload.get("data")
        if at is None or not isinstance(key, str):
            return
        try:
            validate_progress_data(data)
        except ProgressInvalid:
            return  # older history stays readable: bad samples are skipped, as the estimator does
        track = self.tracks.setdefault(key, Track(key))
        track.window.add(ProgressSample(at, data if isinstance(data, dict) else {}))
        track.latest_at = event.at

    def feed(self, events: Iterable[TraceEvent]) -> Tracks:
        for event in events:
            self.add(event)
        return self


@dataclass(frozen=True)
class TrackLine:
    """A track as displayed at ``now``: its estimate, progress line and staleness."""

    key: str
    estimate: ProgressEstimate
    line: str
    latest_at: str
    stale_ms: float | None

    @property
    def indent(self) -> str:
        return "  " * max(0, len(self.key.split("/")) - 2)


def _ms(start: datetime, end: datetime) -> float:
    return (end - start).total_seconds() * 1000


def _line(estimate: ProgressEstimate, latest: datetime, now: datetime) -> str:
    """The §7 line with the measured ETA counted down from the latest sample (§8 "ETA countdown")."""
    median = estimate.remaining_median_ms
    if estimate.source_estimated_finish_at is not None or median is None:
        return format_progress_line(estimate, now)
    gone = max(0.0, _ms(latest, now))
    if gone >= median:
        # Without remaining times and with a terminal status the formatter leaves the ETA out; the count part
        # does not read the status when counts exist, and a measured ETA implies they do.
        quiet = replace(
            estimate,
            remaining_low_ms=None,
            remaining_median_ms=None,
            remaining_high_ms=None,
            data={**estimate.data, "status": "completed"},
        )
        return format_progress_line(quiet, now) + "  ETA awaiting a new sample"
    low, high = estimate.remaining_low_ms, estimate.remaining_high_ms
    counted = replace(
        estimate,
        remaining_low_ms=None if low is None else max(0.0, low - gone),
        remaining_median_ms=median - gone,
        remaining_high_ms=None if high is None else max(0.0, high - gone),
    )
    return format_progress_line(counted, now)


def track_lines(tracks: Tracks, now: datetime) -> list[TrackLine]:
    """Every track at ``now``, in ``prioritize_progress_estimates`` order."""
    by_key: dict[str, TrackLine] = {}
    for track in tracks.tracks.values():
        samples = track.window.samples
        estimate = estimate_progress(track.key, samples, now)
        data = estimate.data
        source = parse_instant(data.get("sourceUpdatedAt")) if data.get("sourceUpdatedAt") else None
        age = _ms(source or samples[-1].at, now)
        stale = age if data.get("status") not in TERMINAL_STATUSES and age >= STALE_MS else None
        by_key[track.key] = TrackLine(
            track.key, estimate, _line(estimate, samples[-1].at, now), track.latest_at, stale
        )
    ordered = prioritize_progress_estimates(line.estimate for line in by_key.values())
    return [by_key[estimate.key] for estimate in ordered]


def _weight_zero(line: TrackLine) -> bool:
    return line.key != "overall" and line.estimate.data.get("status") not in ("failed", "blocked", "waiting")


def panel_order(lines: list[TrackLine]) -> list[TrackLine]:
    """Priority order, then among ordinary tracks the active ones before completed and cancelled ones."""
    urgent = [line for line in lines if not _weight_zero(line)]
    ordinary = [line for line in lines if _weight_zero(line)]
    done = [line for line in ordinary if line.estimate.data.get("status") in ("completed", "cancelled")]
    return urgent + [line for line in ordinary if line not in done] + done


def next_check_at(state: RunState) -> datetime | None:
    """``nextCheckAt`` of the latest ``monitor.schedule`` record (``builtins.md``), when there is one."""
    records = [r for r in state.updates.values() if r.type == "monitor.schedule"]
    if not records:
        return None
    latest = max(records, key=lambda r: r.seq)
    return parse_instant(latest.data.get("nextCheckAt")) if isinstance(latest.data, dict) else None


def next_check(state: RunState, now: datetime) -> str:
    """``next check 23m`` for the panel footer, or empty."""
    moment = next_check_at(state)
    return f"next check {format_remaining(_ms(now, moment))}" if moment is not None else ""


def panel_lines(tracks: Tracks, state: RunState, now: datetime, limit: int = PANEL_TRACKS) -> list[Text]:
    """The compact panel: at most ``limit`` track lines, ``+N more``, then the staleness/next-check footer."""
    lines = panel_order(track_lines(tracks, now))
    if not lines:
        return []
    out = [Text(line.indent) + safe(line.line) for line in lines[:limit]]
    if len(lines) > limit:
        out.append(Text(f"+{len(lines) - limit} more", style="dim"))
    footer = []
    stale = [line.stale_ms for line in lines if line.stale_ms is not None]
    if stale:
        footer.append(f"Last update {format_remaining(max(stale))} ago")
    if check := next_check(state, now):
        footer.append(check)
    if footer:
        out.append(Text("  ".join(footer), style="yellow" if stale else "dim"))
    return out


class ProgressView(View):
    """Every track: its progress line, then samples, confidence, last update and staleness."""

    def __init__(self, events: EventSource, now: datetime) -> None:
        self.events, self.now = events, now

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        lines = track_lines(Tracks().feed(self.events), self.now)
        if not lines:
            yield Text("No progress updates.", style="dim")
            return
        for line in lines:
            yield Text(line.indent) + safe(line.line, "bold")
            estimate = line.estimate
            confidence = estimate.confidence or "no"
            detail = f"{estimate.sample_count} samples · {confidence} confidence · updated {line.latest_at}"
            if line.stale_ms is not None:
                detail += f" · Last update {format_remaining(line.stale_ms)} ago"
            yield Text(line.indent + "  ") + safe(detail, "dim")


def progress_view(events: EventSource, now: datetime) -> ProgressView:
    return ProgressView(events, now)
