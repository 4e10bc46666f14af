"""The viewer's reader: the fast first state, the index, and time travel agree with the one fold everywhere."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from piw.app import reader as reader_module
from piw.app.reader import fast_state, open_run
from piw.store.bundle import Bundle
from piw.store.fold import fold, fold_more, state_to_json
from piw.store.state import RunState
from piw.store.state_json import decode_state
from piw.store.trace import TraceEvent, read_trace
from piw.views.progress import Tracks
from tests.support.runs import RunWorkflow, WorkflowMaker
from tests.support.views import RUN_IDS, Runs, shared_runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


@pytest.fixture
def home(runs: Runs, tmp_path: Path) -> Path:
    copy = tmp_path / "home"
    shutil.copytree(runs.home("completed"), copy)
    return copy


def _events(home: Path) -> list:  # type: ignore[type-arg]
    return read_trace(home / "runs" / RUN_IDS["completed"] / "trace.ndjson").events


def test_state_json_is_trusted_only_when_the_trace_agrees(home: Path) -> None:
    bundle = Bundle(RUN_IDS["completed"], home / "runs" / RUN_IDS["completed"])
    events = _events(home)
    full = fold(events)
    assert fast_state(bundle) is None, "no state.json: the index pass folds"
    bundle.state_path.write_text(json.dumps(state_to_json(fold(events[:-3]))), encoding="utf-8")
    assert fast_state(bundle) == full, "behind: the tail after traceSeq is folded on"
    bundle.state_path.write_text(json.dumps(state_to_json(full)), encoding="utf-8")
    assert fast_state(bundle) == full
    assert decode_state(bundle.state_path.read_bytes()) == full
    with bundle.trace_path.open("ab") as trace:
        trace.write(b'{"seq": 99, "torn')  # an unterminated tail is ignored
    assert fast_state(bundle) == full
    lines = bundle.trace_path.read_bytes().splitlines(keepends=True)
    bundle.trace_path.write_bytes(b"".join(lines[:-3]))
    assert fast_state(bundle) is None, "state.json ahead of the trace is not trusted"


@pytest.mark.parametrize("checkpoint_every", [1, 4, 16_384])
def test_every_seq_replays_to_the_fold_of_its_prefix(
    home: Path, monkeypatch: pytest.MonkeyPatch, checkpoint_every: int
) -> None:
    monkeypatch.setattr(reader_module, "CHECKPOINT_EVERY", checkpoint_every)
    monkeypatch.setattr(reader_module, "OFFSET_EVERY", 3)
    events = _events(home)
    reader = open_run(home, RUN_IDS["completed"])
    reader.index()
    assert reader.last_seq == len(events) and reader.state == fold(events)
    for seq in [*range(len(events), 0, -1), *range(1, len(events) + 1)]:  # backwards, then forwards
        assert reader.state_at(seq) == fold(events[:seq]), seq
        expected = Tracks().feed(events[:seq])
        got = reader.tracks_at(seq)
        assert {k: t.window.samples for k, t in got.tracks.items()} == {
            k: t.window.samples for k, t in expected.tracks.items()
        }
        assert [e.seq for e in reader.events(seq, seq + 5)] == list(range(seq, min(seq + 5, len(events) + 1)))
    assert list(reader.index_data.update_seqs) == [e.seq for e in events if e.type == "update_published"]


def _files(path: Path) -> dict[str, str]:
    import hashlib

    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in path.rglob("*")
        if p.is_file()
    }


def test_stored_fold_checkpoints_are_used_and_nothing_is_written(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from piw.store import checkpoint_files, foldcache

    monkeypatch.setattr(foldcache, "CHECKPOINT_EVERY", 4)
    monkeypatch.setattr(reader_module, "CHECKPOINT_EVERY", 2)
    bundle = home / "runs" / RUN_IDS["completed"]
    foldcache.replay(bundle, RUN_IDS["completed"])  # what inspect leaves behind
    assert list((bundle / checkpoint_files.DIRECTORY).iterdir()), "checkpoints were written"
    before = _files(bundle)
    events = _events(home)
    reader = open_run(home, RUN_IDS["completed"])
    reader.index()
    used = []
    stored = reader._stored_state

    def spy(seq: int, have: int) -> object:
        found = stored(seq, have)
        used.append(found is not None)
        return found

    monkeypatch.setattr(reader, "_stored_state", spy)
    for seq in range(len(events), 0, -1):
        reader.index_data.checkpoints = []  # as if this reader had folded nothing yet
        assert reader.state_at(seq) == fold(events[:seq]), seq
    assert any(used), "states came from the stored checkpoints"
    reader.poll()
    assert _files(bundle) == before, "the viewer wrote nothing to the bundle"


def _checkpointed(home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Bundle, list]:  # type: ignore[type-arg]
    """The completed run with the fold checkpoints ``inspect`` leaves (one every 4 events) and its state.json."""
    from piw.store import foldcache

    monkeypatch.setattr(foldcache, "CHECKPOINT_EVERY", 4)
    bundle = Bundle(RUN_IDS["completed"], home / "runs" / RUN_IDS["completed"])
    events = _events(home)
    foldcache.replay(bundle.path, bundle.run_id)
    bundle.state_path.write_text(json.dumps(state_to_json(fold(events))), encoding="utf-8")
    return bundle, events


def test_a_long_or_missing_state_json_gives_way_to_a_checkpoint_near_the_end(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, events = _checkpointed(home, monkeypatch)
    full = fold(events)
    read: list[int] = []

    def decode(data: bytes, *, lazy_steps: bool = False) -> RunState:
        read.append(len(data))
        return decode_state(data, lazy_steps=lazy_steps)

    monkeypatch.setattr(reader_module, "decode_state", decode)
    assert fast_state(bundle) == full and read, "a short state.json is still the one read"
    read.clear()
    monkeypatch.setattr(reader_module, "LONG_STATE_BYTES", 10)
    before = _files(bundle.path)
    state = fast_state(bundle)
    assert state == full and not read, "a long one: the newest checkpoint and the events after it"
    assert state is not None
    assert [state.steps[i] for i in reversed(range(len(full.steps)))] == list(reversed(full.steps))
    bundle.state_path.unlink()
    reader = open_run(home, bundle.run_id)
    assert reader.state == full, "no state.json: the first screen has the state before the index pass"
    reader.index()
    assert reader.state == full and reader.state_at(5) == fold(events[:5])
    assert _files(bundle.path) == {k: v for k, v in before.items() if k != "state.json"}, "nothing written"


def test_a_checkpoint_far_from_the_end_is_not_used_for_the_first_screen(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from piw.store import checkpoint_files, foldcache

    bundle, events = _checkpointed(home, monkeypatch)
    for path in (bundle.path / checkpoint_files.DIRECTORY).glob("seq-*.ckpt"):
        if int(path.stem.removeprefix("seq-")) > len(events) - 5:
            path.unlink()  # the run went on past the newest checkpoint by more than CHECKPOINT_EVERY events
    monkeypatch.setattr(reader_module, "LONG_STATE_BYTES", 10)
    folded: list[int] = []

    def spy(state: RunState, events: list[TraceEvent]) -> RunState:
        folded.append(len(events))
        return fold_more(state, events)

    monkeypatch.setattr(foldcache, "fold_more", spy)
    assert fast_state(bundle) == fold(events) and not folded, (
        "state.json, not a long fold from the checkpoint"
    )
    bundle.state_path.unlink()
    assert fast_state(bundle) is None and not folded, "nothing to start from: the index pass folds"


def test_the_runs_list_without_an_index_folds_a_bundle_with_no_state_json(
    piw_home: Path, make_workflow: WorkflowMaker, run_workflow: RunWorkflow
) -> None:
    """``bundle_rows`` (the viewer's runs list when ``piw.sqlite`` cannot be read): a bundle whose ``state.json`` is
    gone is folded from its trace, and a line damaged in the middle shows the valid prefix with a notice."""
    from piw.app.runs import bundle_rows

    source = """
    from piw import compute, define_workflow, edge

    workflow = define_workflow(
        name="rows",
        start_at="a",
        nodes={"a": compute(lambda ctx: 1), "b": compute(lambda ctx: 2), "c": compute(lambda ctx: 3)},
        edges=[edge("a", "b"), edge("b", "c")],
    )
    """
    intact = run_workflow(make_workflow("rows", source)).run_id
    damaged = run_workflow(make_workflow("rows", source)).run_id
    for run_id in (intact, damaged):
        (piw_home / "runs" / run_id / "state.json").unlink()
    trace = piw_home / "runs" / damaged / "trace.ndjson"
    lines = trace.read_bytes().splitlines(keepends=True)
    lines[4] = b"not json\n"  # b's node_finished: the valid prefix is a run that started b
    trace.write_bytes(b"".join(lines))
    rows = {row.run_id: row for row in bundle_rows(piw_home)}
    assert rows[intact].status == "completed" and rows[intact].notice is None
    assert rows[damaged].status == "running" and rows[damaged].current_node == "b"
    assert rows[damaged].notice is not None and "line 5" in rows[damaged].notice
