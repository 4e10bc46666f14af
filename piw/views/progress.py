"""The progress view and the compact progress panel (``docs/design/updates-progress.md`` §8).

Samples come from the trace's ``progress`` updates, kept per track in a :class:`piw.progress.ProgressWindow`
(the first sample plus the latest nine), so memory is bounded by the number of tracks however long the run is.
Clocks are recomputed from ``now`` on every render and never write: elapsed time, sample age, and the ETA,
whose measured bounds count down from the latest sample until they read ``ETA awaiting a new sample``.

Each track line can carry a drawn bar (:func:`bar_line`): rich's ``ProgressBar`` renderable, fed the latest
sample's ``completed``/``total`` from the same :class:`Tracks` — never a progress state of its own. A track without
a total gets rich's indeterminate pulse, animated from ``now``, and the rate measured over its kept samples.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime

from rich.console import Console
from rich.progress_bar import ProgressBar
from rich.text import Text

from piw.progress import (
    TERMINAL_STATUSES,
    ProgressEstimate,
    ProgressInvalid,
    ProgressSample,
    ProgressWindow,
    estimate_progress,
    format_number,
    format_progress_line,
    format_remaining,
    parse_instant,
    prioritize_progress_estimates,
    validate_progress_data,
)
from piw.store.fold import RunState
from piw.store.trace import TraceEvent
from piw.views.base import View, plural, safe
from piw.views.updates import EventSource

PANEL_TRACKS = 4
STALE_MS = 60_000
BAR_MIN_WIDTH = 40
"""Below this many columns a track line has no room for a bar and is shown alone."""


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

    def copy(self) -> Tracks:
        """An independent copy (the windows are small: the first sample and the latest nine)."""
        other = Tracks()
        for key, track in self.tracks.items():
            window = ProgressWindow()
            for sample in track.window.samples:
                window.add(sample)
            other.tracks[key] = Track(key, window, track.latest_at)
        return other

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
    rate_per_ms: float | None = None
    """For a track without a total: units per ms over its kept samples (the pulse shows it)."""

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


def _count(data: dict[str, object], name: str) -> float | None:
    value = data.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def measured_rate(samples: Iterable[ProgressSample]) -> float | None:
    """Units per ms from the latest run of samples that share a unit and never count down; ``None`` without
    two such samples that are apart in time. Used where the estimator has no total to give an ETA from."""
    run: list[tuple[datetime, float]] = []
    unit: object = None
    for sample in samples:
        completed = _count(dict(sample.data), "completed")
        if completed is None:
            run, unit = [], None
            continue
        if run and (sample.data.get("unit") != unit or completed < run[-1][1]):
            run = []
        unit = sample.data.get("unit")
        run.append((sample.at, completed))
    if len(run) < 2:
        return None
    elapsed = _ms(run[0][0], run[-1][0])
    return (run[-1][1] - run[0][1]) / elapsed if elapsed > 0 else None


def track_lines(tracks: Tracks, now: datetime, *, finished: bool = False) -> list[TrackLine]:
    """Every track at ``now``, in ``prioritize_progress_estimates`` order.

    For a ``finished`` run each track is read at its latest sample, as the run's log line printed it then: the
    run is over, so no clock ticks on (no ETA countdown to "awaiting a new sample", no "last update … ago").
    """
    by_key: dict[str, TrackLine] = {}
    for track in tracks.tracks.values():
        samples = track.window.samples
        if finished:
            now = samples[-1].at
        estimate = estimate_progress(track.key, samples, now)
        data = estimate.data
        source = parse_instant(data.get("sourceUpdatedAt")) if data.get("sourceUpdatedAt") else None
        age = _ms(source or samples[-1].at, now)
        stale = age if data.get("status") not in TERMINAL_STATUSES and age >= STALE_MS else None
        rate = measured_rate(samples) if _count(dict(data), "total") is None else None
        by_key[track.key] = TrackLine(
            track.key, estimate, _line(estimate, samples[-1].at, now), track.latest_at, stale, rate
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
    """``nextCheckAt`` of the latest ``monitor.schedule`` record (``docs/design/builtins.md``), when there is one."""
    records = [r for r in state.updates.values() if r.type == "monitor.schedule"]
    if not records:
        return None
    latest = max(records, key=lambda r: r.seq)
    return parse_instant(latest.data.get("nextCheckAt")) if isinstance(latest.data, dict) else None


def next_check(state: RunState, now: datetime) -> str:
    """``next check 23m`` for the panel footer, or empty."""
    moment = next_check_at(state)
    return f"next check {format_remaining(_ms(now, moment))}" if moment is not None else ""


def bar_width(width: int) -> int:
    """How wide a track's bar is in a view ``width`` columns wide (0: no bar)."""
    if width < BAR_MIN_WIDTH:
        return 0
    return 12 if width >= 80 else 8


def bar_text(console: Console, bar: ProgressBar, width: int) -> Text:
    """rich's bar as ``Text``. Without a colour system the bar is drawn on a ``no_color`` console, so the
    empty part of the bar and the dark half of the pulse are blank instead of looking like a full bar."""
    if console.color_system is None:
        console = Console(file=io.StringIO(), width=width, color_system=None, no_color=True)
    text = Text()
    for segment in console.render(bar, console.options.update(width=width)):
        text.append(segment.text, segment.style)
    return text + Text(" " * max(0, width - text.cell_len))


def bar_line(console: Console, line: TrackLine, now: datetime, width: int) -> Text:
    """``{bar} {percent or rate}  {progress line}``, or the progress line alone when there is no room."""
    size = bar_width(width - len(line.indent))
    if not size:
        return Text(line.indent) + safe(line.line)
    data = line.estimate.data
    completed, total = _count(dict(data), "completed"), _count(dict(data), "total")
    status = data.get("status")
    if total is not None:
        bar = ProgressBar(total=total, completed=completed or 0.0, width=size)
        percent = f"{min(100, max(0, int(100 * (completed or 0.0) / total))):>3}%"
    elif status in TERMINAL_STATUSES:
        done = 1.0 if status == "completed" else 0.0
        bar, percent = ProgressBar(total=1.0, completed=done, width=size), f"{int(done * 100):>3}%"
    else:
        bar = ProgressBar(total=None, width=size, pulse=True, animation_time=now.timestamp())
        unit = str(data.get("unit") or "").strip()
        rate = line.rate_per_ms
        percent = f"{format_number(rate * 60_000)} {unit}/min".replace("  ", " ") if rate is not None else "…"
    out = Text(line.indent) + bar_text(console, bar, size)
    out.append(" ")
    out.append_text(safe(percent, "bold"))
    out.append("  ")
    return out + safe(line.line)


def panel_lines(
    tracks: Tracks,
    state: RunState,
    now: datetime,
    limit: int = PANEL_TRACKS,
    *,
    console: Console | None = None,
    width: int = 0,
) -> list[Text]:
    """The compact panel: at most ``limit`` track lines (with bars when a ``console`` is given), ``+N more``,
    then the staleness/next-check footer."""
    lines = panel_order(track_lines(tracks, now))
    if not lines:
        return []
    if console is not None:
        out = [bar_line(console, line, now, width) for line in lines[:limit]]
    else:
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

    def __init__(
        self, events: EventSource | Tracks, now: datetime, *, bars: bool = False, finished: bool = False
    ) -> None:
        self.events, self.now, self.bars, self.finished = events, now, bars, finished

    def lines(self, console: Console, width: int) -> Iterator[Text]:
        tracks = self.events if isinstance(self.events, Tracks) else Tracks().feed(self.events)
        lines = track_lines(tracks, self.now, finished=self.finished)
        if not lines:
            yield Text("No progress updates.", style="dim")
            return
        for line in lines:
            if self.bars:
                bar = bar_line(console, line, self.now, width)
                bar.stylize("bold", len(line.indent))
                yield bar
            else:
                yield Text(line.indent) + safe(line.line, "bold")
            estimate = line.estimate
            confidence = estimate.confidence or "no"
            detail = f"{plural(estimate.sample_count, 'sample')} · {confidence} confidence · updated {line.latest_at}"
            if line.stale_ms is not None:
                detail += f" · Last update {format_remaining(line.stale_ms)} ago"
            yield Text(line.indent + "  ") + safe(detail, "dim")


def progress_view(
    events: EventSource | Tracks, now: datetime, *, bars: bool = False, finished: bool = False
) -> ProgressView:
    """Every track at ``now`` (at its latest sample for a ``finished`` run); ``bars`` draws each one's bar beside
    its line (the viewer app does)."""
    return ProgressView(events, now, bars=bars, finished=finished)
