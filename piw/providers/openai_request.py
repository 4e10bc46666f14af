"""Translate a ``ChatRequest`` into an OpenAI chat-completions request body, applying the compat knobs.

Pure functions, no I/O: the body is what the adapter sends and what tests read back from the stub.
"""

from __future__ import annotations

import json
from typing import Any

from piw.config.settings import CompatConfig, ModelConfig
from piw.providers.base import WORKFLOW_TOOL, ChatRequest, ToolChoice
from piw.providers.messages import AssistantReply, CustomMessage, Message, ToolResultMessage, UserMessage


def build_body(
    request: ChatRequest, compat: CompatConfig, model_settings: ModelConfig | None
) -> dict[str, Any]:
    """The JSON body for ``POST /chat/completions`` (always streamed)."""
    body: dict[str, Any] = {
        "model": request.model,
        "messages": to_openai_messages(request, compat),
        "stream": True,
    }
    if compat.supports_usage_in_streaming:
        body["stream_options"] = {"include_usage": True}
    max_tokens = request.max_tokens or (model_settings.max_tokens if model_settings else None)
    if max_tokens is not None:
        body[compat.max_tokens_field] = max_tokens
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
        choice = effective_tool_choice(request, compat)
        if choice is not None:
            body["tool_choice"] = choice
    return body


def effective_tool_choice(request: ChatRequest, compat: CompatConfig) -> ToolChoice | None:
    """What ``tool_choice`` to send, given what the server tolerates (``docs/design/agent-steps.md`` §8.2).

    The ``workflow`` tool is offered only while a submit-mode step is active (§3.2), so its presence is the
    signal for ``structured_tool_choice``. A forced named tool is sent only where forcing is supported; an
    assistant-mode turn never offers ``workflow`` and so never gets ``"required"`` from here.
    """
    wanted = request.tool_choice
    if isinstance(wanted, dict) and not compat.supports_forced_tool_choice:
        wanted = None
    if wanted is not None:
        return wanted
    if WORKFLOW_TOOL in request.tool_names() and compat.structured_tool_choice == "required":
        return "required"
    return None


def to_openai_messages(request: ChatRequest, compat: CompatConfig) -> list[dict[str, Any]]:
    """System prompt first, then the conversation; custom entries become user messages (§4 Context)."""
    out: list[dict[str, Any]] = []
    if request.system_prompt:
        out.append({"role": "system", "content": request.system_prompt})
    for message in request.messages:
        converted = _convert(message, compat)
        if converted is not None:
            out.append(converted)
    return out


def _convert(message: Message, compat: CompatConfig) -> dict[str, Any] | None:
    if isinstance(message, UserMessage | CustomMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, ToolResultMessage):
        result: dict[str, Any] = {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": message.content,
        }
        if compat.requires_tool_result_name:
            result["name"] = message.tool_name
        return result
    return _convert_assistant(message)


def _convert_assistant(message: AssistantReply) -> dict[str, Any] | None:
    # A retried failure is excluded from model context (§4); an empty failed or aborted reply carries
    # nothing a server would accept, so it is left out too. Thinking is never sent back.
    if message.retried:
        return None
    text = message.visible_text()
    # A response cut off at ``length`` holds calls with half-written arguments; sent back, a strict server
    # rejects the whole request (llama.cpp answers HTTP 500), so only its text is replayed (§4 output cap).
    calls = [] if message.stop_reason == "length" else message.tool_calls()
    if not text and not calls:
        return None
    converted: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        converted["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.raw_arguments
                    if call.raw_arguments is not None
                    else json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in calls
        ]
    return converted
