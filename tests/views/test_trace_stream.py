"""``trace_stream`` decodes a chunk of lines per call; it must find exactly what reading line by line finds.

A real trace file of a few hundred events (several decode chunks) gets one fault at a generated place — a
garbage line, a blank line, a line with the wrong ``seq``, a torn tail — and a generated ``limit``; the events and
the damage reported are compared with ``RecordStream`` decoding one line at a time.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piw.store.trace import TraceEvent, decode_event
from piw.views.source import RecordStream, trace_stream

RUN_ID = "20260101T000000000Z-stream-00000001"


def _lines(count: int) -> list[bytes]:
    events = []
    for seq in range(1, count + 1):
        attempt = f"{seq // 2:032x}"
        payload = {"outcome": "ok", "durationMs": seq, "output": {"n": seq, "label": "x" * (seq % 40)}}
        events.append(TraceEvent(seq, "2026-01-01T00:00:00.000Z", "node", "node_finished", RUN_ID, payload,
                                 "work", attempt))  # fmt: skip
    return [event.encode() for event in events]


FAULTS = st.sampled_from(["none", "garbage", "blank", "wrong-seq", "torn-tail", "garbage-last"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 420), FAULTS, st.integers(0, 10_000), st.one_of(st.none(), st.integers(0, 450)))
def test_chunked_decoding_finds_what_line_by_line_decoding_finds(
    tmp_path: Path, count: int, fault: str, where: int, limit: int | None
) -> None:
    lines = _lines(count)
    at = where % count
    if fault == "garbage":
        lines[at] = b'{"seq": oops\n'
    elif fault == "blank":
        lines.insert(at, b"\n")
    elif fault == "wrong-seq":
        lines[at] = lines[at].replace(b'"seq":', b'"seq":9', 1)
    elif fault == "torn-tail":
        lines[-1] = lines[-1][: len(lines[-1]) // 2]
    elif fault == "garbage-last":
        lines[-1] = b"not json\n"
    path = tmp_path / "trace.ndjson"
    path.write_bytes(b"".join(lines))
    one_by_one = RecordStream(path, decode_event, limit)
    chunked = trace_stream(path, limit)
    assert list(chunked) == list(one_by_one)
    assert chunked.corruption == one_by_one.corruption
    if fault in ("garbage", "blank", "wrong-seq") and at < count - 1 and (limit is None or limit > at):
        assert chunked.corruption is not None and f"line {at + 1}" in chunked.corruption
    again = list(chunked)  # re-iterable, and the damage is found again
    assert len(again) == len(list(one_by_one)) and chunked.corruption == one_by_one.corruption


def test_a_stream_of_a_missing_trace_is_empty(tmp_path: Path) -> None:
    stream = trace_stream(tmp_path / "trace.ndjson")
    assert list(stream) == [] and stream.corruption is None


def test_a_bad_line_that_ends_a_chunk_still_stops_the_stream_at_the_next_one(tmp_path: Path) -> None:
    """The next chunk would decode cleanly on its own; the bad line before it must still end the stream."""
    lines = _lines(400)
    ends, total = [], 0
    for line in lines:
        total += len(line)
        ends.append(total)
    last_in_first_chunk = max(i for i, end in enumerate(ends) if end <= 1 << 15)
    lines[last_in_first_chunk] = b"x" * (len(lines[last_in_first_chunk]) - 1) + b"\n"  # same length: same cut
    path = tmp_path / "trace.ndjson"
    path.write_bytes(b"".join(lines))
    stream = trace_stream(path)
    events = list(stream)
    assert len(events) == last_in_first_chunk
    assert stream.corruption is not None and f"line {last_in_first_chunk + 1}" in stream.corruption
