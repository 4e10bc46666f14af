"""piw: durable LLM-agent workflows and a terminal viewer for their runs.

This module is the public API that workflow files import (pinned by a test). Progress helpers live in
``piw.progress`` and plan parsing in ``piw.plan``.
"""

from piw.context import ActionContext, NodeContext
from piw.definition import (
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
from piw.errors import (
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
from piw.shell_lines import ShellLine
from piw.updates import UpdateInput

__version__ = "0.1.0"

__all__ = [
    "ActionContext",
    "AssistantMessage",
    "AttemptInactive",
    "Cancelled",
    "ClaimLost",
    "DefinitionError",
    "LoadError",
    "NeedsKey",
    "NodeContext",
    "NodeFailure",
    "OutputInvalid",
    "PiwError",
    "ProviderError",
    "ResumeRefused",
    "RunNotFound",
    "ShellCommand",
    "ShellLine",
    "ShellUpdates",
    "SourceChanged",
    "TraceCorrupt",
    "UpdateInput",
    "UpdateRejected",
    "WorkflowDefinition",
    "action",
    "agent",
    "assistant_message",
    "checkpoint",
    "compute",
    "decision",
    "define_workflow",
    "edge",
    "human_decision",
    "include",
    "notify",
    "shell",
    "switch",
]
