"""Fold checkpoints obey the fold laws, and a damaged, stale or foreign checkpoint changes nothing.

Traces are generated (hypothesis) as real trace lines of a real bundle; checkpoints are written every few events
(``CHECKPOINT_EVERY`` is lowered) by the same ``replay`` every reader uses. The reference is always one plain
``fold`` of the trace prefix.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from piw.store import checkpoint_files, foldcache
from piw.store.checkpoint_files import valid_checkpoints
from piw.store.fold import fold
from piw.store.foldcache import replay
from piw.store.trace import TraceEvent, read_trace
from tests.support.cli import Cli
from tests.support.runs import RunWorkflow, WorkflowMaker

RUN_ID = "20260101T000000000Z-ckpt-00000001"
OTHER_ID = "20260101T000000000Z-ckpt-00000002"
NODES = ("plan", "work", "sub/inner")

OPS = st.lists(
    st.sampled_from(["start", "ok", "fail", "update", "prompt", "child", "include", "pause", "resume"]),
    min_size=1,
    max_size=40,
)


def _events(ops: list[str], run_id: str, salt: str = "") -> list[TraceEvent]:
    """A trace that follows the invariants of ``persistence.md`` §4 for any list of operations."""
    events: list[TraceEvent] = []

    def add(
        scope: str, kind: str, payload: dict[str, Any], node: str | None = None, att: str | None = None
    ) -> None:
        seq = len(events) + 1
        at = f"2026-01-01T00:00:{seq // 1000 % 60:02d}.{seq % 1000:03d}Z"
        events.append(TraceEvent(seq, at, scope, kind, run_id, payload, node, att))  # type: ignore[arg-type]

    add("run", "run_started", {"workflowName": "ckpt", "input": {"salt": salt}, "maxSteps": 1000})
    current: tuple[str, str] | None = None
    count = 0
    for op in ops:
        count += 1
        node = NODES[count % len(NODES)]
        if op == "start" and current is None:
            current = (node, f"a{count}{salt}")
            add("node", "node_started", {"nodeType": "compute", "statusDetail": f"d{count}"}, *current)
        elif op in ("ok", "fail") and current is not None:
            body: dict[str, Any] = {"outcome": "ok", "durationMs": count, "output": {"n": count, "t": [salt]}}
            if op == "fail":
                body = {"outcome": "failed", "durationMs": count, "error": f"broke {count}"}
            body["usage"] = {"requests": 1, "input": count, "output": 1, "cacheRead": 0, "cacheWrite": 0}
            add("node", "node_finished" if op == "ok" else "node_failed", body, *current)
            current = None
        elif op == "update":
            data = {
                "schema": "pi-workflows.progress.v1",
                "status": "running",
                "completed": count,
                "total": 50,
            }
            payload = {"updateId": f"u{count}", "type": "progress", "key": f"k{count % 3}", "data": data}
            add("node", "update_published", payload, *(current or (node, f"x{count}")))
        elif op == "prompt" and current is not None:
            add("agent", "agent_prompt_sent", {"prompt": f"p{count}", "completion": "submit"}, *current)
        elif op == "child" and current is not None:
            add("node", "child_step_finished", {"visit": 1, "key": f"c{count}", "outcome": "ok"}, *current)
        elif op == "include":
            add(
                "run", "include_entered", {"mountPath": ["sub"], "workflowName": "child", "invocation": count}
            )
        elif op == "pause":
            add("run", "run_paused", {})
        elif op == "resume":
            add("run", "run_resumed", {})
    if count % 2:
        add("run", "run_completed", {"status": "completed", "finalOutput": {"n": count}})
    return events


def _bundle(root: Path, events: list[TraceEvent], run_id: str = RUN_ID) -> Path:
    bundle = root / run_id
    if bundle.exists():
        shutil.rmtree(bundle)
    bundle.mkdir(parents=True)
    (bundle / "trace.ndjson").write_bytes(b"".join(event.encode() for event in events))
    return bundle


def _reference(bundle: Path, at: int | None = None) -> Any:
    events = read_trace(bundle / "trace.ndjson").events
    return fold(events if at is None else events[:at])


def _same(result: foldcache.Replay, expected: Any) -> None:
    assert result.state == expected
    assert list(result.state.steps) == list(expected.steps)  # the lazily loaded steps too


@pytest.fixture(autouse=True)
def _often(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(foldcache, "CHECKPOINT_EVERY", 4)


FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(OPS)
def test_at_every_split_a_checkpoint_plus_the_tail_is_the_full_fold(tmp_path: Path, ops: list[str]) -> None:
    bundle = _bundle(tmp_path, _events(ops, RUN_ID))
    size = len(read_trace(bundle / "trace.ndjson").events)
    cold = replay(bundle, RUN_ID)  # no checkpoints yet: folds from line 1 and writes them
    _same(cold, _reference(bundle))
    assert [h.seq for h in valid_checkpoints(bundle, RUN_ID)] == list(range(4, size + 1, 4))
    for at in range(1, size + 2):
        with_checkpoints = replay(bundle, RUN_ID, at)
        expected = _reference(bundle, at)
        _same(with_checkpoints, expected)
        assert with_checkpoints.checkpoint_seq == (min(at, size) // 4) * 4
        shutil.copytree(bundle, tmp_path / "copy", dirs_exist_ok=True)
        shutil.rmtree(tmp_path / "copy" / checkpoint_files.DIRECTORY, ignore_errors=True)
        plain = replay(tmp_path / "copy", RUN_ID, at, write=False)
        _same(plain, expected)
        assert (with_checkpoints.offset, with_checkpoints.next_seq, with_checkpoints.next_at) == (
            plain.offset,
            plain.next_seq,
            plain.next_at,
        )


def _checkpoint_files(bundle: Path) -> list[Path]:
    return sorted((bundle / checkpoint_files.DIRECTORY).glob("seq-*.ckpt"), key=lambda p: int(p.stem[4:]))


OPS_LONG = st.lists(st.sampled_from(["start", "ok", "fail", "update", "prompt"]), min_size=12, max_size=40)


@FAST
@given(OPS_LONG, st.integers(0, 10_000), st.integers(1, 255))
def test_a_damaged_checkpoint_gives_the_state_of_none(
    tmp_path: Path, ops: list[str], where: int, flip: int
) -> None:
    bundle = _bundle(tmp_path, _events(ops, RUN_ID))
    replay(bundle, RUN_ID)
    files = _checkpoint_files(bundle)
    if not files:
        return
    victim = files[where % len(files)]
    data = bytearray(victim.read_bytes())
    data[where % len(data)] ^= flip
    victim.write_bytes(bytes(data))
    for at in (None, len(read_trace(bundle / "trace.ndjson").events) - 1):
        _same(replay(bundle, RUN_ID, at, write=False), _reference(bundle, at))


def test_a_truncated_or_removed_checkpoint_is_ignored(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID))
    replay(bundle, RUN_ID)
    first, second, *_ = _checkpoint_files(bundle)
    second.write_bytes(second.read_bytes()[:-5])  # steps cut short: found only when the steps are read
    _same(replay(bundle, RUN_ID, write=False), _reference(bundle))
    first.unlink()  # the chain is broken at its start: nothing after it is used either
    assert valid_checkpoints(bundle, RUN_ID) == []
    _same(replay(bundle, RUN_ID, write=False), _reference(bundle))


def test_a_stale_checkpoint_is_ignored_when_the_trace_changed(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID, salt="old"))
    replay(bundle, RUN_ID)
    assert valid_checkpoints(bundle, RUN_ID)
    saved = bundle / checkpoint_files.DIRECTORY
    shutil.move(saved, tmp_path / "saved")
    _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID, salt="new"))  # same run id, other bytes
    shutil.move(tmp_path / "saved", saved)
    assert valid_checkpoints(bundle, RUN_ID) == []
    result = replay(bundle, RUN_ID)
    _same(result, _reference(bundle))
    assert result.state.input == {"salt": "new"} and result.checkpoint_seq == 0
    assert valid_checkpoints(bundle, RUN_ID), "the stale checkpoints are replaced by good ones"


def test_a_shorter_trace_makes_later_checkpoints_stale(tmp_path: Path) -> None:
    events = _events(["start", "ok"] * 12, RUN_ID)
    bundle = _bundle(tmp_path, events)
    replay(bundle, RUN_ID)
    (bundle / "trace.ndjson").write_bytes(b"".join(event.encode() for event in events[:10]))  # e.g. restored
    result = replay(bundle, RUN_ID, write=False)
    _same(result, _reference(bundle))
    assert result.checkpoint_seq == 8


def test_a_foreign_checkpoint_is_ignored(tmp_path: Path) -> None:
    ops = ["start", "ok"] * 12
    mine = _bundle(tmp_path, _events(ops, RUN_ID))
    other = _bundle(tmp_path, _events(ops, OTHER_ID), OTHER_ID)
    replay(other, OTHER_ID)
    shutil.copytree(other / checkpoint_files.DIRECTORY, mine / checkpoint_files.DIRECTORY)
    assert valid_checkpoints(mine, RUN_ID) == []
    _same(replay(mine, RUN_ID, write=False), _reference(mine))


def test_a_checkpoint_of_another_fold_version_is_ignored(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID))
    replay(bundle, RUN_ID)
    for path in _checkpoint_files(bundle):
        head, rest = path.read_bytes().split(b"\n", 1)
        header = json.loads(head)
        header["foldVersion"] = "0-old"
        path.write_bytes(json.dumps(header, separators=(",", ":")).encode() + b"\n" + rest)
    assert valid_checkpoints(bundle, RUN_ID) == []
    _same(replay(bundle, RUN_ID, write=False), _reference(bundle))


def test_checkpoints_are_private_files(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 6, RUN_ID))
    replay(bundle, RUN_ID)
    directory = bundle / checkpoint_files.DIRECTORY
    assert directory.stat().st_mode & 0o777 == 0o700
    assert all(path.stat().st_mode & 0o777 == 0o600 for path in _checkpoint_files(bundle))


def test_a_damaged_trace_line_still_shows_the_notice_with_checkpoints(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID))
    replay(bundle, RUN_ID)
    lines = (bundle / "trace.ndjson").read_bytes().splitlines(keepends=True)
    lines[16] = b"{broken\n"  # line 17: after the checkpoint at 16, with lines after it
    (bundle / "trace.ndjson").write_bytes(b"".join(lines))
    result = replay(bundle, RUN_ID, write=False)
    assert result.notice == "trace.ndjson line 17 is damaged; showing the 16 lines before it."
    assert result.state.trace_seq == 16 and result.checkpoint_seq == 16

    lines[3] = (
        b"{broken\n"  # inside the checkpointed prefix: the chain no longer matches, the full fold tells
    )
    (bundle / "trace.ndjson").write_bytes(b"".join(lines))
    result = replay(bundle, RUN_ID, write=False)
    assert result.notice == "trace.ndjson line 4 is damaged; showing the 3 lines before it."
    assert result.state.trace_seq == 3 and result.checkpoint_seq == 0


@pytest.mark.parametrize("limit", ["at", "damage"])
def test_a_first_read_that_stops_early_leaves_checkpoints_the_next_read_trusts(
    tmp_path: Path, limit: str
) -> None:
    # The chunk that holds the line past ``--at`` (or a damaged line) is read line by line: the checkpoints left
    # on the way must cover exactly the bytes of the lines folded, or the next read would not trust them.
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID))
    expected = _reference(bundle, 10)
    if limit == "damage":
        lines = (bundle / "trace.ndjson").read_bytes().splitlines(keepends=True)
        lines[10] = b"{broken\n"  # line 11, with lines after it
        (bundle / "trace.ndjson").write_bytes(b"".join(lines))
    first = replay(bundle, RUN_ID, 10 if limit == "at" else None)
    assert first.state.trace_seq == 10 and first.checkpoint_seq == 0
    assert [h.seq for h in valid_checkpoints(bundle, RUN_ID)] == [4, 8]
    again = replay(bundle, RUN_ID, 10 if limit == "at" else None, write=False)
    assert again.checkpoint_seq == 8
    _same(again, expected)


@pytest.mark.parametrize("region", ["header", "head", "steps"])
def test_a_checkpoint_edited_to_say_something_else_is_not_believed(tmp_path: Path, region: str) -> None:
    """Still well-formed after the edit: only the digests can tell, and they do."""
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID))
    replay(bundle, RUN_ID)
    path = _checkpoint_files(bundle)[-1]
    data = path.read_bytes()
    header_end = data.index(b"\n") + 1
    head_end = header_end + json.loads(data[:header_end])["headBytes"]
    if region == "header":
        edited = data.replace(b'"stepCount":', b'"stepCount":1', 1)  # claims 1N steps instead of N
    elif region == "head":
        edited = data[:header_end] + data[header_end:head_end].replace(b"ckpt", b"ckpu") + data[head_end:]
    else:
        edited = data[:head_end] + data[head_end:].replace(b"2026-01-01", b"2027-01-01", 1)
    assert edited != data
    path.write_bytes(edited)
    _same(replay(bundle, RUN_ID, write=False), _reference(bundle))


def _with_artifact_output(events: list[TraceEvent], index: int) -> list[TraceEvent]:
    """``events`` with the ``index``-th finished step's output an artifact ref whose file does not exist."""
    finished = [i for i, event in enumerate(events) if event.type == "node_finished"]
    position = finished[index]
    event = events[position]
    ref = {
        "$artifact": {"path": "artifacts/gone.txt", "sha256": "0" * 64, "bytes": 3, "mediaType": "text/plain"}
    }
    events[position] = TraceEvent(event.seq, event.at, event.scope, event.type, event.run_id,
                                  {**event.payload, "output": ref}, event.node_id, event.attempt_id)  # fmt: skip
    return events


def test_a_checkpoint_remembers_whether_its_prefix_holds_an_artifact_ref(tmp_path: Path) -> None:
    plain = _bundle(tmp_path, _events(["start", "ok"] * 12, RUN_ID))
    replay(plain, RUN_ID)
    warm = replay(plain, RUN_ID, write=False)
    assert warm.checkpoint_seq > 0 and warm.artifact_refs is False
    shutil.rmtree(plain)
    referring = _bundle(tmp_path, _with_artifact_output(_events(["start", "ok"] * 12, RUN_ID), 0))
    replay(referring, RUN_ID)
    warm = replay(referring, RUN_ID, write=False)
    assert warm.checkpoint_seq > 0 and warm.artifact_refs is True  # the ref is in the checkpoint's prefix


def test_a_missing_artifact_before_a_checkpoint_is_still_reported_when_read_from_it(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path, cli: Cli
) -> None:
    """A real run whose first step's output is an artifact; a warm read from checkpoints still checks it."""
    path = make_workflow(
        "big",
        """
        from piw import compute, define_workflow, edge
        workflow = define_workflow(name="big", start_at="make", nodes={
            "make": compute(lambda c: {"text": "u" * 5000}),
            **{f"then{i}": compute(lambda c: {"ok": True}) for i in range(6)},
        }, edges=[edge("make", "then0"), *[edge(f"then{i}", f"then{i + 1}") for i in range(5)]])
        """,
    )
    state = run_workflow(path, {})
    bundle = piw_home / "runs" / state.run_id
    for artifact in (bundle / "artifacts").iterdir():
        artifact.unlink()
    (bundle / "state.json").unlink()
    for _ in range(2):  # the first read leaves checkpoints, the second starts from them
        shown = cli.json("inspect", state.run_id)
        assert shown["damage"]["file"].startswith("artifacts/"), shown.get("damage")
    warm = replay(bundle, state.run_id, write=False)
    assert warm.checkpoint_seq > 0 and warm.artifact_refs is True


def test_a_checkpoint_whose_head_says_no_ref_for_a_prefix_with_one_is_not_believed(tmp_path: Path) -> None:
    """The flag is inside the head, under its digest: flipping it is an edit like any other."""
    bundle = _bundle(tmp_path, _with_artifact_output(_events(["start", "ok"] * 12, RUN_ID), 0))
    replay(bundle, RUN_ID)
    for path in _checkpoint_files(bundle):
        data = path.read_bytes()
        flipped = data.replace(b"\xacartifactRefs\xc3", b"\xacartifactRefs\xc2")  # msgpack true -> false
        assert flipped != data
        path.write_bytes(flipped)
    result = replay(bundle, RUN_ID, write=False)
    assert result.checkpoint_seq == 0 and result.artifact_refs is True


def test_a_step_read_by_index_decodes_only_its_own_checkpoint(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _events(["start", "ok", "update"] * 10, RUN_ID))
    replay(bundle, RUN_ID)
    expected = _reference(bundle)
    restored = replay(bundle, RUN_ID, write=False).state
    assert [restored.steps[i] for i in reversed(range(len(expected.steps)))] == list(reversed(expected.steps))
    assert restored.steps._shared.lazy, "reading steps by index did not load them all"
    assert list(restored.steps) == list(expected.steps)


def test_a_damaged_step_segment_read_by_index_is_rebuilt_from_the_trace(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, _events(["start", "ok"] * 10, RUN_ID))
    replay(bundle, RUN_ID)
    victim = _checkpoint_files(bundle)[1]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF  # the last byte of its steps
    victim.write_bytes(bytes(data))
    expected = _reference(bundle)
    restored = replay(bundle, RUN_ID, write=False).state
    assert [restored.steps[i] for i in range(len(expected.steps))] == list(expected.steps)


LONG = """
from piw import action, compute, define_workflow, edge

def effect(ctx):
    return {"did": ctx.node_id}

workflow = define_workflow(name="long", start_at="n0", nodes={
    **{f"n{i}": (action(effect) if i % 3 else compute(lambda ctx: {"n": 1})) for i in range(9)},
}, edges=[edge(f"n{i}", f"n{i + 1}") for i in range(8)])
"""
# 1 run_started, 2..19 nine steps (started/finished), 20 run_completed


def test_a_run_leaves_its_own_checkpoints_so_its_first_reader_starts_near_the_end(
    make_workflow: WorkflowMaker, run_workflow: RunWorkflow, piw_home: Path
) -> None:
    state = run_workflow(make_workflow("long", LONG), {})
    bundle = piw_home / "runs" / state.run_id
    assert [path.name for path in _checkpoint_files(bundle)] == [f"seq-{n}.ckpt" for n in (4, 8, 12, 16, 20)]
    first = replay(bundle, state.run_id, write=False)  # nobody has read the run yet
    assert first.checkpoint_seq == 20
    _same(first, _reference(bundle))
    for at in range(1, 21):
        _same(replay(bundle, state.run_id, at, write=False), _reference(bundle, at))


def test_a_resumed_run_continues_the_checkpoints_of_the_writer_that_crashed(
    make_workflow: WorkflowMaker, cli: Cli, piw_home: Path
) -> None:
    path = make_workflow("long", LONG)
    crashed = cli.process(
        "run", str(path), env={"PIW_TEST_KILL_AFTER_APPEND": "10", "PIW_TEST_CHECKPOINT_EVERY": "4"}
    )
    assert crashed.returncode == -9, crashed.stderr
    run_id = next((piw_home / "runs").iterdir()).name
    bundle = piw_home / "runs" / run_id
    assert [p.name for p in _checkpoint_files(bundle)] == ["seq-4.ckpt", "seq-8.ckpt"]  # left by the writer
    done = cli("resume", run_id, "--json")
    assert done.returncode == 0, done.stderr
    final = replay(bundle, run_id, write=False)
    expected = _reference(bundle)
    assert expected.status == "completed" and final.checkpoint_seq == expected.trace_seq // 4 * 4
    _same(final, expected)


@FAST
@given(OPS)
def test_a_bounded_first_read_is_the_full_fold_and_holds_only_the_steps_after_its_last_checkpoint(
    tmp_path: Path, ops: list[str]
) -> None:
    """``piw watch``'s first read (``bounded``): the same state, the same checkpoints, and the steps before the last
    checkpoint not in memory until something reads them."""
    shutil.rmtree(tmp_path / "runs", ignore_errors=True)
    bundle = _bundle(tmp_path, _events(ops, RUN_ID))
    size = len(read_trace(bundle / "trace.ndjson").events)
    bounded = replay(bundle, RUN_ID, bounded=True)
    written = [h.seq for h in valid_checkpoints(bundle, RUN_ID)]
    assert written == list(range(4, size + 1, 4))
    shared = bounded.state.steps._shared
    held = len(shared._list)
    expected = _reference(bundle)
    if written:
        before = sum(1 for event in read_trace(bundle / "trace.ndjson").events[: written[-1]] if event.type in
                     ("node_finished", "node_failed"))  # fmt: skip
        assert shared.lazy == before and held == len(expected.steps) - before
    _same(bounded, expected)
