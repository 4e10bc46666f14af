"""Following a growing run bundle: file-change notifications and a follower that folds what was appended.

Shared by ``piw watch`` (``piw.cli.watch``) and the full-screen viewer (``piw.app``), which is why it lives below
the CLI. File events come from ``watchfiles`` (coalesced over ~50 ms, with a once-a-second wake-up so clocks
tick), and a plain stat-polling loop takes over when file notifications are unavailable. Reading is incremental:
the :class:`~piw.views.source.Tail` keeps its byte offset, buffers a partial last line and starts again from byte
0 when the file shrank (a torn tail repaired on resume), in which case the model is rebuilt from scratch;
otherwise only the new events are folded (``fold_more``). The running agent step's stream comes from the
bundle's side file (:mod:`piw.store.live_stream`, ``docs/views.md``), shown until its reply is committed.
The first read starts from the newest fold checkpoint (:func:`piw.store.foldcache.replay`, which may leave new
ones: the only thing written, a cache).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from piw.store.bundle import Bundle
from piw.store.fold import RunState
from piw.store.foldcache import checkpointed_steps, events_of_type, replay
from piw.store.live_stream import STREAM_FILE, StreamReader
from piw.store.state import evolve
from piw.views.frame import FrameModel
from piw.views.source import session_tail, trace_tail

COALESCE_MS = 50
"""Changes are grouped for at most this long (``debounce``), yielded once 25 ms pass without another one."""
TICK_S = 1.0
SHED_EVERY = 100_000
"""Events folded between two looks for a checkpoint to hold the older steps as (each look hashes the trace's
prefix once, a tenth of a second per 150 MB)."""
POLL_S = 0.05


class Follower:
    """Keeps a :class:`FrameModel` in step with a bundle's trace and session files."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.trace = trace_tail(bundle)
        self.session = session_tail(bundle)
        self.stream = StreamReader(bundle.path)
        """The agent step's stream as the running process writes it (a side file, never the fold's input)."""
        self.model = FrameModel(bundle.read_snapshot())
        self.restarts = 0
        self._shed_seq = 0

    @property
    def state(self) -> RunState:
        return self.model.state

    @property
    def notice(self) -> str | None:
        return self.trace.corruption or self.session.corruption

    def _start(self) -> None:
        """The first read: the state from the newest fold checkpoint plus the tail, not a fold of every line.

        The progress tracks still see every progress update of the run (found by a byte search of the folded
        prefix); the trace tail then continues from where the fold stopped, so nothing is read twice.
        """
        replayed = replay(self.bundle.path, self.bundle.run_id, bounded=True)  # (a frame needs no old step)
        self.model.reset(replayed.state)
        self.model.tracks.feed(events_of_type(self.bundle.trace_path, "update_published", replayed.offset))
        self.trace.offset, self.trace.next_seq = replayed.offset, replayed.next_seq
        self._shed_seq = replayed.state.trace_seq

    def poll(self, on_event: Callable[[Any, RunState], None] | None = None) -> bool:
        """Read what was appended since the last call; True when anything changed.

        Both files are taken a chunk at a time (a first read of a long run never holds all its records), and
        a repaired file (shorter than what was read) starts everything again.
        """
        started = self.trace.offset == 0 and on_event is None
        if started:
            self._start()
        changed = self._read(on_event)
        if changed is None:  # repaired
            self.restarts += 1
            self.trace.reset()
            self.session.reset()
            self.model.reset()
            if on_event is None:
                self._start()
            self._read(on_event)
            return True
        return started or changed

    def _shed(self) -> None:
        """Keep a long watch's memory flat: every :data:`SHED_EVERY` events folded, the steps up to the newest
        trusted fold checkpoint (the run's writer leaves them as it appends) are held as that checkpoint's, read
        back only when something reads them. The same steps, so the same state."""
        state = self.model.state
        if state.trace_seq - self._shed_seq < SHED_EVERY:
            return
        self._shed_seq = state.trace_seq
        found = checkpointed_steps(self.bundle.path, self.bundle.run_id, state.trace_seq)
        if found is None or len(found[1]) > len(state.steps):
            return
        prefix = found[1]
        self.model.state = evolve(state, {"steps": prefix.extended(state.steps.after(len(prefix)))})

    def _read(self, on_event: Callable[[Any, RunState], None] | None) -> bool | None:
        changed = False
        # The trace's size is taken first: every entry an event up to there names is then in the session
        # read below (a session line is durable before the event naming it).
        trace_size = self.trace.size()
        for entries, restarted in self.session.stream():
            if restarted:
                return None
            self.model.add_entries(entries)
            changed = changed or bool(entries)
        for events, restarted in self.trace.stream(trace_size):
            if restarted:
                return None
            if on_event is None:
                self.model.add_events(events)
            else:
                for event in events:
                    self.model.add_events([event])
                    on_event(event, self.model.state)
            changed = changed or bool(events)
        self._shed()
        streamed = self.stream.poll()
        current = self.model.state.current
        self.model.live_reply = self.stream.reply_of(current.attempt_id if current is not None else None)
        return changed or streamed


def _is_followed(path: str, bundle: Bundle) -> bool:
    return Path(path).name in (bundle.trace_path.name, bundle.session_path.name, STREAM_FILE)


def file_changes(bundle: Bundle, stop: threading.Event, *, force_polling: bool = False) -> Iterator[bool]:
    """Yield True after the trace or session changed, False on the once-a-second tick; until ``stop`` is
    set."""
    if not force_polling:
        try:
            import watchfiles

            # A tick also reports a change when the files grew since the last one: lines appended before the
            # watch was registered raise no event (the first tick always reports, for those), and a reader that
            # only re-reads on a change must not wait for the next write to see them.
            last: tuple[int, ...] | None = None
            for changes in watchfiles.watch(
                bundle.path,
                watch_filter=lambda _change, path: _is_followed(path, bundle),
                step=COALESCE_MS // 2,
                debounce=COALESCE_MS,
                rust_timeout=int(TICK_S * 1000),
                yield_on_timeout=True,
                stop_event=stop,
                raise_interrupt=False,
            ):
                sizes = _sizes(bundle)
                grew, last = bool(changes) or sizes != last, sizes
                yield grew
            return
        except (ImportError, OSError, RuntimeError):
            pass  # no file notifications here (e.g. an inotify limit): fall back to polling
    yield from _poll_changes(bundle, stop)


def _sizes(bundle: Bundle) -> tuple[int, ...]:
    sizes = []
    for path in (bundle.trace_path, bundle.session_path, bundle.path / STREAM_FILE):
        try:
            sizes.append(os.stat(path).st_size)
        except FileNotFoundError:
            sizes.append(-1)
    return tuple(sizes)


def _poll_changes(bundle: Bundle, stop: threading.Event) -> Iterator[bool]:
    last: tuple[int, ...] | None = (
        None  # the first round always reports, catching anything appended meanwhile
    )
    ticked = time.monotonic()
    while not stop.wait(POLL_S):
        sizes = _sizes(bundle)
        if sizes != last:
            last = sizes
            ticked = time.monotonic()
            yield True
        elif time.monotonic() - ticked >= TICK_S:
            ticked = time.monotonic()
            yield False
