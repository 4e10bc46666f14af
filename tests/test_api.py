"""The public API that workflow files import is pinned: adding or removing a name is a deliberate change."""

from __future__ import annotations

import ast
import subprocess
import sys

import piw

PUBLIC = [
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

# What the spec (README §3) requires the public API to offer at least.
REQUIRED = {
    "define_workflow",
    "agent",
    "decision",
    "compute",
    "action",
    "shell",
    "notify",
    "checkpoint",
    "human_decision",
    "include",
    "edge",
    "switch",
    "assistant_message",
    "ShellUpdates",
    "ShellCommand",
    "ShellLine",
    "UpdateInput",
    "NodeContext",
    "ActionContext",
    "PiwError",
    "DefinitionError",
    "LoadError",
    "NodeFailure",
    "Cancelled",
}


def test_all_is_pinned() -> None:
    assert sorted(piw.__all__) == piw.__all__ == PUBLIC
    assert set(PUBLIC) >= REQUIRED


def test_every_public_name_exists_and_errors_share_one_base() -> None:
    for name in PUBLIC:
        assert hasattr(piw, name), name
    for name in PUBLIC:
        value = getattr(piw, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, piw.PiwError), name
    assert (
        callable(piw.agent) and piw.agent.__module__ == "piw.workflow.definition"
    )  # the helper, not the sub-package


def test_star_import_gives_exactly_the_public_names() -> None:
    code = "from piw import *; print(sorted(k for k in dir() if not k.startswith('_')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert ast.literal_eval(done.stdout) == PUBLIC
