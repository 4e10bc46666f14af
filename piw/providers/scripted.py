"""The ``scripted`` provider: deterministic replies with no I/O, for tests and the offline demo (§8.3).

A script is a list of replies, or a mapping from node id to list so that concurrent or reordered steps each
consume their own replies. Replies stream in small deltas exactly like a real adapter's, so the live view,
the loop and cancellation behave as they would against a server. Running out is a loud ``ScriptExhausted``,
never a silent default reply.
"""

from __future__ import annotations

import importlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from piw.errors import ProviderError, ScriptExhausted
from piw.providers.base import ChatRequest, ProviderEvent
from piw.providers.builder import MessageBuilder
from piw.providers.failures import is_transient_status, status_message
from piw.providers.messages import AssistantReply, TextBlock, ThinkingBlock, ToolCallBlock, Usage

ReplyFunction = Callable[[ChatRequest, int], AssistantReply]
ScriptEntry = AssistantReply | ReplyFunction | Mapping[str, Any] | str
Script = Sequence[ScriptEntry] | Mapping[str, Sequence[ScriptEntry]]

FALLBACK_NODE = "*"
"""In a per-node script, the list that serves nodes it does not name and requests without a step."""

_KINDS: dict[str, set[str]] = {
    "submit": {"submit", "text", "usage"},
    "tool": {"tool", "arguments", "id", "text", "usage"},
    "error": {"error", "status", "retryAfter", "retry_after", "usage"},
    "stop": {"stop", "text", "thinking", "usage"},
    "text": {"text", "thinking", "usage"},
}
_WORDS = re.compile(r"\s*\S+\s*|\s+")


@dataclass(frozen=True)
class _ScriptedReply:
    message: AssistantReply
    transient: bool = False
    retry_after_s: float | None = None


class ScriptedProvider:
    """Serves scripted replies in order; ``requests`` records each request, ``pending()`` counts what is left.

    Entries are ``AssistantReply`` values, functions ``(request, index) -> AssistantReply`` (``index`` is
    the entry's position in its list), or the JSON forms of ``docs/design/agent-steps.md`` §8.3. Safe to share between
    threads, as concurrent child steps do.
    """

    def __init__(self, steps: Script, *, name: str = "scripted", model: str = "scripted") -> None:
        self.name = name
        self.model = model
        self.requests: list[ChatRequest] = []
        self._lock = threading.Lock()
        self._lists: dict[str | None, list[ScriptEntry]]
        if isinstance(steps, Mapping):
            self._lists = {node: list(entries) for node, entries in steps.items()}
        else:
            self._lists = {None: list(steps)}
        self._used: dict[str | None, int] = dict.fromkeys(self._lists, 0)
        for key, entries in self._lists.items():
            for position, entry in enumerate(entries):
                _check_entry(entry, f"{key}[{position}]" if key is not None else f"[{position}]")

    @classmethod
    def from_file(cls, path: Path, *, name: str = "scripted", model: str = "scripted") -> ScriptedProvider:
        return cls(load_script(path), name=name, model=model)

    def pending(self) -> int:
        """Replies not yet consumed, over all lists."""
        with self._lock:
            return sum(len(entries) - self._used[key] for key, entries in self._lists.items())

    def stream(self, request: ChatRequest, cancel: threading.Event) -> Iterator[ProviderEvent]:
        entry, index, number = self._take(request)
        reply = _resolve(entry, request, index, number)
        builder = MessageBuilder(self.name, request.model)
        yield from builder.start()
        for delta in _deltas(builder, reply.message):
            if cancel.is_set():
                yield from builder.abort(reply.message.usage)
                return
            yield from delta()
        message = reply.message
        if message.stop_reason in ("error", "aborted"):
            yield from builder.fail(
                message.error_message or "Scripted error.",
                message.usage,
                aborted=message.stop_reason == "aborted",
                transient=reply.transient,
                retry_after_s=reply.retry_after_s,
            )
        else:
            yield from builder.finish(message.stop_reason, message.usage)

    def _take(self, request: ChatRequest) -> tuple[ScriptEntry, int, int]:
        node = request.step.node_id if request.step else None
        with self._lock:
            self.requests.append(request)
            number = len(self.requests)
            key: str | None = None
            if None not in self._lists:
                key = node if node in self._lists else FALLBACK_NODE
            entries = self._lists.get(key)
            index = self._used.get(key, 0)
            if entries is None or index >= len(entries):
                keys = [k for k in self._lists if k is not None]
                raise ScriptExhausted(_exhausted(number, node, key, entries, keys))
            self._used[key] = index + 1
        return entries[index], index, number


def _exhausted(
    number: int, node: str | None, key: str | None, entries: list[ScriptEntry] | None, keys: Sequence[str]
) -> str:
    where = f"node {node}" if node else "no step"
    head = f"The scripted provider has no reply for request {number} ({where})"
    if entries is None:
        have = ", ".join(repr(k) for k in keys) or "none"
        wanted = f"{node!r} or {FALLBACK_NODE!r}" if node else repr(FALLBACK_NODE)
        return f"{head}: the script has replies for {have}; add a list named {wanted}."
    listed = "the script" if key is None else f"the list for {key}"
    count = f"{len(entries)} repl{'y' if len(entries) == 1 else 'ies'}"
    return f"{head}: {listed} has only {count}. Add replies to the script."


def check_script_keys(
    script: Script, node_ids: Sequence[str], parents: Sequence[str] = (), source: str = "the script"
) -> None:
    """Refuse, when the script loads, a per-node list keyed by a node the workflow does not have.

    ``node_ids`` are the nodes whose requests the script answers (agent steps); ``parents`` are nodes whose
    ``ctx.run_agent`` children ask as ``PARENT/KEY``. A typo would otherwise only surface as "no reply" on the
    request that needed the list, after the steps before it ran.
    """
    if not isinstance(script, Mapping):
        return
    known = set(node_ids)
    unknown = [
        key
        for key in script
        if key != FALLBACK_NODE and key not in known and not any(key.startswith(f"{p}/") for p in parents)
    ]
    if unknown:
        listed = ", ".join(repr(k) for k in sorted(known)) or "none"
        what = "which is not an agent step" if len(unknown) == 1 else "which are not agent steps"
        raise ProviderError(
            f"{source} has replies for {', '.join(repr(k) for k in unknown)}, {what} of this workflow; "
            f"its agent steps are {listed} (use {FALLBACK_NODE!r} for any step)."
        )


def load_script(path: Path) -> Script:
    """Read a reply file: JSON, or YAML when PyYAML is installed; a list or a mapping node id → list."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProviderError(f"Cannot read script {path}: {exc}") from exc
    if path.suffix.lower() in (".yaml", ".yml"):
        yaml = _yaml()
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ProviderError(f"Cannot parse script {path}: {exc}") from exc
    else:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ProviderError(f"Cannot parse script {path}: {exc}") from exc
    if isinstance(data, list):
        return cast(list[ScriptEntry], data)
    if isinstance(data, dict) and all(isinstance(value, list) for value in data.values()):
        return cast(dict[str, list[ScriptEntry]], data)
    raise ProviderError(f"Script {path} must hold a list of replies or a mapping from node id to a list.")


def _yaml() -> Any:
    try:
        return importlib.import_module("yaml")
    except ImportError as exc:
        raise ProviderError("YAML scripts need PyYAML: pip install pyyaml (or use a .json script).") from exc


def _check_entry(entry: ScriptEntry, where: str) -> None:
    """Reject malformed JSON entries when the script is loaded, not on the request that reaches them."""
    if isinstance(entry, AssistantReply | str) or callable(entry):
        return
    if not isinstance(entry, Mapping):
        raise ProviderError(f"Script entry {where} must be an object, a string or a reply function.")
    kind = next((kind for kind in _KINDS if kind in entry), None)
    if kind is None or (kind == "text" and not entry):
        raise ProviderError(f"Script entry {where} needs one of: text, thinking, tool, submit, error, stop.")
    unknown = sorted(set(entry) - _KINDS[kind])
    if unknown:
        raise ProviderError(f"Script entry {where} ({kind}) has unknown keys: {', '.join(unknown)}.")
    if kind == "stop" and entry["stop"] != "length":
        raise ProviderError(f'Script entry {where}: "stop" must be "length".')
    if kind == "tool" and not isinstance(entry.get("arguments", {}), dict):
        raise ProviderError(f'Script entry {where}: "arguments" must be an object.')


def _resolve(entry: ScriptEntry, request: ChatRequest, index: int, number: int) -> _ScriptedReply:
    if isinstance(entry, AssistantReply):
        return _ScriptedReply(entry)
    if isinstance(entry, str):
        return _ScriptedReply(AssistantReply(content=[TextBlock(text=entry)]))
    if callable(entry):
        return _ScriptedReply(entry(request, index))
    return _from_json(entry, request, number)


def _from_json(entry: Mapping[str, Any], request: ChatRequest, number: int) -> _ScriptedReply:
    try:
        usage = Usage.model_validate(entry.get("usage") or {"cost": 0.0})
    except ValidationError as exc:
        raise ProviderError(f"Script reply {number}: invalid usage: {exc.errors()[0]['msg']}") from exc
    prose: list[TextBlock | ThinkingBlock | ToolCallBlock] = []
    if entry.get("thinking"):
        prose.append(ThinkingBlock(thinking=str(entry["thinking"])))
    if entry.get("text"):
        prose.append(TextBlock(text=str(entry["text"])))
    if "error" in entry:
        status = int(entry["status"]) if entry.get("status") else None
        message = status_message(status, str(entry["error"])) if status else str(entry["error"])
        retry_after = entry.get("retryAfter", entry.get("retry_after"))
        return _ScriptedReply(
            AssistantReply(stop_reason="error", error_message=message, usage=usage),
            transient=status is not None and is_transient_status(status),
            retry_after_s=None if retry_after is None else float(retry_after),
        )
    call_id = f"call_{number}"
    if "submit" in entry:
        if request.step is None:
            raise ProviderError(f"Script reply {number} submits, but its request carries no step.")
        step = request.step
        arguments = {
            "action": "submit",
            "step": step.node_id,
            "attempt": step.attempt_id,
            "output": entry["submit"],
        }
        prose.append(ToolCallBlock(id=call_id, name="workflow", arguments=arguments))
    elif "tool" in entry:
        call_id = str(entry.get("id") or call_id)
        prose.append(
            ToolCallBlock(id=call_id, name=str(entry["tool"]), arguments=dict(entry.get("arguments") or {}))
        )
    stop = "length" if entry.get("stop") == "length" else "stop"
    return _ScriptedReply(AssistantReply(content=prose, stop_reason=stop, usage=usage))


def _deltas(builder: MessageBuilder, message: AssistantReply) -> Iterator[Callable[[], list[ProviderEvent]]]:
    """The message's blocks as small deltas (a word or so of text, arguments in short pieces).

    Each delta is a thunk, so nothing reaches the builder until the caller has checked for cancellation:
    an aborted message then holds exactly what listeners saw.
    """
    for position, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            yield from (partial(builder.text, piece) for piece in _WORDS.findall(block.text))
        elif isinstance(block, ThinkingBlock):
            yield from (partial(builder.thinking, piece) for piece in _WORDS.findall(block.thinking))
        else:
            text = block.raw_arguments if block.raw_arguments is not None else json.dumps(block.arguments)
            yield partial(builder.tool_call, position, call_id=block.id, name=block.name)
            for start in range(0, len(text), 16):
                yield partial(builder.tool_call, position, text[start : start + 16])
