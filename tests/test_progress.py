"""The progress profile, estimator and formatters (``updates-progress.md`` §5–§7, acceptance §9 items 1–9)."""

from __future__ import annotations

import math
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piw.progress import (
    PROGRESS_SCHEMA,
    ProgressEstimate,
    ProgressInvalid,
    ProgressSample,
    ProgressWindow,
    estimate_progress,
    format_number,
    format_progress_line,
    format_progress_report,
    format_remaining,
    prioritize_progress_estimates,
    progress_records_from_trace,
    progress_tracks_from_records,
    sanitize_text,
    validate_progress_data,
)
from piw.store.state import UpdateRecord

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def iso(seconds: float) -> str:
    return at(seconds).isoformat().replace("+00:00", "Z")


def _progress(
    update_id: str,
    seq: int,
    at: str,
    run_id: str,
    node_id: str,
    attempt_id: str,
    key: str,
    data: dict[str, Any],
) -> UpdateRecord:
    """A ``progress`` update as the fold keeps it."""
    return UpdateRecord(update_id, seq, at, run_id, node_id, attempt_id, "progress", key, data)


def data(**fields_: Any) -> dict[str, Any]:
    return {"schema": PROGRESS_SCHEMA, "status": "running", **fields_}


def rows(completed: float, total: float | None = 1000, **extra: Any) -> dict[str, Any]:
    counts: dict[str, Any] = {"completed": completed, "unit": "rows"}
    if total is not None:
        counts["total"] = total
    return data(**counts, **extra)


def series(*completed: float, step_s: float = 60, **extra: Any) -> list[ProgressSample]:
    return [ProgressSample(at(i * step_s), rows(c, **extra)) for i, c in enumerate(completed)]


def assert_estimate(actual: ProgressEstimate, **expected: Any) -> None:
    """Every field of the estimate: the given ones must match (floats to 1e-12), the rest must be ``None``."""
    for f in fields(ProgressEstimate):
        want = expected.pop(f.name, None)
        got = getattr(actual, f.name)
        if isinstance(want, float) and isinstance(got, float):
            assert math.isclose(got, want, rel_tol=1e-12), (f.name, got, want)
        else:
            assert got == want, (f.name, got, want)
    assert not expected, f"unknown fields {expected}"


# ---------------------------------------------------------------------------------------------- §5 validation


def test_minimal_progress_is_valid() -> None:
    parsed = validate_progress_data(data())
    assert (parsed.status, parsed.completed, parsed.total, parsed.unit) == ("running", None, None, None)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"status": "running"}, "progress.schema must equal pi-workflows.progress.v1"),
        (data(schema="pi-workflows.progress.v2"), "progress.schema must equal pi-workflows.progress.v1"),
        ({"schema": PROGRESS_SCHEMA}, "progress.status is invalid"),
        (data(status="done"), "progress.status is invalid"),
        (data(percent=3), "progress.percent is not supported"),
        (data(label="   "), "progress.label must be 1 to 200 characters"),
        (data(label="x" * 201), "progress.label must be 1 to 200 characters"),
        (data(label=None), "progress.label must be 1 to 200 characters"),
        (data(phase="x" * 129), "progress.phase must be 1 to 128 characters"),
        (data(phase=""), "progress.phase must be 1 to 128 characters"),
        (data(completed=-1, unit="rows"), "progress.completed must be a finite non-negative number"),
        (data(completed=True, unit="rows"), "progress.completed must be a finite non-negative number"),
        (data(completed=math.inf, unit="rows"), "progress.completed must be a finite non-negative number"),
        (data(completed="3", unit="rows"), "progress.completed must be a finite non-negative number"),
        (data(total=0, unit="rows"), "progress.total must be a finite number greater than zero"),
        (data(total=False, unit="rows"), "progress.total must be a finite number greater than zero"),
        (data(total=math.nan, unit="rows"), "progress.total must be a finite number greater than zero"),
        (data(completed=5, total=4, unit="rows"), "progress.total must be at least progress.completed"),
        (data(completed=1), "progress.unit is required with counts and must be 1 to 32 characters"),
        (data(total=1), "progress.unit is required with counts and must be 1 to 32 characters"),
        (data(completed=1, unit=" "), "progress.unit is required with counts and must be 1 to 32 characters"),
        (data(unit="u" * 33), "progress.unit is required with counts and must be 1 to 32 characters"),
        (
            data(sourceUpdatedAt="2025-03-01T12:00:00"),
            "progress.sourceUpdatedAt must be an RFC 3339 timestamp with an offset",
        ),
        (
            data(sourceEstimatedFinishAt="tomorrow+01:00"),
            "progress.sourceEstimatedFinishAt must be an RFC 3339 timestamp with an offset",
        ),
        (
            data(sourceUpdatedAt="2025-03-01+05:00"),
            "progress.sourceUpdatedAt must be an RFC 3339 timestamp with an offset",
        ),
        (
            data(sourceUpdatedAt=1740830400),
            "progress.sourceUpdatedAt must be an RFC 3339 timestamp with an offset",
        ),
    ],
)
def test_validation_messages(payload: dict[str, Any], message: str) -> None:
    with pytest.raises(ProgressInvalid) as caught:
        validate_progress_data(payload)
    assert str(caught.value) == message


def test_validation_boundaries_and_timestamps() -> None:
    parsed = validate_progress_data(
        data(
            label=" " + "x" * 200 + " ",
            phase="p" * 128,
            completed=0,
            total=0.5,
            unit="u" * 32,
            sourceUpdatedAt="2025-03-01T12:00:00z",
            sourceEstimatedFinishAt="2025-03-01T17:30:00+05:30",
        )
    )
    assert parsed.source_updated_at == parsed.source_estimated_finish_at == T0
    assert (
        validate_progress_data(data(sourceUpdatedAt="2025-03-01T12:00:00.123Z")).source_updated_at is not None
    )


def test_progress_invalid_is_a_value_error() -> None:
    assert issubclass(ProgressInvalid, ValueError)
    with pytest.raises(ProgressInvalid, match="progress must be an object"):
        validate_progress_data([1])


# ----------------------------------------------------------------------------------------------- §6 estimator


def test_worked_example() -> None:
    samples = series(0, 100, 220, label="Worker A")
    estimate = estimate_progress("worker-a", samples, at(120))
    assert_estimate(
        estimate,
        key="worker-a",
        data=samples[-1].data,
        sample_count=3,
        elapsed_ms=120_000.0,
        delta=120,
        rate_low=0.00175,
        rate_median=(1 / 600 + 1 / 500) / 2,
        rate_high=1 / 600 + (1 / 500 - 1 / 600) * 0.75,
        remaining_low_ms=780 / (1 / 600 + (1 / 500 - 1 / 600) * 0.75),
        remaining_median_ms=780 / ((1 / 600 + 1 / 500) / 2),
        remaining_high_ms=780 / 0.00175,
        confidence="medium",
    )
    assert (
        estimate.rate_median is not None and estimate.rate_low is not None and estimate.rate_high is not None
    )
    assert round(estimate.rate_median, 7) == 0.0018333
    assert round(estimate.rate_low, 5) == 0.00175
    assert round(estimate.rate_high, 7) == 0.0019167
    assert round((estimate.rate_high - estimate.rate_low) / estimate.rate_median, 4) == 0.0909
    assert [round(ms) for ms in (estimate.remaining_low_ms or 0, estimate.remaining_median_ms or 0)] == [
        406_957,
        425_455,
    ]
    assert round(estimate.remaining_high_ms or 0) == 445_714
    assert format_progress_line(estimate, at(120)) == "Worker A  220/1,000 rows  ETA 7m–8m"
    report = format_progress_report([estimate], now=at(120))
    assert report.splitlines() == [
        "Progress: Worker A  220/1,000 rows  ETA 7m–8m",
        "Rate: 105–115 rows/min",
        "Estimate: medium confidence, 3 samples",
    ]


def test_spec_line_example_eighteen_to_twenty_minutes() -> None:
    estimate = estimate_progress("a", series(358, 386, 420, label="Worker A"), at(120))
    assert format_progress_line(estimate, at(120)) == "Worker A  420/1,000 rows  ETA 18m–20m"


def test_empty_samples_raise_and_samples_are_validated() -> None:
    with pytest.raises(ValueError, match="at least one sample"):
        estimate_progress("a", [], T0)
    with pytest.raises(ProgressInvalid):
        estimate_progress("a", [ProgressSample(T0, data(status="nope"))], T0)
    with pytest.raises(ValueError, match="timezone-aware"):
        ProgressSample(datetime(2025, 1, 1), data())


def test_item1_no_counts_then_completed_without_total() -> None:
    first = ProgressSample(at(0), data(label="Loader"))
    estimate = estimate_progress("loader", [first], at(90))
    assert_estimate(
        estimate,
        key="loader",
        data=first.data,
        sample_count=1,
        elapsed_ms=90_000.0,
        unavailable_reason="total is unknown",
    )
    assert format_progress_line(estimate, at(90)) == "Loader  running  ETA unavailable (total is unknown)"

    samples = [ProgressSample(at(0), rows(400, total=None)), ProgressSample(at(60), rows(420, total=None))]
    estimate = estimate_progress("loader", samples, at(60))
    assert_estimate(
        estimate,
        key="loader",
        data=samples[-1].data,
        sample_count=1,
        elapsed_ms=60_000.0,
        unavailable_reason="total is unknown",
    )
    assert format_progress_line(estimate, at(60)) == "loader  420 rows  ETA unavailable (total is unknown)"


def test_item2_two_samples_give_one_interval_low_confidence_single_eta() -> None:
    samples = series(0, 100)
    estimate = estimate_progress("a", samples, at(60))
    rate = 100 / 60_000
    assert_estimate(
        estimate,
        key="a",
        data=samples[-1].data,
        sample_count=2,
        elapsed_ms=60_000.0,
        delta=100,
        rate_low=rate,
        rate_median=rate,
        rate_high=rate,
        remaining_low_ms=900 / rate,
        remaining_median_ms=900 / rate,
        remaining_high_ms=900 / rate,
        confidence="low",
    )
    assert format_progress_line(estimate, at(60)) == "a  100/1,000 rows  ETA 9m"


def test_item3_stable_rate_is_high_confidence_with_equal_bounds() -> None:
    samples = series(0, 50, 100, 150, 200, 250, 300, label="Copy")
    estimate = estimate_progress("copy", samples, at(360))
    rate = 50 / 60_000
    assert_estimate(
        estimate,
        key="copy",
        data=samples[-1].data,
        sample_count=7,
        elapsed_ms=360_000.0,
        delta=50,
        rate_low=rate,
        rate_median=rate,
        rate_high=rate,
        remaining_low_ms=700 / rate,
        remaining_median_ms=700 / rate,
        remaining_high_ms=700 / rate,
        confidence="high",
    )
    assert format_progress_line(estimate, at(360)) == "Copy  300/1,000 rows  ETA 14m"
    assert format_progress_report([estimate], now=at(360)).splitlines()[1:] == [
        "Rate: 50 rows/min",
        "Estimate: high confidence, 7 samples",
    ]


def test_item4_bursty_is_low_confidence() -> None:
    estimate = estimate_progress("a", series(0, 10, 110, 120, 220, 230), at(300))
    assert estimate.confidence == "low"
    assert estimate.rate_median == 10 / 60_000 and estimate.rate_low == 10 / 60_000
    assert estimate.rate_high == 100 / 60_000


def test_item4_zero_rate_intervals_stay_and_p25_zero_drops_upper_bound() -> None:
    samples = series(0, 0, 60, 60, 120)
    estimate = estimate_progress("a", samples, at(240))
    median = 30 / 60_000
    assert_estimate(
        estimate,
        key="a",
        data=samples[-1].data,
        sample_count=5,
        elapsed_ms=240_000.0,
        delta=60,
        rate_median=median,
        rate_high=60 / 60_000,
        remaining_low_ms=880 / (60 / 60_000),
        remaining_median_ms=880 / median,
        confidence="low",
    )
    assert format_progress_line(estimate, at(240)) == "a  120/1,000 rows  ETA 30m"
    assert format_progress_report([estimate], now=at(240)).splitlines()[1] == "Rate: 30 rows/min"


def test_item4_all_zero_rates() -> None:
    samples = series(5, 5, 5)
    estimate = estimate_progress("a", samples, at(120))
    assert_estimate(
        estimate,
        key="a",
        data=samples[-1].data,
        sample_count=3,
        elapsed_ms=120_000.0,
        delta=0,
        unavailable_reason="no positive progress rate",
    )
    assert (
        format_progress_line(estimate, at(120))
        == "a  5/1,000 rows  ETA unavailable (no positive progress rate)"
    )


def test_item5_counter_rollback_starts_a_new_epoch_then_recovers() -> None:
    samples = series(100, 200, 50)
    estimate = estimate_progress("a", samples, at(120))
    assert_estimate(
        estimate,
        key="a",
        data=samples[-1].data,
        sample_count=1,
        elapsed_ms=120_000.0,
        unavailable_reason="needs another progress sample",
    )
    assert (
        format_progress_line(estimate, at(120))
        == "a  50/1,000 rows  ETA unavailable (needs another progress sample)"
    )
    recovered = estimate_progress("a", series(100, 200, 50, 110), at(180))
    assert (recovered.sample_count, recovered.delta, recovered.confidence) == (2, 60, "low")
    assert recovered.rate_median == 60 / 60_000


@pytest.mark.parametrize(
    "change", [{"phase": "load"}, {"unit": "files"}, {"total": 2000}], ids=["phase", "unit", "total"]
)
def test_item6_phase_unit_or_total_change_starts_an_epoch(change: dict[str, Any]) -> None:
    samples = series(0, 100)
    samples.append(ProgressSample(at(120), {**rows(200), **change}))
    assert estimate_progress("a", samples, at(120)).unavailable_reason == "needs another progress sample"
    samples.append(ProgressSample(at(180), {**rows(260), **change}))
    after = estimate_progress("a", samples, at(180))
    assert (after.sample_count, after.delta, after.unavailable_reason) == (2, 60, None)


def test_item6_pairs_with_non_positive_dt_are_skipped() -> None:
    samples = [
        ProgressSample(at(0), rows(0)),
        ProgressSample(at(60), rows(100)),
        ProgressSample(at(60), rows(150)),
        ProgressSample(at(30), rows(160)),
        ProgressSample(at(90), rows(220)),
    ]
    estimate = estimate_progress("a", samples, at(90))
    assert estimate.sample_count == 3  # intervals 0→60 and 30→90 only
    assert estimate.rate_low is not None and estimate.rate_high is not None
    per_minute = [round(rate * 60_000, 9) for rate in (estimate.rate_low, estimate.rate_high)]
    assert (estimate.delta, per_minute) == (60, [70.0, 90.0])  # rates 60 and 100 per minute


def test_item6_window_is_the_last_eight_intervals() -> None:
    fast_then_steady = [0, 500, 1000, 1500, 2000, *range(2010, 2090, 10)]
    estimate = estimate_progress("a", series(*fast_then_steady, total=10_000), at(60 * 12))
    assert (estimate.sample_count, estimate.confidence) == (9, "high")
    assert estimate.rate_median == estimate.rate_low == estimate.rate_high == 10 / 60_000


def test_item7_fresh_source_eta_wins_over_measured() -> None:
    finish = iso(120 + 30 * 60)
    samples = series(0, 100, 220, label="Job", sourceUpdatedAt=iso(110), sourceEstimatedFinishAt=finish)
    estimate = estimate_progress("job", samples, at(120))
    assert estimate.source_estimated_finish_at == at(120 + 30 * 60)
    assert estimate.remaining_median_ms is not None  # measured too, but the line prefers the source
    assert format_progress_line(estimate, at(120)) == "Job  220/1,000 rows  source ETA 30m"
    assert format_progress_line(estimate, at(600)) == "Job  220/1,000 rows  source ETA 22m"


@pytest.mark.parametrize("status", ["waiting", "blocked"])
def test_item7_fresh_source_eta_for_waiting_and_blocked_has_no_reason(status: str) -> None:
    sample = ProgressSample(at(0), data(status=status, sourceEstimatedFinishAt=iso(3600)))
    estimate = estimate_progress("a", [sample], at(60))
    assert_estimate(
        estimate,
        key="a",
        data=sample.data,
        sample_count=1,
        elapsed_ms=60_000.0,
        source_estimated_finish_at=at(3600),
    )
    assert format_progress_line(estimate, at(60)) == f"a  {status}  source ETA 59m"


def test_item7_stale_source_facts_are_ignored() -> None:
    not_after_update = series(0, 100, 220, sourceUpdatedAt=iso(200), sourceEstimatedFinishAt=iso(200))
    estimate = estimate_progress("a", not_after_update, at(120))
    assert estimate.source_estimated_finish_at is None
    assert format_progress_line(estimate, at(120)) == "a  220/1,000 rows  ETA 7m–8m"

    not_after_receipt = series(0, 100, 220, sourceEstimatedFinishAt=iso(120))
    assert estimate_progress("a", not_after_receipt, at(100)).source_estimated_finish_at is None

    passed = [ProgressSample(at(0), data(status="waiting", sourceEstimatedFinishAt=iso(300)))]
    estimate = estimate_progress("a", passed, at(301))
    assert (estimate.source_estimated_finish_at, estimate.unavailable_reason) == (None, "progress is waiting")
    assert format_progress_line(estimate, at(301)) == "a  waiting  ETA unavailable (progress is waiting)"


@pytest.mark.parametrize("status", ["waiting", "blocked"])
def test_item8_waiting_and_blocked_show_their_reason(status: str) -> None:
    samples = series(0, 100, 200, status=status)
    estimate = estimate_progress("a", samples, at(120))
    assert_estimate(
        estimate,
        key="a",
        data=samples[-1].data,
        sample_count=1,
        elapsed_ms=120_000.0,
        unavailable_reason=f"progress is {status}",
    )
    line = f"a  200/1,000 rows  ETA unavailable (progress is {status})"
    assert format_progress_line(estimate, at(120)) == line


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_item8_terminal_tracks_have_no_eta_and_frozen_elapsed(status: str) -> None:
    samples = [
        ProgressSample(at(0), rows(0, phase="compile", label="Build")),
        ProgressSample(at(150), rows(1000, phase="compile", label="Build", status=status)),
    ]
    estimate = estimate_progress("build", samples, at(7200))
    assert_estimate(estimate, key="build", data=samples[-1].data, sample_count=1, elapsed_ms=150_000.0)
    assert format_progress_line(estimate, at(7200)) == "Build  1,000/1,000 rows  compile  elapsed 3m"
    without_phase = estimate_progress("b", [ProgressSample(at(0), data(status=status))], at(60))
    assert format_progress_line(without_phase, at(60)) == f"b  {status}"


def test_item8_terminal_to_running_starts_a_new_epoch() -> None:
    samples = [
        ProgressSample(at(0), rows(400)),
        ProgressSample(at(60), rows(500, status="failed")),
        ProgressSample(at(120), rows(500)),
        ProgressSample(at(180), rows(600)),
    ]
    estimate = estimate_progress("a", samples, at(180))
    assert (estimate.sample_count, estimate.delta, estimate.confidence) == (2, 100, "low")


def test_phase_line_shows_elapsed_and_no_unavailable_eta() -> None:
    sample = ProgressSample(at(0), data(label="Deploy", phase="rollout"))
    estimate = estimate_progress("deploy", [sample], at(125))
    assert format_progress_line(estimate, at(125)) == "Deploy  running  rollout  elapsed 3m"


def test_item8_tracks_are_independent_in_first_publication_order() -> None:
    events = [
        _event(1, 0, "b", rows(0)),
        _event(2, 0, "a", rows(10)),
        _event(3, 60, "b", rows(100)),
        {"seq": 4, "at": iso(61), "type": "node_started", "payload": {}},
        _event(5, 61, "x", {"status": "running"}, kind="command-batch.item"),
        _event(6, 90, "a", rows(20)),
        _event(7, 95, "c", data(status="bogus")),
        _event(8, 120, "c", data(status="waiting")),
    ]
    records = progress_records_from_trace(events)
    assert [r.key for r in records] == ["b", "a", "b", "a", "c", "c"]
    assert records[0] == _progress("upd_1", 1, iso(0), "run-1", "work", "att-1", "b", rows(0))
    tracks = progress_tracks_from_records(records, at(120))
    assert [t.key for t in tracks] == ["b", "a", "c"]
    assert [t.sample_count for t in tracks] == [2, 2, 1]
    assert tracks[0].rate_median == 100 / 60_000 and tracks[1].rate_median == 10 / 90_000
    assert tracks[2].elapsed_ms == 0.0  # the invalid sample at 95 s was skipped
    assert [t.key for t in prioritize_progress_estimates(tracks)] == ["c", "b", "a"]


def test_item8_explicit_overall_comes_first_then_problems() -> None:
    def one(key: str, status: str) -> ProgressEstimate:
        return estimate_progress(key, [ProgressSample(T0, data(status=status))], T0)

    estimates = [one("w1", "running"), one("w2", "waiting"), one("w3", "failed"), one("w4", "blocked")]
    estimates += [one("w5", "completed"), one("overall", "running")]
    ordered = prioritize_progress_estimates(estimates)
    assert [e.key for e in ordered] == ["overall", "w3", "w4", "w2", "w1", "w5"]


def test_records_from_trace_accept_wire_objects_and_skip_malformed_lines() -> None:
    class Wire:
        def to_wire(self) -> dict[str, Any]:
            return _event(9, 10, "k", rows(1))

    bad = [
        {"type": "update_published", "payload": "nope"},
        {"type": "update_published", "at": iso(0), "payload": {"type": "progress", "key": 3, "data": {}}},
        {"type": "update_published", "at": None, "payload": {"type": "progress", "key": "k", "data": {}}},
        {
            "seq": "7",
            "type": "update_published",
            "at": iso(0),
            "payload": {"type": "progress", "key": "k", "data": {}},
        },
        42,
    ]
    records = progress_records_from_trace([*bad, Wire()])
    assert [(r.seq, r.key, r.type) for r in records] == [(9, "k", "progress")]
    unreadable_at = _progress("u", 1, "yesterday", "r", "n", "a", "k", rows(1))
    assert progress_tracks_from_records([unreadable_at], T0) == []


def _event(
    seq: int, seconds: float, key: str, payload_data: dict[str, Any], kind: str = "progress"
) -> dict[str, Any]:
    return {
        "seq": seq,
        "at": iso(seconds),
        "scope": "node",
        "type": "update_published",
        "runId": "run-1",
        "nodeId": "work",
        "attemptId": "att-1",
        "payload": {"updateId": f"upd_{seq}", "type": kind, "key": key, "data": payload_data},
    }


# ---------------------------------------------------------------------------------------------- memory bound

_OTHER_STATUSES = st.sampled_from(
    ["pending", "waiting", "blocked", "completed", "failed", "cancelled", "unknown"]
)


def _rarely(draw: st.DrawFn) -> bool:
    """About one draw in 30; a middle value, since hypothesis favours the bounds of a range."""
    return draw(st.integers(0, 29)) == 17


@st.composite
def _sample_histories(draw: st.DrawFn) -> list[ProgressSample]:
    """Long steady runs (so windows matter) broken by rare epoch changes, gaps, rollbacks, odd ``at``s."""
    samples: list[ProgressSample] = []
    moment, completed, phase, unit, total = T0, 0.0, None, "rows", 100_000
    for _ in range(draw(st.integers(min_value=1, max_value=30))):
        moment += timedelta(
            milliseconds=draw(st.integers(-5_000, 120_000) if _rarely(draw) else st.just(60_000))
        )
        completed = draw(st.floats(0, completed)) if _rarely(draw) else completed + draw(st.integers(0, 500))
        phase = draw(st.sampled_from([None, "a", "b"])) if _rarely(draw) else phase
        unit = draw(st.sampled_from(["rows", "files"])) if _rarely(draw) else unit
        total = draw(st.sampled_from([100_000, 200_000])) if _rarely(draw) else total
        payload = data(status=draw(_OTHER_STATUSES) if _rarely(draw) else "running", unit=unit)
        if not _rarely(draw):
            payload["completed"] = completed
        if not _rarely(draw):
            payload["total"] = total
        if phase is not None:
            payload["phase"] = phase
        if _rarely(draw):
            payload["sourceEstimatedFinishAt"] = iso(draw(st.integers(0, 7200)))
        samples.append(ProgressSample(moment, payload))
    return samples


@settings(deadline=None)
@given(samples=_sample_histories(), now_offset=st.integers(0, 3_600_000))
def test_first_plus_latest_nine_gives_the_identical_estimate(
    samples: list[ProgressSample], now_offset: int
) -> None:
    now = samples[-1].at + timedelta(milliseconds=now_offset)
    window = ProgressWindow()
    for sample in samples:
        window.add(sample)
    assert len(window.samples) == min(len(samples), 10)
    assert window.samples[0] is samples[0] and window.samples[-1] is samples[-1]
    full = estimate_progress("k", samples, now)
    assert estimate_progress("k", window.samples, now) == full
    records = [_progress("u", i, s.at.isoformat(), "r", "n", "a", "k", s.data) for i, s in enumerate(samples)]
    assert progress_tracks_from_records(records, now) == [full]


# ---------------------------------------------------------------------------------------------- §7 formatters


def test_sanitize_text() -> None:
    assert sanitize_text("a\x1b[1;31mred\x1b[0m b") == "ared b"
    assert sanitize_text("one\t\r\n\ntwo\nthree") == "one two three"
    assert sanitize_text("bell\x07\x00del\x7f\x1b") == "belldel"
    assert sanitize_text("\x1b[12;") == "[12;"  # no final letter: not a CSI, only ESC goes
    assert sanitize_text("é – ok") == "é – ok"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1000, "1,000"),
        (0.125, "0.13"),
        (2.675, "2.68"),
        (0, "0"),
        (105.00000000000001, "105"),
        (1234567.891, "1,234,567.89"),
        (0.1, "0.1"),
        (1.005, "1.01"),
        (-0.001, "0"),
    ],
)
def test_format_number(value: float, text: str) -> None:
    assert format_number(value) == text


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0s"),
        (-5, "0s"),
        (1, "1s"),
        (59_000, "59s"),
        (59_001, "1m"),
        (60_000, "1m"),
        (3_599_000, "60m"),
        (3_600_000, "1.0h"),
        (4_140_000, "1.1h"),
        (4_500_000, "1.3h"),
        (35_999_000, "10.0h"),
        (36_000_000, "10h"),
        (86_399_000, "24h"),
        (86_400_000, "1.0d"),
        (129_600_000, "1.5d"),
    ],
)
def test_format_remaining(ms: float, text: str) -> None:
    assert format_remaining(ms) == text


def test_line_sanitizes_untrusted_text() -> None:
    sample = ProgressSample(at(0), data(label="A\x1b[2J\tB", phase="x\ny", completed=1, unit="r\x07ows"))
    estimate = estimate_progress("k", [sample], at(1))
    assert format_progress_line(estimate, at(1)) == "A B  1 rows  x y  elapsed 1s"
    blank_label = estimate_progress("key-1", [ProgressSample(at(0), data(label="\x01\x02"))], at(0))
    assert format_progress_line(blank_label, at(0)).startswith("key-1  running")


# ----------------------------------------------------------------------------------------------- §7 report


def _block_track(key: str, status: str = "running") -> ProgressEstimate:
    return estimate_progress(key, [ProgressSample(T0, data(status=status, label=key))], T0)


def test_report_footer_and_blocks() -> None:
    report = format_progress_report([_block_track("a"), _block_track("b")], 30, now=T0)
    assert report == (
        "Progress: a  running  ETA unavailable (total is unknown)\n"
        "Progress: b  running  ETA unavailable (total is unknown)\n"
        "Next check: 30 min"
    )
    assert format_progress_report([], 5, now=T0) == "Next check: 5 min"
    assert format_progress_report([], now=T0) == ""


def test_report_cap_keeps_footer_and_counts_one_omitted_track() -> None:
    small, big = _block_track("s"), _block_track("b" * 120)
    block = "Progress: s  running  ETA unavailable (total is unknown)"
    footer = "Next check: 10 min"
    marker = "1 progress track omitted."
    cap = len("\n".join([block, marker, footer]))
    report = format_progress_report([big, small], 10, now=T0, max_chars=cap)
    assert report == "\n".join([block, marker, footer])  # the big one skipped, a later smaller one still fits


def test_report_cap_plural_marker_and_marker_dropped_when_it_does_not_fit() -> None:
    tracks = [_block_track(f"t{i}") for i in range(4)]
    block = "Progress: t0  running  ETA unavailable (total is unknown)"
    footer = "Next check: 10 min"
    cap = len("\n".join([block, "3 progress tracks omitted.", footer]))
    assert format_progress_report(tracks, 10, now=T0, max_chars=cap).splitlines() == [
        block,
        "3 progress tracks omitted.",
        footer,
    ]
    tight = len("\n".join([block, footer]))
    assert format_progress_report(tracks, 10, now=T0, max_chars=tight) == f"{block}\n{footer}"
    assert format_progress_report(tracks, 10, now=T0, max_chars=5) == ""


def test_report_is_cut_to_max_chars_code_points() -> None:
    report = format_progress_report([_block_track("é" * 10)], now=T0, max_chars=4000)
    assert len(format_progress_report([_block_track("é" * 10)], now=T0, max_chars=len(report))) == len(report)
    assert report.startswith("Progress: éééééééééé")


def test_report_rate_single_value_when_bounds_are_close() -> None:
    estimate = estimate_progress("a", series(0, 100, 200), at(120))
    lines = format_progress_report([estimate], now=at(120)).splitlines()
    assert lines[1:] == ["Rate: 100 rows/min", "Estimate: medium confidence, 3 samples"]
