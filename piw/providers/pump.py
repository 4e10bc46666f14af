"""Run a blocking HTTP stream in a worker thread so the caller can abandon it the moment it is cancelled.

A blocked socket read cannot be interrupted from the thread doing it. The worker does the reading; the
caller's thread waits on a queue with a short timeout, watches the cancel event and, when it is set,
calls the adapter's ``abort`` (which shuts the socket down so the server sees the disconnect) and returns
at once (``docs/design/agent-steps.md`` §4: a held request closes within 1 s even when no bytes arrive).

:meth:`StreamPump.events` is the one loop every HTTP adapter runs: items are folded into builder events as
they come, and the stream then ends as cancelled, failed or finished, in that order of precedence.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Generic, Protocol, TypeVar, cast

from piw.providers.base import ProviderEvent
from piw.providers.builder import MessageBuilder
from piw.providers.messages import Usage

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class StreamFold(Protocol[T_contra]):
    """What an adapter knows about its SDK's stream: how an item becomes events, and how a clean end does."""

    def feed(self, item: T_contra) -> list[ProviderEvent]: ...

    def usage(self) -> Usage: ...

    def finish(self) -> list[ProviderEvent]:
        """The final events of a stream that ended without an exception (a reply, or a cut stream)."""
        ...


POLL_S = 0.05
"""How often the waiting thread looks at the cancel event; far below the 1 s budget."""


class _Stopped(Exception):
    """Raised inside the worker when the consumer has gone, to unwind the producer quickly."""


class StreamPump(Generic[T]):
    """Feeds items from ``produce(emit)`` (run in a daemon thread) to ``items()`` in the caller's thread.

    After ``items()`` returns, exactly one of ``cancelled``, ``error`` (the producer's exception) or a
    clean end holds.
    """

    def __init__(
        self, produce: Callable[[Callable[[T], None]], None], abort: Callable[[], None], name: str
    ) -> None:
        self._produce = produce
        self._abort = abort
        self._queue: queue.SimpleQueue[tuple[str, T | BaseException | None]] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.cancelled = False
        self.error: BaseException | None = None

    def items(self, cancel: threading.Event) -> Generator[T, None, None]:
        self._thread.start()
        finished = False
        try:
            while True:
                if cancel.is_set():
                    self.cancelled = True
                    return
                try:
                    kind, payload = self._queue.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if kind == "end":
                    finished = True
                    return
                if kind == "error":
                    finished = True
                    self.error = cast(BaseException, payload)
                    return
                yield cast(T, payload)
        finally:
            # Early exit (cancel, or the consumer stopped iterating): release the worker and its socket. A
            # finished worker has already released them, and a pooled connection must stay usable.
            if not finished:
                self.stop()

    def events(
        self,
        cancel: threading.Event,
        builder: MessageBuilder,
        fold: StreamFold[T],
        failure: Callable[[BaseException, Usage], list[ProviderEvent]],
    ) -> Iterator[ProviderEvent]:
        """Run the stream to its end: ``fold``'s events as items arrive, then an abort, ``failure`` or ``finish``."""
        with contextlib.closing(self.items(cancel)) as items:
            for item in items:
                yield from fold.feed(item)
        if self.cancelled or cancel.is_set():
            yield from builder.abort(fold.usage())
        elif self.error is not None:
            yield from failure(self.error, fold.usage())
        else:
            yield from fold.finish()

    def stop(self) -> None:
        """Idempotent: tell the worker to stop and let the adapter break any blocked read."""
        if not self._stopping.is_set():
            self._stopping.set()
            self._abort()

    def _emit(self, item: T) -> None:
        if self._stopping.is_set():
            raise _Stopped
        self._queue.put(("item", item))

    def _run(self) -> None:
        try:
            self._produce(self._emit)
        except _Stopped:
            pass
        except BaseException as exc:  # handed to the caller's thread, which decides what it means
            self._queue.put(("error", exc))
            return
        self._queue.put(("end", None))
