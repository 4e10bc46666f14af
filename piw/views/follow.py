"""Following a growing run bundle: file-change notifications and a follower that folds what was appended.

Shared by ``piw watch`` (``piw.cli.watch``) and the full-screen viewer (``piw.app``), which is why it lives below
the CLI. File events come from ``watchfiles`` (coalesced over ~50 ms, with a once-a-second wake-up so clocks
tick), and a plain stat-polling loop takes over when file notifications are unavailable. Reading is incremental:
the :class:`~piw.views.source.Tail` keeps its byte offset, buffers a partial last line and starts again from byte
0 when the file shrank (a torn tail repaired on resume), in which case the model is rebuilt from scratch;
otherwise only the new events are folded (``fold_more``). Nothing here writes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from piw.store.bundle import Bundle
from piw.store.replay import RunState
from piw.views.frame import FrameModel
from piw.views.source import session_tail, trace_tail

COALESCE_MS = 50
"""Changes are grouped for at most this long (``debounce``), yielded once 25 ms pass without another one."""
TICK_S = 1.0
POLL_S = 0.05


class Follower:
    """Keeps a :class:`FrameModel` in step with a bundle's trace and session files."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle
        self.trace = trace_tail(bundle)
        self.session = session_tail(bundle)
        self.model = FrameModel(bundle.read_snapshot())
        self.restarts = 0

    @property
    def state(self) -> RunState:
        return self.model.state

    @property
    def notice(self) -> str | None:
        return self.trace.corruption or self.session.corruption

    def poll(self, on_event: Callable[[Any, RunState], None] | None = None) -> bool:
        """Read what was appended since the last call; True when anything changed."""
        read = self.trace.read()
        entries = self.session.read()
        if read.restarted or entries.restarted:
            self.restarts += 1
            self.trace.reset()
            self.session.reset()
            self.model.reset()
            read, entries = self.trace.read(), self.session.read()
        self.model.add_entries(entries.records)
        if on_event is None:
            self.model.add_events(read.records)
        else:
            for event in read.records:
                self.model.add_events([event])
                on_event(event, self.model.state)
        return bool(read.records or entries.records or read.restarted or entries.restarted)


def _is_followed(path: str, bundle: Bundle) -> bool:
    return Path(path).name in (bundle.trace_path.name, bundle.session_path.name)


def file_changes(bundle: Bundle, stop: threading.Event, *, force_polling: bool = False) -> Iterator[bool]:
    """Yield True after the trace or session changed, False on the once-a-second tick; until ``stop`` is
    set."""
    if not force_polling:
        try:
            import watchfiles

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
                yield bool(changes)
            return
        except (ImportError, OSError, RuntimeError):
            pass  # no file notifications here (e.g. an inotify limit): fall back to polling
    yield from _poll_changes(bundle, stop)


def _sizes(bundle: Bundle) -> tuple[int, ...]:
    sizes = []
    for path in (bundle.trace_path, bundle.session_path):
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
