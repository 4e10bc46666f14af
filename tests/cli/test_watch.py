"""``piw watch``: the incremental tail, the follower and the watcher against real files that grow while
watched.

Writers here append the lines of a real run's trace to a copy cut short, from the test thread, while the
watcher runs in another; waits are bounded polls on what the watcher reports, never timing assertions.
"""

from __future__ import annotations

import io
import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rich.console import Console

from piw.cli.watch import Follower, Watcher, newest_run
from piw.store.bundle import Bundle, WriterLock
from piw.store.fold import fold
from piw.store.trace import decode_event, read_trace
from piw.views.frame import FrameView
from piw.views.source import Tail
from tests.support.views import RUN_IDS, Runs, cut_bundle, render, shared_runs


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return shared_runs(tmp_path_factory)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)
        handle.flush()


@pytest.fixture
def growing(runs: Runs, tmp_path: Path) -> Iterator[tuple[Bundle, list[bytes], list[bytes]]]:
    """A copy of the completed run cut after crunch's first update, plus the trace and session lines still to
    come. The test plays its writer, so it holds the bundle's writer lock as a writer does (a watcher stops
    following a running run that nobody writes)."""
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    cut = cut_bundle(runs.bundle("completed"), home, "update_published", "crunch")
    full = runs.bundle("completed")
    trace_rest = _lines(full / "trace.ndjson")[len(_lines(cut / "trace.ndjson")) :]
    session_rest = _lines(full / "session" / "entries.ndjson")[
        len(_lines(cut / "session" / "entries.ndjson")) :
    ]
    bundle = Bundle(cut.name, cut)
    lock = WriterLock(bundle).acquire()
    try:
        yield bundle, trace_rest, session_rest
    finally:
        lock.release()


# ---- the tail ----------------------------------------------------------------------------------------------


def test_tail_buffers_a_partial_line(runs: Runs, tmp_path: Path) -> None:
    lines = _lines(runs.bundle("completed") / "trace.ndjson")
    path = tmp_path / "trace.ndjson"
    path.write_bytes(lines[0] + lines[1][:10])
    tail = Tail(path, decode_event)
    assert [event.seq for event in tail.read().records] == [1]
    assert tail.read().records == []
    _append(path, lines[1][10:] + lines[2])
    assert [event.seq for event in tail.read().records] == [2, 3]
    assert tail.offset == path.stat().st_size and tail.partial == b""


def test_tail_restarts_when_the_file_shrinks(runs: Runs, tmp_path: Path) -> None:
    lines = _lines(runs.bundle("completed") / "trace.ndjson")
    path = tmp_path / "trace.ndjson"
    path.write_bytes(b"".join(lines[:6]))
    tail = Tail(path, decode_event)
    assert len(tail.read().records) == 6
    path.write_bytes(b"".join(lines[:3]))
    read = tail.read()
    assert read.restarted and [event.seq for event in read.records] == [1, 2, 3]


def test_tail_ignores_a_torn_last_line_and_reports_damage_before_more_lines(
    runs: Runs, tmp_path: Path
) -> None:
    lines = _lines(runs.bundle("completed") / "trace.ndjson")
    path = tmp_path / "trace.ndjson"
    path.write_bytes(lines[0] + b'{"seq":2,"broken\n')
    tail = Tail(path, decode_event)
    assert [event.seq for event in tail.read().records] == [1]
    assert tail.corruption is None
    _append(path, lines[2])
    assert tail.read().records == [] and tail.corruption is not None and "line 2" in tail.corruption


# ---- the follower ------------------------------------------------------------------------------------------


def test_follower_folds_only_new_events(growing: tuple[Bundle, list[bytes], list[bytes]], runs: Runs) -> None:
    bundle, trace_rest, session_rest = growing
    follower = Follower(bundle)
    assert follower.poll() and follower.state.status == "running"
    assert not follower.poll()
    _append(bundle.session_path, b"".join(session_rest))
    _append(bundle.trace_path, b"".join(trace_rest))
    assert follower.poll()
    full = read_trace(runs.bundle("completed") / "trace.ndjson").events
    assert follower.state == fold(full)
    assert [n.text for n in follower.model.notifications][-1].startswith("Done: ")


# ---- the watcher -------------------------------------------------------------------------------------------


class Frames:
    """Frames the watcher drew, as plain text, with the seq each was drawn at."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str]] = []
        self.lock = threading.Lock()

    def __call__(self, frame: FrameView) -> None:
        text = render(frame, 80)
        with self.lock:
            self.items.append((frame.model.state.trace_seq, text))

    def last(self) -> tuple[int, str]:
        with self.lock:
            return self.items[-1] if self.items else (0, "")

    def count(self) -> int:
        with self.lock:
            return len(self.items)


def _start(
    bundle: Bundle, *, polling: bool, interactive: bool = True
) -> tuple[threading.Thread, Frames, Watcher]:
    frames = Frames()
    console = Console(file=io.StringIO(), force_terminal=interactive, width=80, height=60, color_system=None)
    watcher = Watcher(bundle, console, interactive=interactive, force_polling=polling, on_frame=frames)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    wait_until(lambda: frames.count() > 0, "the first frame")
    return thread, frames, watcher


@pytest.mark.parametrize("polling", [False, True], ids=["watchfiles", "polling"])
def test_watch_follows_appends_from_another_thread(
    growing: tuple[Bundle, list[bytes], list[bytes]], polling: bool
) -> None:
    bundle, trace_rest, session_rest = growing
    thread, frames, _ = _start(bundle, polling=polling)
    first_seq, first = frames.last()
    assert "▶ running" in first and "┏" in first
    _append(bundle.session_path, b"".join(session_rest))
    for line in trace_rest[:-1]:
        _append(bundle.trace_path, line)
    wait_until(lambda: frames.last()[0] == first_seq + len(trace_rest) - 1, "the frame to catch up")
    assert "▶ running" in frames.last()[1]
    _append(bundle.trace_path, trace_rest[-1])
    thread.join(timeout=30)
    assert not thread.is_alive(), "watch ends when the run reaches a terminal state"
    assert "✓ completed" in frames.last()[1] and "✉ Done: " in frames.last()[1]


def test_watch_survives_a_torn_line_and_a_truncated_file(
    growing: tuple[Bundle, list[bytes], list[bytes]],
) -> None:
    bundle, trace_rest, _ = growing
    thread, frames, watcher = _start(bundle, polling=False)
    start_seq = frames.last()[0]
    line = trace_rest[0]
    drawn = frames.count()
    _append(bundle.trace_path, line[:25])
    wait_until(
        lambda: frames.count() > drawn and watcher.follower.trace.partial == line[:25], "the partial line"
    )
    assert frames.last()[0] == start_seq, "half a line is not an event"
    _append(bundle.trace_path, line[25:] + trace_rest[1])
    wait_until(lambda: frames.last()[0] == start_seq + 2, "the completed line")
    original = _lines(bundle.trace_path) + trace_rest[2:]
    bundle.trace_path.write_bytes(b"".join(original[:3]))
    wait_until(lambda: frames.last()[0] == 3, "the refold after the file shrank")
    assert watcher.follower.restarts >= 1
    assert "● start" in frames.last()[1]
    _append(bundle.trace_path, b"".join(original[3:]))
    thread.join(timeout=30)
    assert not thread.is_alive() and "✓ completed" in frames.last()[1]


def test_watch_of_a_running_run_nobody_writes_says_so_and_exits(runs: Runs, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    cut = cut_bundle(runs.bundle("completed"), home, "update_published", "crunch")  # no writer holds it
    out = io.StringIO()
    watcher = Watcher(Bundle(cut.name, cut), Console(file=out, width=200, color_system=None))
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "a watcher of a dead run must not tick forever"
    assert watcher.follower.state.status == "running"
    assert f"Run {cut.name} is not being run by any process" in out.getvalue()
    assert f"'piw resume {cut.name}'" in out.getvalue()


def test_watch_stops_on_request(growing: tuple[Bundle, list[bytes], list[bytes]]) -> None:
    bundle, _, _ = growing
    stop = threading.Event()
    console = Console(file=io.StringIO(), force_terminal=True, width=80, height=40)
    watcher = Watcher(bundle, console, interactive=True)
    thread = threading.Thread(target=watcher.run, kwargs={"stop": stop}, daemon=True)
    thread.start()
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_plain_watch_prints_a_frame_then_step_lines(growing: tuple[Bundle, list[bytes], list[bytes]]) -> None:
    bundle, trace_rest, session_rest = growing
    out = io.StringIO()
    console = Console(file=out, width=80, color_system=None)
    assert not console.is_terminal
    watcher = Watcher(bundle, console)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    wait_until(lambda: "● start" in out.getvalue(), "the first frame")
    _append(bundle.session_path, b"".join(session_rest))
    _append(bundle.trace_path, b"".join(trace_rest))
    thread.join(timeout=30)
    text = out.getvalue()
    assert "▶ reply  agent" in text and "✉ Done: " in text and "■ completed" in text
    assert "\x1b" not in text and "\r" not in text


def test_once_prints_one_frame_and_returns(runs: Runs) -> None:
    out = io.StringIO()
    bundle = Bundle(RUN_IDS["running"], runs.bundle("running"))
    Watcher(bundle, Console(file=out, width=200, color_system=None)).run(once=True)
    assert out.getvalue().count("● start") == 1 and "possibly interrupted" in out.getvalue()


def test_newest_run_is_the_latest_id(runs: Runs, tmp_path: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(runs.home("completed"), home)
    assert newest_run(home) == max(RUN_IDS[k] for k in ("completed", "failed", "waiting"))
    assert (
        json.loads((runs.bundle("completed") / "manifest.json").read_text())["runId"] == RUN_IDS["completed"]
    )


def test_q_on_an_interactive_stdin_stops_the_watch(
    growing: tuple[Bundle, list[bytes], list[bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KeyReader`` puts a terminal stdin in cbreak mode; pressing ``q`` ends the watch and restores it."""
    import os
    import pty
    import termios

    master, slave = pty.openpty()
    stdin = os.fdopen(slave, "r")
    before = termios.tcgetattr(slave)
    monkeypatch.setattr("sys.stdin", stdin)
    bundle, _, _ = growing
    thread, frames, _ = _start(bundle, polling=False)
    os.write(master, b"q")
    thread.join(timeout=30)
    try:
        assert not thread.is_alive(), "q stops watching"
        assert termios.tcgetattr(slave) == before, "the terminal settings are restored"
        assert "▶ running" in frames.last()[1]
    finally:
        stdin.close()
        os.close(master)


def test_a_damaged_trace_is_shown_up_to_the_damage(runs: Runs, tmp_path: Path) -> None:
    target = tmp_path / "runs" / RUN_IDS["completed"]
    shutil.copytree(runs.bundle("completed"), target)
    lines = _lines(target / "trace.ndjson")
    lines[4] = b"not json\n"
    (target / "trace.ndjson").write_bytes(b"".join(lines))
    out = io.StringIO()
    state = Watcher(Bundle(target.name, target), Console(file=out, width=120, color_system=None)).run(
        once=True
    )
    assert state.trace_seq == 4
    assert out.getvalue().startswith("⚠ trace.ndjson line 5 is damaged; stopped following it.")


def test_lines_appended_before_the_file_watch_starts_are_reported(
    growing: tuple[Bundle, list[bytes], list[bytes]],
) -> None:
    """An append that raises no file event (it came before the watch was registered) is still reported, at the
    first tick; a quiet tick after that reports nothing. (A plain ``piw watch`` only re-reads on a report, so
    without one it would wait for the next write, forever if the run had just written its last line.)"""
    from piw.views.follow import file_changes

    bundle, trace_rest, _ = growing
    _append(bundle.trace_path, trace_rest[0])
    stop = threading.Event()
    changes = file_changes(bundle, stop)
    try:
        assert next(changes) is True
        assert next(changes) is False
    finally:
        stop.set()
        changes.close()
