"""piw: durable LLM-agent workflows and a terminal viewer for their runs.

This module is the public API that workflow files import (pinned by a test). Progress helpers live in
``piw.progress`` and plan parsing in ``piw.plan``.
"""

# ``piw.agent`` is both the sub-package of agent steps (``piw.agent.contract``, ``piw.agent.loop``, as the spec
# names them) and the public ``agent()`` helper. Loading the package first lets the helper bind the attribute
# below; later ``import piw.agent.x`` statements find the package in ``sys.modules`` and leave it alone.
import piw.agent as _agent_package  # noqa: F401  (must precede the helper import)
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
from piw.updates.envelope import UpdateInput
from piw.updates.shell_lines import ShellLine
from piw.workflow.budget import Budget
from piw.workflow.context import ActionContext, NodeContext
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
    DecisionRequest,
    FieldsBlock,
    PreformattedBlock,
    SectionBlock,
    TextInput,
    TimeoutPolicy,
    choice,
    text_input,
    timeout_after,
)

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
    "LoadError",
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
    "notify",
    "shell",
    "switch",
    "text_input",
    "timeout_after",
]
