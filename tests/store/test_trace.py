"""Trace lines: encoding, the invariants of a real run's trace, torn tails and corruption, the appender."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from piw import TraceCorrupt
from piw.store.fold import fold
from piw.store.trace import (
    RUN_TERMINAL_TYPES,
    FileLayer,
    LineAppender,
    TraceEvent,
    decode_event,
    decode_lines,
    parse_trace,
    read_trace,
    resolve_durability,
)
from tests.support.runs import RunWorkflow, WorkflowMaker

WORKFLOW = """
from piw import ShellCommand, action, compute, define_workflow, edge, include, notify, shell, switch

child = define_workflow(name="child", start_at="inside",
                        nodes={"inside": compute(lambda c: {"got": c.input})})

def publish(ctx):
    ctx.publish_update("build.status", "overall", {"done": 1, "total": 2})
    return {"published": True}

workflow = define_workflow(
    name="every-event",
    start_at="first",
    nodes={
        "first": compute(lambda c: {"text": "héllo ✓"}),
        "broken": compute(lambda c: 1 / 0),
        "act": action(publish),
        "cmd": shell(ShellCommand(command="echo", args=["out"])),
        "tell": notify("note"),
        "last": compute(lambda c: {"sub": c.outputs["sub"], "echo": c.outputs["cmd"]["stdout"]}),
    },
    includes={"sub": include(child, input={"k": 1})},
    edges=[
        edge("first", "broken"),
        switch("broken", on="$result.outcome", cases={"failed": "act"}),
        edge("act", "cmd"), edge("cmd", "tell"), edge("tell", "sub"), edge("sub", "last"),
    ],
)
"""


@pytest.fixture
def finished_trace(make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path) -> Path:
    state = run_workflow(make_workflow("every", WORKFLOW))
    assert state.status == "completed", state.error
    return piw_home / "runs" / state.run_id / "trace.ndjson"


def test_a_real_trace_keeps_the_invariants(finished_trace: Path) -> None:
    raw = finished_trace.read_bytes()
    assert raw.endswith(b"\n")
    lines = raw.decode("utf-8").splitlines()
    events = [json.loads(line) for line in lines]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    for line, event in zip(lines, events, strict=True):
        assert line == json.dumps(event, separators=(",", ":"), ensure_ascii=False)  # compact, UTF-8 kept
        assert set(event) <= {"seq", "at", "scope", "type", "runId", "nodeId", "attemptId", "payload"}
        assert event["at"].endswith("Z") and len(event["at"]) == 24
        if event["scope"] in ("node", "agent", "action"):
            assert event["nodeId"] and event["attemptId"]
    assert "héllo ✓" in raw.decode("utf-8")
    terminal = [i for i, e in enumerate(events) if e["type"] in RUN_TERMINAL_TYPES]
    assert terminal == [len(events) - 1]  # exactly one terminal event, and it is last
    types = {e["type"] for e in events}
    assert {
        "run_started",
        "node_started",
        "node_finished",
        "node_failed",
        "update_published",
        "notification_queued",
        "include_entered",
        "include_exited",
        "run_completed",
    } <= types
    attempts: dict[str, list[str]] = {}
    for event in events:
        if "attemptId" in event:
            attempts.setdefault(event["attemptId"], []).append(event["type"])
    for kinds in attempts.values():  # one start, then attempt events, then exactly one terminal event
        assert kinds[0] == "node_started" and kinds.count("node_started") == 1
        assert kinds[-1] in ("node_finished", "node_failed")
        assert sum(kind in ("node_finished", "node_failed") for kind in kinds) == 1
    read = read_trace(finished_trace)
    assert len(read.events) == len(events) and read.valid_bytes == len(raw) and read.torn_bytes == 0


def _split_last(path: Path) -> tuple[bytes, bytes, int]:
    data = path.read_bytes()
    cut = data.rstrip(b"\n").rfind(b"\n") + 1
    return data[:cut], data[cut:], data.count(b"\n")


def test_torn_tail_at_every_byte_offset_is_ignored(finished_trace: Path) -> None:
    prefix, last, count = _split_last(finished_trace)
    assert last.endswith(b"\n")
    variants: list[tuple[bytes, int]] = []
    for offset in range(len(last) - 1):
        variants.append((last[:offset], offset))  # unterminated
        variants.append((last[:offset] + b"\n", offset + 1))  # terminated but torn
    for size in (1, 7, len(last)):
        variants.append((b"\0" * size, size))  # NUL-filled, as a crashed filesystem may leave it
        variants.append((b"\0" * size + b"\n", size + 1))
    for tail, torn in variants:
        read = parse_trace(prefix + tail)
        assert len(read.events) == count - 1
        assert read.valid_bytes == len(prefix) and read.torn_bytes == torn


@pytest.mark.parametrize(
    "damage",
    [
        lambda line: line[: len(line) // 2] + b"\n",
        lambda line: b"\xff\xfe" + line,
        lambda line: b"[]\n",
        lambda line: line.replace(b'"seq":2', b'"seq":9'),
        lambda line: line.replace(b'"scope":"node"', b'"scope":"galaxy"'),
    ],
)
def test_a_damaged_middle_line_raises_trace_corrupt(
    finished_trace: Path, damage: Callable[[bytes], bytes]
) -> None:
    lines = finished_trace.read_bytes().splitlines(keepends=True)
    lines[1] = damage(lines[1])
    with pytest.raises(TraceCorrupt) as info:
        parse_trace(b"".join(lines))
    assert info.value.line == 2 and "line 2" in str(info.value)


def test_a_missing_line_is_a_seq_gap(finished_trace: Path) -> None:
    lines = finished_trace.read_bytes().splitlines(keepends=True)
    with pytest.raises(TraceCorrupt, match="expected seq 3"):
        parse_trace(b"".join(lines[:2] + lines[3:]))


def test_unknown_types_and_fields_are_tolerated(finished_trace: Path) -> None:
    data = finished_trace.read_bytes()
    events = read_trace(finished_trace).events
    extra = {
        "seq": len(events) + 1,
        "at": "2026-01-01T00:00:00.000Z",
        "scope": "run",
        "type": "from_the_future",
        "runId": events[0].run_id,
        "payload": {"x": 1},
        "newField": True,
    }
    read = parse_trace(data + (json.dumps(extra) + "\n").encode())
    assert read.events[-1].type == "from_the_future"
    before, after = fold(read.events[:-1]), fold(read.events)
    assert (before.status, before.outputs, before.steps) == (after.status, after.outputs, after.steps)
    assert after.trace_seq == before.trace_seq + 1


def test_encode_round_trip() -> None:
    event = TraceEvent(
        3, "2026-01-01T00:00:00.000Z", "node", "node_finished", "r", {"output": "ünï"}, "n", "a"
    )
    line = event.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert "ünï".encode() in line
    earlier = b"".join(TraceEvent(i, "t", "run", "x", "r").encode() for i in (1, 2))
    assert parse_trace(earlier + line).events[-1] == event


class Recorder(FileLayer):
    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []

    def fsync(self, fd: int) -> None:
        self.ops.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        super().fsync(fd)

    def write_all(self, fd: int, data: bytes) -> None:
        self.ops.append(("write", os.readlink(f"/proc/self/fd/{fd}")))
        super().write_all(fd, data)


@pytest.mark.parametrize(
    ("durability", "expected"),
    [
        ("always", ["write", "fsync", "dir", "write", "fsync", "write", "fsync", "write", "fsync"]),
        ("effects", ["write", "write", "write", "fsync", "dir", "write", "fsync"]),
        ("flush", ["write", "write", "write", "write"]),
    ],
)
def test_line_appender_group_commit(tmp_path: Path, durability: Any, expected: list[str]) -> None:
    files = Recorder()
    path = tmp_path / "t.ndjson"
    appender = LineAppender(path, durability, files)
    appender.append(b"1\n", ride_along=True)
    appender.sync_required()  # only a ride-along line is pending: no fsync under effects
    appender.append(b"2\n")
    appender.append(b"3\n", sync=True)
    appender.append(b"4\n")
    appender.sync_required()
    appender.sync()  # nothing pending: no second fsync
    appender.close()
    kinds = ["dir" if op == "fsync" and target == str(tmp_path) else op for op, target in files.ops]
    assert kinds == expected
    assert path.read_bytes() == b"1\n2\n3\n4\n"
    assert (path.stat().st_mode & 0o777) == 0o600


def test_durability_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_durability() == "effects"
    assert resolve_durability("always") == "always"
    monkeypatch.setenv("PIW_DURABILITY", "flush")
    assert resolve_durability("always") == "flush"  # the environment wins
    monkeypatch.setenv("PIW_DURABILITY", "sometimes")
    with pytest.raises(Exception, match="Unknown durability 'sometimes'"):
        resolve_durability()


def _line(seq: int, **extra: object) -> bytes:
    event = {"seq": seq, "at": "2026-01-01T00:00:00.000Z", "scope": "run", "type": "t", "runId": "r", **extra}
    return json.dumps(event).encode() + b"\n"


def test_decode_lines_gives_what_decoding_each_line_gives() -> None:
    body = b"".join(_line(seq, payload={"n": seq}) for seq in range(5, 9))
    events = decode_lines(body, 5)
    assert events == [
        decode_event(line + b"\n", seq) for seq, line in zip(range(5, 9), body.splitlines(), strict=True)
    ]


@pytest.mark.parametrize(
    "body",
    [
        _line(1) + b"\n" + _line(2),  # a blank line: decode_lines would skip it, a reader must not
        _line(1) + _line(3),  # a gap in seq
        _line(1)[:-1] + _line(2),  # two objects on one line
        _line(1) + _line(2, scope="node"),  # an attempt event without its ids
        _line(1) + b'{"seq": 2, "at": \n',  # a torn line
        _line(1) + b"\xff\n",  # not UTF-8
    ],
)
def test_decode_lines_refuses_a_body_with_any_line_a_reader_would_refuse(body: bytes) -> None:
    assert decode_lines(body, 1) is None
