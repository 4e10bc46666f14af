"""An agent attempt's stream, written to the bundle's side file for watchers on other terminals.

:class:`StreamListener` is one more agent-loop listener (``AttemptRun`` adds it next to the display): it turns the
loop's events into ``live-stream.ndjson`` records (:mod:`piw.store.live_stream`, ``docs/views.md``). Deltas are
redacted like the display's (``docs/guarantees.md``, "Redaction"); a write that fails (a full disk) turns the
listener off for the attempt and never touches the step.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from piw.providers.messages import AssistantReply
from piw.redaction import redacting_listeners, redactor_for
from piw.store.live_stream import release_stream_file, stream_file
from piw.store.place import home_of

if TYPE_CHECKING:
    from piw.agent_steps.loop import LoopListener
    from piw.run.executors import Attempt

log = logging.getLogger(__name__)


class StreamListener:
    def __init__(self, attempt: Attempt) -> None:
        self.bundle_path = attempt.writer.bundle.path
        self.file = stream_file(self.bundle_path)
        self.base = {"attemptId": attempt.attempt_id, "nodeId": attempt.node_id}
        self.on = True

    def __call__(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind == "agent_end":  # the loop is over: give the file back (the last attempt closes it)
            if self.on:
                self.on = False
                release_stream_file(self.bundle_path)
            return
        if not self.on:
            return
        record: dict[str, Any] | None = None
        if kind == "message_start":
            record = {"kind": "start"}
        elif kind == "message_update" and event.delta == "text_delta":
            record = {"kind": "text", "text": event.text}
        elif kind == "tool_execution_start":
            record = {"kind": "tool", "tool": event.tool_name}
        elif kind == "message_end" and isinstance(event.message, AssistantReply):
            record = {"kind": "end"}
        if record is None:
            return
        try:
            self.file.write({**self.base, **record})
        except OSError as exc:
            self.on = False
            release_stream_file(self.bundle_path)
            log.debug("no live stream for attempt %s: %s", self.base["attemptId"], exc)


def stream_listeners(attempt: Attempt) -> list[LoopListener]:
    """The attempt's side-file listener, redacting with its home's secrets."""
    home = home_of(attempt.writer.bundle.path.parent.parent)
    return redacting_listeners([StreamListener(attempt)], redactor_for(home))
