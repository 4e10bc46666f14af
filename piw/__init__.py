"""piw: durable LLM-agent workflows and a terminal viewer for their runs.

This module is the public API that workflow files import (pinned by a test). Progress helpers live in
``piw.progress`` and plan parsing in ``piw.plan``.

Importing ``piw`` is cheap: the names below are loaded on first use (``from piw import compute`` works as
before), so ``piw --help`` and the read-only commands never load pydantic models they do not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from piw import dataclass_code, pydantic_plugins

dataclass_code.install()  # before any dataclass is defined: see piw/dataclass_code.py
pydantic_plugins.install()  # before pydantic builds a model: see piw/pydantic_plugins.py

from piw.errors import (  # noqa: E402
    AttemptInactive,
    Cancelled,
    ClaimLost,
    DefinitionError,
    LoadError,
    NeedsKey,
    NodeFailure,
    OutputInvalid,
    PiwError,
    ProviderError,
    ResumeRefused,
    RunNotFound,
    SourceChanged,
    TraceCorrupt,
    UpdateRejected,
)

if TYPE_CHECKING:
    from piw.updates.envelope import (
        UpdateInput,
    )
    from piw.updates.shell_lines import (
        ShellLine,
    )
    from piw.workflow.budget import (
        Budget,
    )
    from piw.workflow.context import (
        ActionContext,
        NodeContext,
    )
    from piw.workflow.decision_request import DecisionRequest, FieldsBlock, PreformattedBlock, SectionBlock
    from piw.workflow.definition import (
        AssistantMessage,
        ShellCommand,
        ShellUpdates,
        WorkflowDefinition,
        action,
        agent,
        assistant_message,
        checkpoint,
        compute,
        decision,
        define_workflow,
        edge,
        human_decision,
        include,
        notify,
        shell,
        switch,
    )
    from piw.workflow.gates import (
        Choice,
        TextInput,
        TimeoutPolicy,
        choice,
        text_input,
        timeout_after,
    )
    from piw.workflow.script import Flow, script
    from piw.workflow.tool_refs import McpTools, mcp

_LAZY = {
    "UpdateInput": "piw.updates.envelope",
    "ShellLine": "piw.updates.shell_lines",
    "Budget": "piw.workflow.budget",
    "ActionContext": "piw.workflow.context",
    "NodeContext": "piw.workflow.context",
    "AssistantMessage": "piw.workflow.definition",
    "ShellCommand": "piw.workflow.definition",
    "ShellUpdates": "piw.workflow.definition",
    "WorkflowDefinition": "piw.workflow.definition",
    "action": "piw.workflow.definition",
    "agent": "piw.workflow.definition",
    "assistant_message": "piw.workflow.definition",
    "checkpoint": "piw.workflow.definition",
    "compute": "piw.workflow.definition",
    "decision": "piw.workflow.definition",
    "define_workflow": "piw.workflow.definition",
    "edge": "piw.workflow.definition",
    "human_decision": "piw.workflow.definition",
    "include": "piw.workflow.definition",
    "notify": "piw.workflow.definition",
    "shell": "piw.workflow.definition",
    "switch": "piw.workflow.definition",
    "Choice": "piw.workflow.gates",
    "DecisionRequest": "piw.workflow.decision_request",
    "FieldsBlock": "piw.workflow.decision_request",
    "PreformattedBlock": "piw.workflow.decision_request",
    "SectionBlock": "piw.workflow.decision_request",
    "TextInput": "piw.workflow.gates",
    "TimeoutPolicy": "piw.workflow.gates",
    "choice": "piw.workflow.gates",
    "text_input": "piw.workflow.gates",
    "timeout_after": "piw.workflow.gates",
    "McpTools": "piw.workflow.tool_refs",
    "mcp": "piw.workflow.tool_refs",
    "script": "piw.workflow.script",
    "Flow": "piw.workflow.script",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'piw' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "ActionContext",
    "AssistantMessage",
    "AttemptInactive",
    "Budget",
    "Cancelled",
    "Choice",
    "ClaimLost",
    "DecisionRequest",
    "DefinitionError",
    "FieldsBlock",
    "Flow",
    "LoadError",
    "McpTools",
    "NeedsKey",
    "NodeContext",
    "NodeFailure",
    "OutputInvalid",
    "PiwError",
    "PreformattedBlock",
    "ProviderError",
    "ResumeRefused",
    "RunNotFound",
    "SectionBlock",
    "ShellCommand",
    "ShellLine",
    "ShellUpdates",
    "SourceChanged",
    "TextInput",
    "TimeoutPolicy",
    "TraceCorrupt",
    "UpdateInput",
    "UpdateRejected",
    "WorkflowDefinition",
    "action",
    "agent",
    "assistant_message",
    "checkpoint",
    "choice",
    "compute",
    "decision",
    "define_workflow",
    "edge",
    "human_decision",
    "include",
    "mcp",
    "notify",
    "script",
    "shell",
    "switch",
    "text_input",
    "timeout_after",
]
