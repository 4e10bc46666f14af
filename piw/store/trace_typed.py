"""Typed decoding of trace lines for a replay: the hot event types decoded straight into structs.

A long run's trace is almost all ``node_started`` / ``node_finished`` pairs (``docs/bundle-format.md`` §6). The
generic reader (:func:`piw.store.trace.decode_lines`) builds a dict for every payload and the fold then reads it
key by key. Here one ``msgspec`` call decodes a chunk of lines into a union tagged on ``type``: the three hot types
(``node_started``, ``node_finished``, ``node_failed``) get their payload as a struct with exactly the keys §6 lists,
which the fold reads as attributes, and every other type of §6 gets the ``TraceEvent`` fields with a dict payload.

The events are ``TraceEvent``\\ s in all but class: the same attributes (``type`` is a class attribute, ``payload``
of a hot type is built when read), so every handler of the fold takes them as they are, and only the fold's fast
path (``piw.store.fold._fold_into``) reads the typed payloads. A chunk is decoded here only when the generic reader
would accept it and the fold would give the same state; otherwise :func:`decode_typed` says ``None`` and the caller
decodes that chunk the generic way:

- a hot payload with a key this module does not list (a newer writer) fails the chunk (``forbid_unknown_fields``),
  so no key the fold might read is ever dropped;
- a type that is not in :data:`EVENT_TYPES` fails the chunk (readers skip unknown types: the generic path does);
- the envelope is checked as :func:`piw.store.trace.decode_event` checks it: the same field types, ``seq`` in order
  with no gap, and ``nodeId``/``attemptId`` on attempt-scoped events (a hot event must have both whatever its
  scope: one without them is left to the generic reader).

``tests/store/test_trace_typed.py`` folds generated traces of every type, and real runs' traces, both ways.
"""

from __future__ import annotations

import functools
import operator
import types
from typing import Any, ClassVar, Union, cast

import msgspec
from msgspec import UNSET

from piw.store.trace import ATTEMPT_SCOPES, Scope, TraceEvent

__all__ = ["EVENT_TYPES", "NodeFailedLine", "NodeFinishedLine", "NodeStartedLine", "decode_typed"]

EVENT_TYPES = (
    "run_started",
    "run_paused",
    "run_resumed",
    "run_completed",
    "run_waiting",
    "run_failed",
    "run_timed_out",
    "run_cancelled",
    "run_interrupted",
    "session_bound",
    "include_entered",
    "include_exited",
    "agent_prompt_sent",
    "update_published",
    "usage_recorded",
    "assistant_completion_recorded",
    "child_step_finished",
    "mcp_tools_listed",
    "mcp_tools_changed",
    "process_started",
    "effect_started",
    "effect_outcome_unknown",
    "effect_resolved",
    "effect_reconciled",
    "tool_call_started",
    "notification_queued",
)
"""The types of ``docs/bundle-format.md`` §6 other than the hot three: decoded with a dict payload."""

_WIRE = {"run_id": "runId", "node_id": "nodeId", "attempt_id": "attemptId", "body": "payload"}


class StartedBody(msgspec.Struct, frozen=True, gc=False, rename="camel", forbid_unknown_fields=True):
    """``node_started``'s payload. ``UNSET``: the key is absent (the fold's default applies); ``None`` defaults
    stand for an absent key where the fold reads absent and ``null`` alike."""

    node_type: Any = UNSET
    status_detail: Any = None
    timeout_ms: Any = None


class EndBody(msgspec.Struct, frozen=True, gc=False, rename="camel", forbid_unknown_fields=True):
    """``node_finished`` / ``node_failed``'s payload (defaults as in :class:`StartedBody`)."""

    outcome: Any = UNSET
    duration_ms: Any = None
    output: Any = None
    error: Any = None
    traceback: Any = None
    conversation: Any = None
    action: Any = None
    usage: Any = None


def _as_payload(body: StartedBody | EndBody) -> dict[str, Any]:
    """The payload as the fold reads it: every key that was present (a ``None``-default key only when not null,
    which ``payload.get`` cannot tell from absent)."""
    keys = body.__struct_encode_fields__
    defaults = body.__struct_defaults__
    return {
        key: value
        for key, value, default in zip(keys, msgspec.structs.astuple(body), defaults, strict=True)
        if value is not UNSET and (value is not None or default is UNSET)
    }


class _HotLine(msgspec.Struct, frozen=True, gc=False, tag_field="type", rename=_WIRE):
    seq: int
    at: str
    scope: Scope
    run_id: str
    node_id: str
    attempt_id: str


class NodeStartedLine(_HotLine, frozen=True, tag="node_started"):
    body: StartedBody = StartedBody()
    type: ClassVar[str] = "node_started"

    @property
    def payload(self) -> dict[str, Any]:
        return _as_payload(self.body)


class NodeFinishedLine(_HotLine, frozen=True, tag="node_finished"):
    body: EndBody = EndBody()
    type: ClassVar[str] = "node_finished"

    @property
    def payload(self) -> dict[str, Any]:
        return _as_payload(self.body)


class NodeFailedLine(_HotLine, frozen=True, tag="node_failed"):
    body: EndBody = EndBody()
    type: ClassVar[str] = "node_failed"

    @property
    def payload(self) -> dict[str, Any]:
        return _as_payload(self.body)


class _OtherLine(msgspec.Struct, frozen=True, gc=False, tag_field="type", rename=_WIRE):
    """Any other type of §6: ``TraceEvent``'s fields (``type`` is the subclass's class attribute)."""

    seq: int
    at: str
    scope: Scope
    run_id: str
    payload: dict[str, Any] = {}
    node_id: str | None = None
    attempt_id: str | None = None

    def __post_init__(self) -> None:
        if self.scope in ATTEMPT_SCOPES and (self.node_id is None or self.attempt_id is None):
            raise ValueError(f"{self.scope} event needs nodeId and attemptId")


def _other(name: str) -> type[_OtherLine]:
    title = "".join(part.title() for part in name.split("_")) + "Line"
    made = types.new_class(title, (_OtherLine,), {"tag": name}, lambda ns: ns.update(type=name))
    return cast(type[_OtherLine], made)


@functools.cache
def _decoder() -> Any:
    """The union's decoder, built on the first long read (a tenth of a second of start-up otherwise, under load:
    29 struct types)."""
    types_ = (NodeStartedLine, NodeFinishedLine, NodeFailedLine, *(_other(name) for name in EVENT_TYPES))
    return msgspec.json.Decoder(Union[types_])  # noqa: UP007 (a union built at run time)


_SEQ = operator.attrgetter("seq")


def decode_typed(body: bytes, expected_seq: int) -> list[TraceEvent] | None:
    """Every line of ``body`` (complete lines only) decoded typed, or ``None`` when the chunk is to be decoded the
    generic way (:func:`piw.store.trace.decode_lines`, which also finds a bad line): see the module docstring."""
    try:
        events: list[Any] = _decoder().decode_lines(body)
    except (ValueError, UnicodeDecodeError):  # msgspec.ValidationError and DecodeError are ValueErrors
        return None
    count = len(events)
    if count != body.count(b"\n") or list(map(_SEQ, events)) != list(
        range(expected_seq, expected_seq + count)
    ):
        return None
    return events  # (TraceEvents in all but class: module docstring)
