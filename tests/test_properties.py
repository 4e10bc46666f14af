"""Property tests for every parser that takes outside input: it answers or refuses in one clear way, never crashes.

Outside input is anything piw did not write itself: workflow files, ``--input``, ``config.toml``, what a model sends
to the ``workflow`` tool, update envelopes and progress data, a command's output lines, trace and session files a
disk or an editor may have damaged, a planner's text, and whatever text reaches the terminal. Each test states the
contract for arbitrary input (hypothesis generates it) rather than for chosen examples.

Profiles: the default runs fast enough for the test gate; ``PIW_HYPOTHESIS_PROFILE=heavy`` runs 20 times as many
examples (``python -m pytest tests/test_properties.py --hypothesis-show-statistics``). The number of examples per
test is set by the profiles in ``tests/conftest.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from piw.config.settings import parse_config
from piw.errors import (
    DefinitionError,
    InputInvalid,
    LoadError,
    PiwError,
    ProviderError,
    ShellLineTooLong,
    TraceCorrupt,
    UpdateRejected,
)
from piw.plan import Worker, parse_plan
from piw.progress import ProgressInvalid, validate_progress_data
from piw.providers.builder import parse_arguments
from piw.safe_console import SafeConsole
from piw.store.trace import TraceEvent, parse_trace, read_trace_prefix
from piw.terminal import json_text, sanitize_terminal_text, single_line
from piw.updates.envelope import validate_update
from piw.updates.shell_lines import LineFramer
from piw.views.source import RecordStream, Tail, decode_entry
from piw.workflow.loader import import_definition, parse_input_option

# Every code point, lone surrogates included (argv and files may carry them); hypothesis leaves them out by default.
ANY_CHAR = st.characters(codec=None, categories=None)
ANY_TEXT = st.text(ANY_CHAR, max_size=200)
CONTROL = st.sampled_from(
    ["\x1b[2J", "\x1b]52;c;eA==\x07", "\r", "\x7f", "\x9b", "\u202e", "\u2066", "\x00", "\t"]
)
JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), ANY_TEXT
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(ANY_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)
FORBIDDEN = {chr(c) for c in range(0x20) if c != 0x0A} | {chr(0x7F)} | {chr(c) for c in range(0x80, 0xA0)}
FORBIDDEN |= {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def storable(value: Any) -> None:
    """What a parser hands on must be storable as a trace line: JSON, finite numbers, encodable as UTF-8."""
    json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")


# ---- --input -----------------------------------------------------------------------------------------------


def json_texts() -> st.SearchStrategy[str]:
    """JSON documents, mostly valid, some cut or spliced with junk, some nested absurdly deep."""
    valid = JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False))
    deep = st.integers(1, 100_000).map(lambda n: "[" * n + "]" * n)
    deep_objects = st.integers(1, 5_000).map(lambda n: '{"a":' * n + "1" + "}" * n)
    spliced = st.tuples(valid, ANY_TEXT, st.integers(0, 50)).map(lambda t: t[0][: t[2]] + t[1] + t[0][t[2] :])
    constants = st.sampled_from(
        ["NaN", "Infinity", "-Infinity", "[NaN]", '{"a": Infinity}', "1e999", "-1e999"]
    )
    return st.one_of(valid, deep, deep_objects, spliced, constants, ANY_TEXT)


@given(text=json_texts())
@example(text="@")  # found by a random run: the error did not start with --input
@example(text="@0")
@example(text="@a\nb")
def test_input_text_is_a_storable_value_or_one_input_error(text: str) -> None:
    try:
        value = parse_input_option(text)
    except InputInvalid as exc:
        event("refused")
        assert str(exc).startswith("--input") and "\n" not in str(exc)
        return
    event("accepted")
    storable(value)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(st.binary(max_size=300), json_texts().map(lambda t: t.encode("utf-8", "surrogatepass")))
)
def test_input_file_is_a_storable_value_or_one_input_error(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(data)
    try:
        value = parse_input_option(f"@{path}")
    except InputInvalid as exc:
        assert str(exc).startswith("--input") and "\n" not in str(exc)
        return
    storable(value)


# ---- workflow definitions ----------------------------------------------------------------------------------

NODE_EXPRESSIONS = st.sampled_from(
    [
        "compute(lambda c: 1)", "compute({'a': 1})", "compute()", "compute(5)", "action(lambda c: 1)",
        "action(lambda c: 1, timeout_s=-1)", "action(lambda c: 1, timeout_s=float('nan'))", "shell('echo')",
        "shell({'command': 'echo'})", "notify('hi')", "notify(3)", "checkpoint()", "agent(prompt='x')",
        "agent(prompt=5)", "agent(prompt='x', expected_output=assistant_message(max_chars=0))",
        "agent(prompt='x', tools=['workflow'])", "agent(prompt='x', timeout_s=True)", "42", "None", "'node'",
        "human_decision(audience='ops', choices=['a'], request='?')", "human_decision(audience='', choices=[])",
    ]
)  # fmt: skip
IDS = st.one_of(st.sampled_from(["a", "b", "c", "_x", "n-1"]), st.text(ANY_CHAR, max_size=6))


@st.composite
def workflow_sources(draw: st.DrawFn) -> str:
    nodes = draw(st.dictionaries(IDS, NODE_EXPRESSIONS, max_size=4))
    ids = [*nodes, *draw(st.lists(IDS, max_size=2))]
    id_of = st.sampled_from(ids) if ids else IDS
    edges = draw(
        st.lists(
            st.one_of(
                st.tuples(id_of, id_of).map(lambda e: f"edge({e[0]!r}, {e[1]!r})"),
                st.tuples(
                    id_of, st.sampled_from(["$.route", "$result.outcome", "route", "$exit"]), id_of
                ).map(lambda s: f"switch({s[0]!r}, on={s[1]!r}, cases={{'x': {s[2]!r}}})"),
                st.sampled_from(["'a'", "3", "edge('a')"]),
            ),
            max_size=4,
        )
    )
    name = draw(st.one_of(st.just("w"), ANY_TEXT, st.sampled_from(["", "  "])))
    start = draw(id_of)
    body = ", ".join(f"{node_id!r}: {expr}" for node_id, expr in nodes.items())
    extra = draw(st.sampled_from(["", ", max_steps=0", ", max_steps='x'", ", title=3", ", exits={'e': 1}"]))
    tail = draw(
        st.sampled_from(["", "\nraise SystemExit(2)", "\nworkflow = 3", "\nimport nosuchmodule", "\n)"])
    )
    return (
        "from piw import action, agent, assistant_message, checkpoint, compute, define_workflow, edge, "
        "human_decision, notify, shell, switch\n"
        f"workflow = define_workflow(name={name!r}, start_at={start!r}, nodes={{{body}}}, "
        f"edges=[{', '.join(edges)}]{extra})" + tail
    )


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(source=workflow_sources())
def test_a_workflow_file_loads_or_is_one_definition_or_load_error(source: str, tmp_path: Path) -> None:
    from piw.workflow.graph import flatten

    path = tmp_path / "w.workflow.py"
    path.write_text(source, encoding="utf-8", errors="surrogatepass")
    modules = set(sys.modules)
    try:
        flatten(import_definition(path))
        event("loaded and validated")
    except (DefinitionError, LoadError) as exc:
        event(type(exc).__name__)
        assert str(exc) and "Traceback" not in str(exc)
    finally:
        for name in set(sys.modules) - modules:
            if name.startswith("piw_workflow_"):
                del sys.modules[name]


# ---- config.toml -------------------------------------------------------------------------------------------

CONFIG_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20)),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from(
                ["api", "base_url", "models", "id", "cost", "compat", "api_key", "x", "max_turns"]
            ),
            children,
            max_size=3,
        ),
    ),
    max_leaves=12,
)


@given(
    raw=st.dictionaries(
        st.sampled_from(["default", "durability", "providers", "agent", "budget", "bogus"]),
        CONFIG_VALUES,
        max_size=4,
    )
)
def test_a_config_document_is_valid_or_one_provider_error(raw: dict[str, Any]) -> None:
    try:
        parse_config(raw)
    except ProviderError as exc:
        assert str(exc) and "\n" not in str(exc)


# ---- workflow tool arguments --------------------------------------------------------------------------------


def _tool(updates: bool) -> Any:
    from piw.agent_steps.contract import make_contract
    from piw.agent_steps.workflow_tool import ActiveStep, WorkflowTool

    contract = make_contract("run", "wf", "step", "a" * 32, None, updates=updates)

    def accept(value: Any) -> Any:
        if not isinstance(value, dict):
            raise ValueError("output must be an object")
        return value

    step = ActiveStep(contract=contract, accept=accept, wants_object=True)
    return WorkflowTool(step, publish=lambda update, call_id: {"ok": True}, status=lambda: {"updates": []},
                        updates=updates)  # fmt: skip


CALL_ARGUMENTS = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries(
        {"action": st.one_of(st.sampled_from(["submit", "update", "status", "SUBMIT", ""]), JSON_LEAVES)},
        optional={
            "output": JSON_VALUES,
            "step": st.one_of(st.just("step"), JSON_LEAVES),
            "attempt": st.one_of(st.just("a" * 32), JSON_LEAVES),
            "update": JSON_VALUES,
            "extra": JSON_LEAVES,
        },
    ),
)


@given(
    raw=st.one_of(CALL_ARGUMENTS.map(lambda v: json.dumps(v, ensure_ascii=False)), ANY_TEXT),
    updates=st.booleans(),
)
def test_any_workflow_tool_call_gets_a_tool_result(raw: str, updates: bool) -> None:
    arguments, error = parse_arguments(raw)
    assert isinstance(arguments, dict)
    tool = _tool(updates)
    result = tool.handle("call_1", arguments, error)
    event("accepted" if tool.step.accepted else "tool error" if result.is_error else "other result")
    assert isinstance(result.content, str) and result.content
    if result.terminate and not result.is_error:  # only an accepted output ends the step successfully
        assert tool.step.accepted and isinstance(tool.step.output, dict)


# ---- update envelopes and progress data -----------------------------------------------------------------------


UPDATES = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries(
        {
            "type": st.one_of(
                st.sampled_from(["progress", "demo.step", "x", "", "a.b.c"]),
                st.from_regex(r"[a-z][a-z0-9.-]{0,70}", fullmatch=True),
                ANY_TEXT,
            ),
            "key": st.one_of(
                st.sampled_from(["k", "overall", "k-1", ""]),
                st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,130}", fullmatch=True),
                ANY_TEXT,
            ),
            "data": st.one_of(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4), JSON_VALUES),
        },
        optional={"extra": JSON_LEAVES},
    ),
)


@given(raw=UPDATES)
def test_an_update_envelope_is_accepted_storable_or_rejected(raw: Any) -> None:
    try:
        update = validate_update(raw)
    except UpdateRejected as exc:
        event("rejected")
        assert str(exc) and "\n" not in str(exc)
        return
    event("accepted")
    storable(update.data)


PROGRESS = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries(
        {},
        optional={
            key: st.one_of(
                JSON_LEAVES, st.floats(), st.sampled_from([-1, 0, 3, 1e308, "5", "2026-01-01T00:00:00Z"])
            )
            for key in (
                "label",
                "completed",
                "total",
                "unit",
                "phase",
                "state",
                "eta",
                "startedAt",
                "updatedAt",
            )
        },
    ),
)


@given(data=PROGRESS)
def test_progress_data_is_parsed_or_one_progress_error(data: Any) -> None:
    try:
        info = validate_progress_data(data)
    except ProgressInvalid as exc:
        assert str(exc)
        return
    for number in (info.completed, info.total):
        assert number is None or math.isfinite(number)


# ---- shell line framing ----------------------------------------------------------------------------------------

PIECES = st.one_of(
    st.sampled_from([b"\n", b"\r", b"\r\n", "€".encode(), "🎉".encode(), b"\xff", b"\xe2\x82", b"\x00"]),
    st.binary(max_size=16),
    st.integers(0, 300).map(lambda n: b"y" * n),  # long runs, so lines cross the (small) limit
)


@given(
    data=st.lists(PIECES, max_size=40).map(b"".join),
    cuts=st.lists(st.integers(0, 5000), max_size=20),
    limit=st.integers(1, 400),
)
def test_framing_does_not_depend_on_chunking_and_fails_only_on_a_long_line(
    data: bytes, cuts: list[int], limit: int
) -> None:
    points = sorted({min(cut, len(data)) for cut in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]

    def frame(parts: list[bytes]) -> tuple[list[Any], bool]:
        framer, seen = LineFramer("stdout", limit), []
        try:
            for part in parts:
                seen += framer.feed(part)
            return seen + framer.close(), False
        except ShellLineTooLong as exc:
            return seen + list(exc.lines), True

    lines, failed = frame(chunks)
    assert (lines, failed) == frame([data])
    # The model: split at \n, drop one trailing \r per line, a non-empty remainder is the last line.
    raw_lines = data.split(b"\n")
    whole = raw_lines[:-1] + ([raw_lines[-1]] if raw_lines[-1] else [])
    expected = [line[:-1] if line.endswith(b"\r") else line for line in whole]
    too_long = next((i for i, line in enumerate(expected) if len(line) > limit), None)
    assert failed == (too_long is not None)
    shown = expected if too_long is None else expected[:too_long]
    assert [line.text for line in lines] == [line.decode("utf-8", "replace") for line in shown]
    assert [line.invalid_utf8 for line in lines] == [_invalid(line) for line in shown]


def _invalid(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


# ---- the trace reader ------------------------------------------------------------------------------------------


def _trace(count: int) -> tuple[bytes, list[TraceEvent]]:
    events = [TraceEvent(1, "2026-01-01T00:00:00.000Z", "run", "run_started", "r", {"workflowName": "w"})]
    events += [
        TraceEvent(
            seq,
            "2026-01-01T00:00:01.000Z",
            "node",
            "node_started",
            "r",
            {"nodeType": "compute", "t": "é"},
            node_id="n",
            attempt_id=f"a{seq}",
        )
        for seq in range(2, count + 1)
    ]
    return b"".join(event.encode() for event in events), events


@st.composite
def damaged_traces(draw: st.DrawFn) -> tuple[bytes, list[TraceEvent], int | None]:
    """A valid trace, then one of: cut at any byte, a line overwritten, bytes flipped or junk inserted."""
    data, events = _trace(draw(st.integers(1, 12)))
    starts = [0]
    for item in events:
        starts.append(starts[-1] + len(item.encode()))
    how = draw(st.sampled_from(["cut", "overwrite", "flip", "insert", "nul"]))
    if how == "cut":
        return data[: draw(st.integers(0, len(data)))], events, None
    line = draw(st.integers(0, len(events) - 1))
    begin, end = starts[line], starts[line + 1]
    if how == "overwrite":
        junk = draw(st.binary(max_size=40).filter(lambda b: b"\n" not in b)) + b"\n"
        return data[:begin] + junk + data[end:], events, line + 1
    if how == "nul":
        return data[:begin] + b"\x00" * (end - begin - 1) + b"\n" + data[end:], events, line + 1
    if how == "flip":
        at = draw(st.integers(begin, end - 2))
        flipped = bytes([data[at] ^ draw(st.integers(1, 255))])
        assume(flipped != b"\n")
        return data[:at] + flipped + data[at + 1 :], events, line + 1
    junk = draw(st.binary(min_size=1, max_size=20))
    return data[:begin] + junk + data[begin:], events, line + 1


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=damaged_traces())
def test_the_trace_reader_returns_a_true_prefix_or_names_the_damaged_line(
    case: tuple[bytes, list[TraceEvent], int | None], tmp_path: Path
) -> None:
    data, events, damaged = case
    original = [event.to_wire() for event in events]
    try:
        read = parse_trace(data)
        event("prefix read")
    except TraceCorrupt as exc:
        event("TraceCorrupt")
        assert damaged is not None and 1 <= exc.line <= damaged + 1
        prefix_events = None
    else:
        prefix_events = [event.to_wire() for event in read.events]
        # Whatever was read is exactly the start of what was written (a flip may still parse: then it
        # differs in a value, never in the envelope's seq order).
        assert [e["seq"] for e in prefix_events] == list(range(1, len(prefix_events) + 1))
        if damaged is None:
            assert prefix_events == original[: len(prefix_events)]
            assert read.valid_bytes + read.torn_bytes == len(data)
    # The other readers agree with it: the tolerant prefix reader, the views' stream and the live tail.
    path = tmp_path / "trace.ndjson"
    path.write_bytes(data)
    prefix, corrupt = read_trace_prefix(path)
    stream = RecordStream(path, lambda line, seq: TraceEvent.to_wire(_decode(line, seq)))
    streamed = list(stream)
    if prefix_events is not None:
        assert corrupt is None and [e.to_wire() for e in prefix.events] == prefix_events
    else:
        assert corrupt is not None and stream.damage is not None and stream.damage.line == corrupt.line
    assert streamed == [e.to_wire() for e in prefix.events]
    assert [e.to_wire() for e in Tail(path, _decode).read().records] == streamed


def _decode(line: bytes, seq: int) -> TraceEvent:
    from piw.store.trace import decode_event

    return decode_event(line, seq)


@given(line=st.one_of(st.binary(max_size=200), JSON_VALUES.map(lambda v: json.dumps(v).encode())))
def test_a_session_line_decodes_or_fails_the_way_the_stream_tolerates(line: bytes) -> None:
    with contextlib.suppress(ValueError, UnicodeDecodeError, KeyError, TypeError):
        decode_entry(line, 1)


# ---- parse_plan ------------------------------------------------------------------------------------------------

WORKERS = [Worker("analyst", "reads"), Worker("writer", "writes")]
PLAN_PIECES = st.one_of(
    st.sampled_from(['{"agent": "analyst", "task": "A"}', '{"agent": "Writer", "task": " B "}', '{"agent":"ghost",'
                     '"task":"x"}', "```json\n", "```", "[", "]", ",", "\n", "- analyst: read it\n", '"', "\\", "{",
                     "}", '{"agent": 1, "task": []}', "1. writer: draft\n"]),
    ANY_TEXT,
)  # fmt: skip


@given(pieces=st.lists(PLAN_PIECES, max_size=25))
def test_parse_plan_only_yields_known_workers_with_tasks(pieces: list[str]) -> None:
    text = "".join(pieces)
    for item in parse_plan(text, WORKERS):
        assert item.agent in WORKERS and item.task.strip() == item.task and item.task


# ---- the sanitiser ---------------------------------------------------------------------------------------------

HOSTILE_TEXT = st.lists(st.one_of(ANY_TEXT, CONTROL), max_size=12).map("".join)


@given(text=HOSTILE_TEXT)
def test_no_control_character_survives_the_sanitiser(text: str) -> None:
    clean = sanitize_terminal_text(text)
    assert not FORBIDDEN & set(clean)
    assert clean.count("\n") == text.count("\n")
    assert "\n" not in single_line(text) and not FORBIDDEN & set(single_line(text))
    if text.isprintable():
        assert clean == text


@given(value=st.one_of(HOSTILE_TEXT, JSON_VALUES, st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=3)))
def test_json_text_is_the_same_value_with_nothing_raw(value: Any) -> None:
    try:
        text = json_text(value)
    except UnicodeEncodeError:
        return
    assert not FORBIDDEN & set(text)
    assert json.loads(text) == value


@given(text=HOSTILE_TEXT, terminal=st.booleans())
def test_whatever_a_console_prints_reaches_the_stream_sanitized(text: str, terminal: bool) -> None:
    out = io.StringIO()
    console = SafeConsole(file=out, width=60, force_terminal=terminal, color_system="standard" if terminal else None,
                          markup=False, highlight=False, emoji=False)  # fmt: skip
    console.print(text, style="bold")
    console.print(f"Error: {text}")
    printed = out.getvalue()
    if terminal:  # rich's own SGR sequences are the only escapes: remove them, then nothing may remain
        import re

        printed = re.sub(r"\x1b\[[0-9;]*m", "", printed)
    assert not FORBIDDEN & set(printed), repr(printed)


def test_plain_console_for_comparison_leaks() -> None:
    """The reason for SafeConsole: rich itself passes control characters through."""
    out = io.StringIO()
    Console(file=out, color_system=None).print("\x1b[2J")
    assert "\x1b" in out.getvalue()


__all__ = ["PiwError", "pytest"]


@given(value=st.one_of(HOSTILE_TEXT, JSON_VALUES))
def test_the_streamed_json_encoding_is_as_safe_as_json_text(value: Any) -> None:
    """``--json`` output written in pieces (orjson bytes through ``safe_json_bytes``) hides nothing raw either."""
    import orjson

    from piw.terminal import safe_json_bytes

    try:
        raw = orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return  # orjson refuses lone surrogates and integers past 64 bits; the writer never hands it those
    text = safe_json_bytes(raw).decode("utf-8")
    assert not FORBIDDEN & set(text)
    assert json.loads(text) == value
