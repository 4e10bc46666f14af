"""The progress profile ``pi-workflows.progress.v1``: validation, the ETA estimator and its formatters.

Everything here is pure (stdlib and pydantic only, no I/O, no clock reads) so the engine, views and built-in
workflows share one estimate for the same samples, and tests pin every digit
(``docs/design/updates-progress.md`` §5–§7).
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Context, Decimal, localcontext
from typing import Any, Literal, Protocol

from piw.store.state import UpdateRecord

__all__ = [
    "PROGRESS_SCHEMA",
    "PROGRESS_STATUSES",
    "PROGRESS_WINDOW_LATEST",
    "TERMINAL_STATUSES",
    "Confidence",
    "ProgressData",
    "ProgressEstimate",
    "ProgressInvalid",
    "ProgressSample",
    "ProgressWindow",
    "estimate_progress",
    "format_number",
    "format_progress_line",
    "format_progress_report",
    "format_remaining",
    "prioritize_progress_estimates",
    "progress_records_from_trace",
    "progress_tracks_from_records",
    "sanitize_text",
    "validate_progress_data",
]

PROGRESS_SCHEMA = "pi-workflows.progress.v1"
PROGRESS_STATUSES = frozenset(
    {"pending", "running", "waiting", "blocked", "completed", "failed", "cancelled", "unknown"}
)
TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
PROGRESS_WINDOW_LATEST = 9
"""Samples a view keeps per track besides the first; the estimator only reads the last 9 of an epoch."""

Confidence = Literal["low", "medium", "high"]

_FIELDS = frozenset(
    {
        *("schema", "status", "label", "phase", "completed", "total", "unit"),
        *("sourceUpdatedAt", "sourceEstimatedFinishAt"),
    }
)
_OFFSET_SUFFIX = re.compile(r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})\Z")
_MAX_INTERVALS = 8
# Rounding any finite float needs ~330 digits; the default precision (28) raises InvalidOperation on big ones.
_WIDE = Context(prec=1000)


class ProgressInvalid(ValueError):
    """Progress data breaks the profile; a ``ValueError`` so pydantic validators can raise it unchanged."""


# ------------------------------------------------------------------------------------------ validation


@dataclass(frozen=True)
class ProgressData:
    """A validated progress snapshot; strings are kept as published, timestamps parsed to aware instants."""

    status: str
    label: str | None = None
    phase: str | None = None
    completed: float | None = None
    total: float | None = None
    unit: str | None = None
    source_updated_at: datetime | None = None
    source_estimated_finish_at: datetime | None = None
    schema: str = PROGRESS_SCHEMA

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


def validate_progress_data(data: object) -> ProgressData:
    """Apply the §5 table; the first broken rule raises ``ProgressInvalid`` with its exact message."""
    if not isinstance(data, Mapping):
        raise ProgressInvalid("progress must be an object")
    for name in data:
        if name not in _FIELDS:
            raise ProgressInvalid(f"progress.{name} is not supported")
    if data.get("schema") != PROGRESS_SCHEMA:
        raise ProgressInvalid(f"progress.schema must equal {PROGRESS_SCHEMA}")
    status = data.get("status")
    if not isinstance(status, str) or status not in PROGRESS_STATUSES:
        raise ProgressInvalid("progress.status is invalid")
    label = _text(data, "label", 200, "progress.label must be 1 to 200 characters")
    phase = _text(data, "phase", 128, "progress.phase must be 1 to 128 characters")
    completed, total = _counts(data)
    unit = _text(data, "unit", 32, "progress.unit is required with counts and must be 1 to 32 characters")
    if unit is None and (completed is not None or total is not None):
        raise ProgressInvalid("progress.unit is required with counts and must be 1 to 32 characters")
    return ProgressData(
        status=status,
        label=label,
        phase=phase,
        completed=completed,
        total=total,
        unit=unit,
        source_updated_at=_timestamp(data, "sourceUpdatedAt"),
        source_estimated_finish_at=_timestamp(data, "sourceEstimatedFinishAt"),
    )


def _text(data: Mapping[str, Any], name: str, limit: int, message: str) -> str | None:
    """An optional string field; present but ``null`` is an error, since ``null`` is not a string."""
    if name not in data:
        return None
    value = data[name]
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= limit:
        raise ProgressInvalid(message)
    return value


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _counts(data: Mapping[str, Any]) -> tuple[float | None, float | None]:
    completed: Any = data.get("completed")
    if "completed" in data and not (_is_number(completed) and completed >= 0):
        raise ProgressInvalid("progress.completed must be a finite non-negative number")
    total: Any = data.get("total")
    if "total" in data:
        if not (_is_number(total) and total > 0):
            raise ProgressInvalid("progress.total must be a finite number greater than zero")
        if completed is not None and total < completed:
            raise ProgressInvalid("progress.total must be at least progress.completed")
    return completed, total


def _timestamp(data: Mapping[str, Any], name: str) -> datetime | None:
    if name not in data:
        return None
    parsed = parse_instant(data[name])
    if parsed is None:
        raise ProgressInvalid(f"progress.{name} must be an RFC 3339 timestamp with an offset")
    return parsed


def parse_instant(value: object) -> datetime | None:
    """An RFC 3339 text with an offset as an aware ``datetime``, else ``None``.

    Python 3.11's ``fromisoformat`` rejects the lowercase ``z`` RFC 3339 allows, so it is read as ``Z``. A
    text that parses but comes back naive (``2024-01-01+05:00`` reads as a time) is refused.
    """
    if not isinstance(value, str) or _OFFSET_SUFFIX.search(value) is None:
        return None
    text = value[:-1] + "Z" if value.endswith("z") else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


# ------------------------------------------------------------------------------------------- estimator


@dataclass(frozen=True)
class ProgressSample:
    """One progress record of a track: its runtime receipt time and its data, in ``seq`` order."""

    at: datetime
    data: Mapping[str, Any]

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            raise ValueError("ProgressSample.at must be timezone-aware")


@dataclass(frozen=True)
class ProgressEstimate:
    """What the estimator knows about one track; rates are units per ms, absent values are ``None``."""

    key: str
    data: Mapping[str, Any]
    sample_count: int
    elapsed_ms: float
    delta: float | None = None
    rate_low: float | None = None
    rate_median: float | None = None
    rate_high: float | None = None
    remaining_low_ms: float | None = None
    remaining_median_ms: float | None = None
    remaining_high_ms: float | None = None
    confidence: Confidence | None = None
    source_estimated_finish_at: datetime | None = None
    unavailable_reason: str | None = None


@dataclass(frozen=True)
class _Interval:
    rate: float
    delta: float


def _ms(start: datetime, end: datetime) -> float:
    """Milliseconds between two instants, computed from whole microseconds so 60 s is exactly 60000.0."""
    return (end - start) / timedelta(milliseconds=1)


def estimate_progress(key: str, samples: Sequence[ProgressSample], now: datetime) -> ProgressEstimate:
    """Estimate one track from its samples in the order of §6; ``completed`` is never moved forward."""
    if not samples:
        raise ValueError("estimate_progress needs at least one sample")
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    parsed = [validate_progress_data(sample.data) for sample in samples]
    latest, info = samples[-1], parsed[-1]
    end = latest.at if info.is_terminal else now
    base = ProgressEstimate(key, latest.data, 1, max(0.0, _ms(samples[0].at, end)))
    if info.is_terminal:
        return base
    finish = _fresh_source_eta(info, latest.at, now)
    result = _measure(base, samples, parsed, info)
    if finish is not None:
        return replace(result, source_estimated_finish_at=finish, unavailable_reason=None)
    return result


def _fresh_source_eta(info: ProgressData, latest_at: datetime, now: datetime) -> datetime | None:
    finish = info.source_estimated_finish_at
    if finish is None:
        return None
    reference = info.source_updated_at or latest_at
    return finish if finish > reference and finish > now else None


def _measure(
    base: ProgressEstimate,
    samples: Sequence[ProgressSample],
    parsed: Sequence[ProgressData],
    info: ProgressData,
) -> ProgressEstimate:
    """Steps 4–12: the reason for no ETA, or rates and remaining time from the last epoch."""
    if info.status in ("waiting", "blocked"):
        return replace(base, unavailable_reason=f"progress is {info.status}")
    if info.completed is None or info.total is None:
        return replace(base, unavailable_reason="total is unknown")
    intervals = _intervals(samples, parsed)
    if not intervals:
        return replace(base, unavailable_reason="needs another progress sample")
    measured = replace(base, sample_count=len(intervals) + 1, delta=intervals[-1].delta)
    rates = sorted(interval.rate for interval in intervals)
    median, p25, p75 = _quantile(rates, 0.5), _quantile(rates, 0.25), _quantile(rates, 0.75)
    if median <= 0 or not any(rate > 0 for rate in rates):
        return replace(measured, unavailable_reason="no positive progress rate")
    remaining = max(0.0, info.total - info.completed)
    slow = p25 if p25 > 0 else None
    fast = p75 if p75 > 0 else median
    return replace(
        measured,
        rate_low=slow,
        rate_median=median,
        rate_high=fast,
        remaining_low_ms=remaining / fast,
        remaining_median_ms=remaining / median,
        remaining_high_ms=remaining / slow if slow is not None else None,
        confidence=_confidence((p75 - p25) / median, len(intervals)),
    )


def _starts_epoch(previous: ProgressData, current: ProgressData) -> bool:
    if (previous.phase, previous.unit, previous.total) != (current.phase, current.unit, current.total):
        return True
    before, after = previous.completed, current.completed
    if before is not None and after is not None and after < before:
        return True
    return previous.is_terminal and not current.is_terminal


def _intervals(samples: Sequence[ProgressSample], parsed: Sequence[ProgressData]) -> list[_Interval]:
    """The last (at most 8) measurable pairs of the last epoch; zero-progress pairs stay, ``dt <= 0`` go."""
    start = 0
    for index in range(1, len(parsed)):
        if _starts_epoch(parsed[index - 1], parsed[index]):
            start = index
    size = len(parsed) - start
    intervals: list[_Interval] = []
    for offset in range(max(1, size - _MAX_INTERVALS), size):
        i = start + offset
        before, after = parsed[i - 1].completed, parsed[i].completed
        dt = _ms(samples[i - 1].at, samples[i].at)
        if dt <= 0 or before is None or after is None:
            continue
        intervals.append(_Interval(rate=(after - before) / dt, delta=after - before))
    return intervals


def _quantile(ordered: Sequence[float], p: float) -> float:
    n = len(ordered)
    if n == 1:
        return ordered[0]
    pos = (n - 1) * p
    lo = math.floor(pos)
    return ordered[lo] + (ordered[min(lo + 1, n - 1)] - ordered[lo]) * (pos - lo)


def _confidence(spread: float, n: int) -> Confidence:
    if n >= 5:
        return "high" if spread <= 0.25 else "medium" if spread <= 0.5 else "low"
    if n >= 2:
        return "medium" if spread <= 0.5 else "low"
    return "low"


class ProgressWindow:
    """The bounded history a live view keeps per track: the first sample plus the latest nine.

    The first sample fixes ``elapsed_ms``; the estimator reads at most the last 9 samples of the last epoch,
    and an epoch that starts before the kept nine still covers them, so the estimate equals the full one.
    """

    def __init__(self) -> None:
        self._first: ProgressSample | None = None
        self._latest: deque[ProgressSample] = deque(maxlen=PROGRESS_WINDOW_LATEST)

    def add(self, sample: ProgressSample) -> None:
        if self._first is None:
            self._first = sample
        else:
            self._latest.append(sample)

    @property
    def samples(self) -> tuple[ProgressSample, ...]:
        return () if self._first is None else (self._first, *self._latest)


# --------------------------------------------------------------------------------------- trace records


class _RecordLike(Protocol):
    """What the track builder reads: a :class:`~piw.store.state.UpdateRecord`, or anything shaped like one."""

    @property
    def type(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def at(self) -> str: ...
    @property
    def data(self) -> Mapping[str, Any]: ...


def _wire(event: object) -> Mapping[str, Any] | None:
    """A trace event as its camelCase dict: a mapping, or anything with ``to_wire()`` / ``model_dump()``."""
    if isinstance(event, Mapping):
        return event
    for method, kwargs in (("to_wire", {}), ("model_dump", {"by_alias": True})):
        dump = getattr(event, method, None)
        if callable(dump):
            result = dump(**kwargs)
            return result if isinstance(result, Mapping) else None
    return None


def progress_records_from_trace(events: Iterable[object]) -> list[UpdateRecord]:
    """The ``progress`` updates of a trace in order; lines without the update shape are skipped, not fatal.

    The shape: an integer ``seq``, an ``at`` time, and a payload with a string ``updateId`` and ``key`` and an object
    ``data`` (``docs/updates-progress.md`` §7). An ``updateId`` that is not a string is as malformed as a missing one.

    ``events`` are camelCase dicts as on disk, or objects with ``to_wire()`` (``TraceEvent``, wire models) or
    pydantic's ``model_dump(by_alias=True)``. Data is not validated here; the track builder skips bad data.
    """
    return [record for record in map(_record, events) if record is not None]


def _record(event: object) -> UpdateRecord | None:
    wire = _wire(event)
    if wire is None or wire.get("type") != "update_published":
        return None
    payload = wire.get("payload")
    if not isinstance(payload, Mapping) or payload.get("type") != "progress":
        return None
    at, seq, key, data = wire.get("at"), wire.get("seq"), payload.get("key"), payload.get("data")
    update_id = payload.get("updateId")
    if isinstance(at, datetime):
        at = at.isoformat()
    if not (
        isinstance(at, str)
        and isinstance(seq, int)
        and isinstance(key, str)
        and isinstance(data, Mapping)
        and isinstance(update_id, str)
    ):
        return None
    return UpdateRecord(
        update_id=update_id,
        seq=seq,
        at=at,
        run_id=str(wire.get("runId", "")),
        node_id=str(wire.get("nodeId", "")),
        attempt_id=str(wire.get("attemptId", "")),
        type="progress",
        key=key,
        data=dict(data),
    )


def progress_tracks_from_records(records: Iterable[_RecordLike], now: datetime) -> list[ProgressEstimate]:
    """One estimate per key in first-publication order, from records in ``seq`` order.

    Records of another type, with an unreadable ``at`` or with data that no longer validates are skipped:
    readers tolerate history an older profile wrote. Each track keeps a :class:`ProgressWindow`, so memory is
    bounded by the number of tracks however long the trace is.
    """
    windows: dict[str, ProgressWindow] = {}
    for sample_key, sample in _valid_samples(records):
        windows.setdefault(sample_key, ProgressWindow()).add(sample)
    return [estimate_progress(key, window.samples, now) for key, window in windows.items()]


def _valid_samples(records: Iterable[_RecordLike]) -> Iterator[tuple[str, ProgressSample]]:
    for record in records:
        at = parse_instant(record.at)
        if record.type != "progress" or at is None:
            continue
        try:
            validate_progress_data(record.data)
        except ProgressInvalid:
            continue
        yield record.key, ProgressSample(at, record.data)


# ------------------------------------------------------------------------------------------ formatters

_CSI = re.compile(r"\x1b\[[^A-Za-z]*[A-Za-z]")
_LINE_BREAKS = re.compile(r"[\t\r\n]+")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f]")


def sanitize_text(text: str) -> str:
    """Drop CSI escapes, fold ``\\t\\r\\n`` runs to one space and delete other C0 controls and DEL."""
    return _CONTROLS.sub("", _LINE_BREAKS.sub(" ", _CSI.sub("", text)))


def format_number(value: float) -> str:
    """At most two decimals, half-up from the shortest repr (``2.675`` gives ``2.68``), with ``,`` groups."""
    number = float(value)
    if not math.isfinite(number):
        return str(number)
    with localcontext(_WIDE):
        rounded = Decimal(repr(number)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    text = f"{abs(rounded) if rounded == 0 else rounded:,f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _round_half_up(value: float, places: int) -> str:
    """Half-up rounding of the exact binary value, so ``1.15`` (really 1.1499…) gives ``1.1``."""
    with localcontext(_WIDE):
        return str(Decimal(value).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


def format_remaining(ms: float) -> str:
    """A duration in ms as ``Ns``, ``Nm``, ``N.Nh``/``Nh`` or ``N.Nd``, rounded up to whole seconds first."""
    if not math.isfinite(ms):
        return "0s" if math.isnan(ms) or ms < 0 else "∞"
    v = math.ceil(max(0.0, ms) / 1000) * 1000
    if v < 60_000:
        return f"{v // 1000}s"
    if v < 3_600_000:
        return f"{math.ceil(v / 60_000)}m"
    if v < 86_400_000:
        return f"{_round_half_up(v / 3_600_000, 1 if v < 36_000_000 else 0)}h"
    return f"{_round_half_up(v / 86_400_000, 1)}d"


def _count(data: Mapping[str, Any]) -> str:
    completed, total = data.get("completed"), data.get("total")
    unit = sanitize_text(str(data.get("unit", "")))
    if completed is None:
        return sanitize_text(str(data.get("status", "")))
    if total is None:
        return f"{format_number(completed)} {unit}".strip()
    return f"{format_number(completed)}/{format_number(total)} {unit}".strip()


def _eta(estimate: ProgressEstimate, now: datetime, has_phase: bool) -> str:
    if estimate.source_estimated_finish_at is not None:
        return f"source ETA {format_remaining(_ms(now, estimate.source_estimated_finish_at))}"
    low, high, median = estimate.remaining_low_ms, estimate.remaining_high_ms, estimate.remaining_median_ms
    if median is not None:
        if low is not None and high is not None and abs(high - low) >= 1000:
            return f"ETA {format_remaining(low)}–{format_remaining(high)}"
        return f"ETA {format_remaining(median)}"
    if estimate.data.get("status") in TERMINAL_STATUSES or has_phase:
        return ""
    reason = estimate.unavailable_reason
    return f"ETA unavailable ({reason})" if reason else "ETA unavailable"


def format_progress_line(estimate: ProgressEstimate, now: datetime) -> str:
    """Label, count, phase, elapsed (with a phase) and ETA, joined by two spaces; empty parts are left out.

    A label that sanitizes to nothing falls back to the key, so every line still names its track.
    """
    data = estimate.data
    label = sanitize_text(str(data.get("label", ""))) or estimate.key
    phase = sanitize_text(str(data.get("phase", "")))
    elapsed = f"elapsed {format_remaining(estimate.elapsed_ms)}" if phase else ""
    parts = (label, _count(data), phase, elapsed, _eta(estimate, now, bool(phase)))
    return "  ".join(part for part in parts if part)


def _weight(estimate: ProgressEstimate) -> int:
    if estimate.key == "overall":
        return -3
    status = estimate.data.get("status")
    return -2 if status in ("failed", "blocked") else -1 if status == "waiting" else 0


def prioritize_progress_estimates(estimates: Iterable[ProgressEstimate]) -> list[ProgressEstimate]:
    """``overall``, then failed/blocked, then waiting; the stable sort keeps publication order within each."""
    return sorted(estimates, key=_weight)


def _report_block(estimate: ProgressEstimate, now: datetime) -> str:
    lines = [f"Progress: {format_progress_line(estimate, now)}"]
    unit = estimate.data.get("unit")
    if estimate.rate_median is not None and isinstance(unit, str):
        unit = sanitize_text(unit)
        low, high = estimate.rate_low, estimate.rate_high
        if low is not None and high is not None and abs(high * 60_000 - low * 60_000) >= 0.01:
            rate = f"{format_number(low * 60_000)}–{format_number(high * 60_000)}"
        else:
            rate = format_number(estimate.rate_median * 60_000)
        lines.append(f"Rate: {rate} {unit}/min")
        samples = "1 sample" if estimate.sample_count == 1 else f"{estimate.sample_count} samples"
        lines.append(f"Estimate: {estimate.confidence or 'low'} confidence, {samples}")
    return "\n".join(lines)


def format_progress_report(
    estimates: Iterable[ProgressEstimate],
    next_check_minutes: int | None = None,
    *,
    now: datetime,
    max_chars: int = 4000,
) -> str:
    """Blocks in priority order within ``max_chars``, the footer always reserved; skipped blocks are counted.

    A block that does not fit is skipped and a later, smaller one may still fit. The omitted marker goes in
    only when it fits together with the footer, so the cap never costs the footer. ``now`` is keyword-only
    because the spec lists it after the defaulted ``next_check_minutes``.
    """
    footer = [f"Next check: {next_check_minutes} min"] if next_check_minutes is not None else []
    kept: list[str] = []
    omitted = 0
    for estimate in prioritize_progress_estimates(estimates):
        block = _report_block(estimate, now)
        if len("\n".join([*kept, block, *footer])) > max_chars:
            omitted += 1
        else:
            kept.append(block)
    if omitted:
        marker = f"{omitted} progress {'track' if omitted == 1 else 'tracks'} omitted."
        if len("\n".join([*kept, marker, *footer])) <= max_chars:
            kept.append(marker)
    if footer and len("\n".join([*kept, *footer])) <= max_chars:
        kept.extend(footer)
    return "\n".join(kept)[:max_chars]
