"""Hooks that run when a process takes a run over, before anything of it reruns.

A claim can take over from a holder that crashed or whose lease expired (``persistence.md`` §10.2). Whatever that
holder left running outside the bundle — a shell command's process group that outlived it (issue 10 item 2) —
must be dealt with before the node reruns or the run is cancelled. The resume path (``Engine.resume``) and the
canceller (``piw cancel`` of a run without a live holder) call :func:`before_rerun` with what they know; the
functions registered in :data:`TAKEOVER_HOOKS` do the work. A hook must not write to the bundle (the caller has
fenced and holds the writer lock, and the trace is the caller's to write) and should not raise; an exception is
logged and the takeover goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from piw.store.bundle import Bundle
from piw.store.replay import RunState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Takeover:
    """What a takeover knows: the bundle, the folded state, and the holder it took over from (if any)."""

    bundle: Bundle
    state: RunState
    previous_runner: str | None
    """``{hostname}:{pid}:{start time}`` of the expired or dead holder; ``None`` when the row was not held."""
    reason: str
    """``resume`` or ``cancel``."""


TAKEOVER_HOOKS: list[Callable[[Takeover], None]] = []
"""Called in order by :func:`before_rerun`. Owner of the shell process-group hook: ``faults`` (issue 10.2)."""


def before_rerun(takeover: Takeover) -> None:
    """Run every takeover hook; failures are logged, never fatal."""
    for hook in list(TAKEOVER_HOOKS):
        try:
            hook(takeover)
        except Exception as exc:
            log.warning("run %s: takeover hook %r failed: %s", takeover.bundle.run_id, hook, exc)
