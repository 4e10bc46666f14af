"""A deadline on importing a workflow file: an endless loop at import time is an error naming the file, not a hang.

Importing a ``*.workflow.py`` runs its top-level code, and ``piw list`` imports every file it finds; one file with
``while True: pass`` would hang ``list``, ``validate``, ``run`` and a host for ever (``docs/guarantees.md``,
"Hostile workflow files"). Three layers, cheapest first:

* in the main thread, ``signal.setitimer`` delivers ``SIGALRM`` and its handler raises :class:`DeadlinePassed`:
  this also interrupts a ``time.sleep`` or a blocking read;
* in another thread (a host runs each run in a worker thread), one shared alarm thread raises
  :class:`DeadlinePassed` in the importing thread with ``PyThreadState_SetAsyncExc``: that stops any loop that
  runs Python bytecode;
* a loop that never returns to the interpreter (``sum(itertools.count())``) cannot be interrupted from Python:
  ``faulthandler.dump_traceback_later(exit=True)`` ends the process :data:`BACKSTOP_GRACE_S` after the deadline,
  printing the stack, which names the workflow file and line.

Arming costs a few microseconds per import (no subprocess). The timers of an enclosing caller (``pytest-timeout``
uses ``SIGALRM`` too) are put back, less the time the import took.
"""

from __future__ import annotations

import faulthandler
import math
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from piw.errors import UsageError

BACKSTOP_GRACE_S = 5.0
"""After the deadline, how long a loop that never returns to the interpreter gets before the process ends."""


class DeadlinePassed(BaseException):
    """Raised into the importing thread when its deadline passes; a ``BaseException`` so ``except Exception`` in
    workflow code cannot swallow it."""


class _Watches:
    """The deadlines in force, by thread: one process-wide ``faulthandler`` backstop serves them all."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ends: dict[int, float] = {}

    def add(self, thread_id: int, ends: float) -> None:
        with self.lock:
            self.ends[thread_id] = ends
            self._arm_backstop()

    def remove(self, thread_id: int) -> None:
        with self.lock:
            self.ends.pop(thread_id, None)
            self._arm_backstop()

    def _arm_backstop(self) -> None:
        stream = _backstop_stream()
        if stream is None:
            return
        if not self.ends:
            faulthandler.cancel_dump_traceback_later()
            return
        left = min(self.ends.values()) + BACKSTOP_GRACE_S - time.monotonic()
        faulthandler.dump_traceback_later(max(left, 0.001), exit=True, file=stream)


_watches = _Watches()


class _ThreadAlarms:
    """One daemon thread raises :class:`DeadlinePassed` into every importing thread whose deadline passed.

    A host imports the workflow file for each run it claims, in that run's thread; a ``threading.Timer`` per import
    was one more thread started (and scheduled, among the host's busy run threads) for every run. This thread is
    started on the first import off the main thread (again after a fork, where it does not survive) and sleeps
    until the earliest deadline, or for good while none is armed.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[ImportDeadline, float] = {}
        self._thread: threading.Thread | None = None

    def arm(self, deadline: ImportDeadline, ends: float) -> None:
        with self._changed:
            self._due[deadline] = ends
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._watch, name="piw-import-deadlines", daemon=True)
                self._thread.start()
            self._changed.notify()

    def disarm(self, deadline: ImportDeadline) -> None:
        with self._changed:
            self._due.pop(deadline, None)

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                passed = [deadline for deadline, ends in self._due.items() if ends <= now]
                for deadline in passed:
                    del self._due[deadline]
                    deadline._raise_in_thread()  # takes only the deadline's own guard, never this condition
                if not passed:
                    self._changed.wait(min(self._due.values()) - now if self._due else None)


_alarms = _ThreadAlarms()


def _backstop_stream() -> Any:
    """The real standard error, when it is a file descriptor faulthandler can write to."""
    stream = sys.__stderr__
    try:
        stream.fileno()  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError):
        return None
    return stream


class ImportDeadline:
    """``with ImportDeadline(seconds):`` raises :class:`DeadlinePassed` into the block once it runs too long.

    Re-entrant per thread: a nested import (a built-in a workflow includes) runs under the outer deadline.
    """

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self._thread = threading.get_ident()
        self._armed = False
        self._active = False
        self._guard = threading.Lock()
        self._in_thread = False
        self._previous_handler: Any = None
        self._previous_timer: tuple[float, float] = (0.0, 0.0)
        self._started = 0.0

    def __enter__(self) -> ImportDeadline:
        if self.seconds is None or self._thread in _watches.ends:
            return self
        self._armed = self._active = True
        self._started = time.monotonic()
        _watches.add(self._thread, self._started + self.seconds)
        if threading.current_thread() is threading.main_thread():
            self._arm_signal(self.seconds)
        else:
            self._in_thread = True
            _alarms.arm(self, self._started + self.seconds)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._stop()
        except DeadlinePassed:  # the alarm came as the block ended: finish disarming, then report it
            self._stop()
            raise

    def _stop(self) -> None:
        """Disarm; idempotent, so an alarm arriving half-way through is followed by a second, complete call."""
        if not self._armed:
            return
        with self._guard:
            self._active = False
        if self._in_thread:
            import ctypes  # only off the main thread; a main-thread import (piw run) never loads it

            _alarms.disarm(self)
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self._thread), None
            )  # one not yet raised
        else:
            self._disarm_signal()
        _watches.remove(self._thread)
        self._armed = False

    def _arm_signal(self, seconds: float) -> None:
        self._previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
        self._previous_timer = signal.setitimer(signal.ITIMER_REAL, seconds)

    def _disarm_signal(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._previous_handler)
        delay, interval = self._previous_timer
        self._previous_timer = (0.0, 0.0)
        if delay > 0:  # the caller's own alarm, less the time spent here
            left = delay - (time.monotonic() - self._started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), interval)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self._active:
            raise DeadlinePassed

    def _raise_in_thread(self) -> None:
        import ctypes

        with self._guard:
            if self._active:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self._thread), ctypes.py_object(DeadlinePassed)
                )


DEFAULT_TIMEOUT_S = 10.0
ENV_VARIABLE = "PIW_IMPORT_TIMEOUT"


@dataclass(frozen=True)
class DeadlineSetting:
    """How long an import may take, and where that number came from (for the error's advice)."""

    seconds: float
    source: str

    def advice(self) -> str:
        if self.source == "default":
            return f"the default import deadline; raise it with {ENV_VARIABLE} or import_timeout_s in config.toml"
        return f"the import deadline set by {self.source}"


def import_setting(home: Path | None) -> DeadlineSetting:
    """``PIW_IMPORT_TIMEOUT``, else ``import_timeout_s`` in ``home/config.toml``, else 10 s (``docs/cli.md``)."""
    raw = os.environ.get(ENV_VARIABLE, "").strip()
    if raw:
        return DeadlineSetting(_seconds(raw), ENV_VARIABLE)
    if home is not None and (home / "config.toml").exists():
        from piw.config.path import config_path
        from piw.config.settings import load_config
        from piw.errors import ProviderError

        try:
            configured = load_config(home).import_timeout_s
        except ProviderError:  # reported by whatever needs the config; an import still gets a deadline
            configured = None
        if configured is not None:
            return DeadlineSetting(configured, f"import_timeout_s in {config_path(home)}")
    return DeadlineSetting(DEFAULT_TIMEOUT_S, "default")


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{ENV_VARIABLE} must be a number of seconds above 0 (e.g. 30), not {raw!r}.")
    return value
