"""Spans of a run, from its folded state and its conversation: pure data, no OpenTelemetry import.

One span for the run, one per finished node attempt, one per model request (an assistant entry of the attempt's
conversation) and one per tool call (a ``toolCall`` block and its ``toolResult``), with the GenAI semantic
conventions' attributes plus piw's own (``docs/telemetry.md``). Ids derive from the run, attempt and entry ids,
so the same run exported twice (or live, then after the fact) gives the same trace and span ids, and a collector
sees one set of spans. Times are the trace's and the conversation's own timestamps.

Prompts, replies and tool arguments are content: they are attached only with ``include_content``. Every value
passes the home's redactor before it leaves (``docs/guarantees.md``, "Redaction").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from piw.progress import parse_instant
from piw.redaction import Redactor
from piw.store.session import SessionEntry
from piw.store.state import RunState, StepRecord

AttributeValue = str | int | float | bool | tuple[str, ...]
CONTENT_CHARS = 16_000
"""A content attribute (prompt, reply, tool arguments) is cut to this many characters."""


@dataclass(frozen=True)
class SpanSpec:
    """One span, ready for any exporter: 128-bit trace id, 64-bit span ids, nanosecond UTC times."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start_ns: int
    end_ns: int
    kind: str = "internal"
    """``internal`` or ``client`` (a model request)."""
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    error: str | None = None
    """The status description of a failed span; ``None`` for a span that did not fail."""


def _digest(*parts: str, size: int) -> int:
    raw = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()[:size]
    return int.from_bytes(raw, "big") or 1  # an all-zero id is invalid in OpenTelemetry


def trace_id_of(run_id: str) -> int:
    """The run's 128-bit trace id (the same on every export)."""
    return _digest("piw.trace", run_id, size=16)


def span_id_of(*parts: str) -> int:
    """A 64-bit span id from the ids that name the span (run, attempt, entry, call)."""
    return _digest("piw.span", *parts, size=8)


def _ns(instant: object) -> int | None:
    parsed = parse_instant(instant)
    return int(parsed.timestamp() * 1_000_000) * 1000 if parsed is not None else None


def _clip(text: str) -> str:
    return text if len(text) <= CONTENT_CHARS else text[:CONTENT_CHARS] + "…"


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _usage_attributes(usage: Mapping[str, Any] | None) -> dict[str, AttributeValue]:
    if not usage:
        return {}
    found: dict[str, AttributeValue] = {
        "gen_ai.usage.input_tokens": int(usage.get("input") or 0),
        "gen_ai.usage.output_tokens": int(usage.get("output") or 0),
    }
    if usage.get("requests") is not None:
        found["piw.usage.requests"] = int(usage["requests"])
    if isinstance(usage.get("cost"), int | float):
        found["piw.cost_usd"] = float(usage["cost"])
    return found


@dataclass
class SpanBuilder:
    """Builds the spans of one run; ``redactor`` scrubs every string attribute and status text."""

    run_id: str
    workflow_name: str
    redactor: Redactor
    include_content: bool = False
    resolve: Callable[[Any], Any] = lambda value: value
    """Loads artifact refs in content (a long prompt or output is an artifact, ``docs/bundle-format.md`` §9)."""

    @property
    def trace_id(self) -> int:
        return trace_id_of(self.run_id)

    @property
    def root_id(self) -> int:
        return span_id_of(self.run_id, "run")

    def _span(
        self,
        name: str,
        span_id: int,
        parent_id: int | None,
        start: int,
        end: int,
        attributes: dict[str, AttributeValue],
        *,
        kind: str = "internal",
        error: str | None = None,
    ) -> SpanSpec:
        clean = {
            key: self.redactor.text(value) if isinstance(value, str) else value
            for key, value in attributes.items()
        }
        return SpanSpec(
            self.redactor.text(name),
            self.trace_id,
            span_id,
            parent_id,
            start,
            max(start, end),
            kind,
            clean,
            self.redactor.text(error) if error is not None else None,
        )

    def _base(self) -> dict[str, AttributeValue]:
        return {"piw.run_id": self.run_id, "piw.workflow.name": self.workflow_name}

    # ---- the run --------------------------------------------------------------------------------------

    def run_span(self, state: RunState) -> SpanSpec | None:
        """The run's span, from its first event to its terminal one (its latest while it still runs)."""
        start = _ns(state.started_at)
        end = _ns(state.finished_at or state.updated_at)
        if start is None or end is None:
            return None
        attributes = self._base() | {
            "gen_ai.operation.name": "invoke_workflow",
            "gen_ai.workflow.name": self.workflow_name,
            "piw.status": state.status,
            "piw.steps": len(state.steps),
        }
        if state.run_title:
            attributes["piw.run_title"] = state.run_title
        attributes |= _usage_attributes(state.usage)
        failed = state.status in ("failed", "timed_out", "cancelled")
        return self._span(
            f"run {self.workflow_name}",
            self.root_id,
            None,
            start,
            end,
            attributes,
            error=(state.error or state.status) if failed else None,
        )

    # ---- attempts -------------------------------------------------------------------------------------

    def attempt_spans(self, step: StepRecord, entries: Sequence[SessionEntry]) -> list[SpanSpec]:
        """The span of one finished attempt, then those of its model requests and tool calls (``entries``: the
        attempt's conversation, its ``ctx.run_agent`` children's included)."""
        end = _ns(step.finished_at)
        start = _ns(step.started_at) or end
        if start is None or end is None:
            return []
        span_id = span_id_of(self.run_id, step.attempt_id)
        agent = step.node_type == "agent"
        attributes = self._base() | {
            "piw.node_id": step.node_id,
            "piw.attempt_id": step.attempt_id,
            "piw.node_type": step.node_type,
            "piw.outcome": step.outcome,
        }
        if agent:
            attributes |= {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": step.node_id}
        if step.duration_ms is not None:
            attributes["piw.duration_ms"] = int(step.duration_ms)
        attributes |= _usage_attributes(step.usage)
        if self.include_content and step.prompt:
            prompt = _json_text(self.resolve(step.prompt))
            attributes["gen_ai.input.messages"] = _clip(
                json.dumps([{"role": "user", "parts": [{"type": "text", "content": prompt}]}])
            )
        if self.include_content and step.output is not None:
            attributes["piw.output"] = _clip(_json_text(self.resolve(step.output)))
        name = f"invoke_agent {step.node_id}" if agent else f"{step.node_type} {step.node_id}"
        failed = None if step.outcome == "ok" else (step.error or step.outcome)
        spans = [self._span(name, span_id, self.root_id, start, end, attributes, error=failed)]
        spans += self._conversation_spans(step, span_id, entries)
        return spans

    def _conversation_spans(
        self, step: StepRecord, parent: int, entries: Sequence[SessionEntry]
    ) -> list[SpanSpec]:
        spans: list[SpanSpec] = []
        previous: str | None = None
        results = {
            str(e.message.get("toolCallId")): e for e in entries if e.message.get("role") == "toolResult"
        }
        for entry in entries:
            message = entry.message
            if message.get("role") == "assistant":
                spans.append(self._request_span(step, parent, entry, previous))
                spans += self._tool_spans(step, parent, entry, results)
            previous = entry.timestamp
        return spans

    def _request_span(
        self, step: StepRecord, parent: int, entry: SessionEntry, previous: str | None
    ) -> SpanSpec:
        message = entry.message
        end = _ns(message.get("completedAt")) or _ns(entry.timestamp) or 0
        start = _ns(previous) or end
        model = str(message.get("model") or "")
        attributes = self._base() | {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": str(message.get("provider") or ""),
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            "gen_ai.agent.name": step.node_id,
            "piw.node_id": step.node_id,
            "piw.attempt_id": step.attempt_id,
            "piw.entry_id": entry.id,
        }
        if message.get("stopReason"):
            attributes["gen_ai.response.finish_reasons"] = (str(message["stopReason"]),)
        if message.get("retried"):
            attributes["piw.retried"] = True
        attributes |= _usage_attributes(message.get("usage"))
        if self.include_content:
            attributes["gen_ai.output.messages"] = _clip(
                json.dumps([{"role": "assistant", "parts": message.get("content") or []}], default=str)
            )
        failed = message.get("errorMessage") if message.get("stopReason") in ("error", "aborted") else None
        return self._span(
            f"chat {model}".strip(),
            span_id_of(self.run_id, step.attempt_id, entry.id),
            parent,
            start,
            end,
            attributes,
            kind="client",
            error=str(failed or message.get("stopReason")) if failed is not None else None,
        )

    def _tool_spans(
        self, step: StepRecord, parent: int, entry: SessionEntry, results: Mapping[str, SessionEntry]
    ) -> list[SpanSpec]:
        spans = []
        start = _ns(entry.message.get("completedAt")) or _ns(entry.timestamp) or 0
        for block in entry.message.get("content") or []:
            if not isinstance(block, dict) or block.get("type") != "toolCall":
                continue
            call_id, tool = str(block.get("id") or ""), str(block.get("name") or "")
            result = results.get(call_id)
            end = _ns(result.timestamp) if result is not None else None
            attributes = self._base() | {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.call.id": call_id,
                "piw.node_id": step.node_id,
                "piw.attempt_id": step.attempt_id,
            }
            error = None
            if result is not None and result.message.get("isError"):
                error = "the tool returned an error"
            elif result is None:
                error = "no result was recorded"
            if self.include_content:
                attributes["gen_ai.tool.call.arguments"] = _clip(_json_text(block.get("arguments")))
                if result is not None:
                    attributes["gen_ai.tool.call.result"] = _clip(_json_text(result.message.get("content")))
            spans.append(
                self._span(
                    f"execute_tool {tool}",
                    span_id_of(self.run_id, step.attempt_id, entry.id, call_id),
                    parent,
                    start,
                    end if end is not None else start,
                    attributes,
                    error=error,
                )
            )
        return spans


def conversation_ranges(step: StepRecord) -> list[tuple[str, str]]:
    """``(firstEntryId, lastEntryId)`` of the attempt's conversation and of each ``ctx.run_agent`` child's."""
    ranges = []
    for conversation in (step.conversation, *(child.get("conversation") for child in step.children)):
        if (
            isinstance(conversation, dict)
            and conversation.get("firstEntryId")
            and conversation.get("lastEntryId")
        ):
            ranges.append((str(conversation["firstEntryId"]), str(conversation["lastEntryId"])))
    return ranges


def entries_of(
    step: StepRecord, entries: Sequence[SessionEntry], index: Mapping[str, int] | None = None
) -> list[SessionEntry]:
    """The attempt's entries in conversation order. ``index`` maps entry id → position (a whole-run export
    builds it once); without it the entries are searched from the end (a live export, whose step is the newest)."""
    found: list[SessionEntry] = []
    for first, last in conversation_ranges(step):
        begin, end = _position(entries, first, index), _position(entries, last, index)
        if begin is not None and end is not None and begin <= end:
            found.extend(entries[begin : end + 1])
    return found


def _position(entries: Sequence[SessionEntry], entry_id: str, index: Mapping[str, int] | None) -> int | None:
    if index is not None:
        return index.get(entry_id)
    for position in range(len(entries) - 1, -1, -1):
        if entries[position].id == entry_id:
            return position
    return None


def run_spans(
    state: RunState,
    entries: Iterable[SessionEntry],
    redactor: Redactor,
    *,
    include_content: bool = False,
    resolve: Callable[[Any], Any] = lambda value: value,
) -> list[SpanSpec]:
    """Every span of a run as folded so far: the run's, then each finished attempt's with its requests and
    tool calls (``piw export --otlp``)."""
    listed = list(entries)
    index = {entry.id: position for position, entry in enumerate(listed)}
    builder = SpanBuilder(state.run_id, state.workflow_name, redactor, include_content, resolve)
    spans: list[SpanSpec] = []
    root = builder.run_span(state)
    if root is not None:
        spans.append(root)
    for step in state.steps:
        spans += builder.attempt_spans(step, entries_of(step, listed, index))
    return spans
