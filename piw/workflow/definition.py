"""The definition DSL: node helpers, edges and ``define_workflow``, with load-time validation.

A workflow file calls these helpers; they return frozen values and check their arguments at once, so a mistake is
reported when the file loads, naming the node and the reason. Graph-level checks (reachability, edge targets,
include cycles) run at run start in ``piw.workflow.graph``.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic import BaseModel, create_model

from piw.errors import DefinitionError
from piw.workflow.budget import Budget
from piw.workflow.effects import EffectClass, check_effect, effect_class
from piw.workflow.gates import (
    AudienceArg,
    Choice,
    GateTimeoutArg,
    HumanDecision,
    RequestArg,
    make_human_decision,
)
from piw.workflow.tool_refs import McpTools

if TYPE_CHECKING:
    from piw.updates.shell_lines import ShellLine
    from piw.workflow.context import ActionContext, NodeContext

NODE_ID_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
BUILTIN_ID = re.compile(r"[a-z][a-z0-9-]{0,63}")

PromptArg = str | Callable[["NodeContext"], str]
Validator = Callable[[Any, "NodeContext"], Any]
TimeoutArg = float | int | None | Callable[["NodeContext"], float | None]


@dataclass(frozen=True)
class AssistantMessage:
    """Selects assistant completion: the step's output is the model's visible reply."""

    max_chars: int | None = None
    kind: Literal["assistant-message"] = "assistant-message"


def assistant_message(max_chars: int | None = None) -> AssistantMessage:
    """Complete an agent step with a normal assistant reply, optionally capped at ``max_chars`` characters."""
    if max_chars is not None and (type(max_chars) is not int or max_chars < 1):
        raise DefinitionError(f"assistant_message(max_chars=...) must be an int >= 1, got {max_chars!r}")
    return AssistantMessage(max_chars=max_chars)


@dataclass(frozen=True)
class AgentNode:
    """Ask a language model for the step's output (submit or assistant completion)."""

    prompt: PromptArg
    expected_output: str | type[BaseModel] | AssistantMessage | None = None
    validate: Validator | None = None
    timeout_s: TimeoutArg = 900.0
    status_detail: str | None = None
    tools: tuple[str, ...] = ()
    mcp: tuple[McpTools, ...] = ()
    """MCP servers whose tools this step offers (``mcp("NAME")`` in ``tools=``; ``docs/tools-mcp.md``)."""
    updates: bool = False
    """Offer the ``update``/``status`` actions of the ``workflow`` tool (and their lines in the contract)."""
    context: Literal["run", "step"] = "run"
    """``"step"``: requests carry only this attempt's entries, not the run's whole conversation."""
    max_output_tokens: int | None = None
    """``max_tokens`` of this step's requests; ``None``: the model's configured cap, else the default."""
    node_type: Literal["agent"] = "agent"

    @property
    def completion(self) -> Literal["submit", "assistant"]:
        return "assistant" if isinstance(self.expected_output, AssistantMessage) else "submit"


@dataclass(frozen=True)
class ComputeNode:
    """A pure function of the context: no side effects, no updates."""

    run: Callable[[NodeContext], Any] | Any
    status_detail: str | None = None
    node_type: Literal["compute"] = "compute"


@dataclass(frozen=True)
class ShellCommand:
    """What a shell node runs: an argument list, never a shell string unless ``shell=True`` is explicit."""

    command: str
    args: Sequence[str] = ()
    cwd: str | None = None
    env: Mapping[str, str] | None = None
    stdin: str | None = None
    shell: bool = False
    allow_nonzero_exit: bool = False
    timeout_s: float | None = None
    max_output_chars: int = 1_000_000


@dataclass(frozen=True)
class ShellUpdates:
    """Turn a running command's output lines into durable updates (``docs/design/updates-progress.md`` §3.3)."""

    parse_line: Callable[[ShellLine, NodeContext], Any]
    streams: tuple[Literal["stdout", "stderr"], ...] = ("stdout",)

    def __post_init__(self) -> None:
        if not self.streams or any(stream not in ("stdout", "stderr") for stream in self.streams):
            raise DefinitionError("ShellUpdates.streams must be a non-empty subset of ('stdout', 'stderr')")
        if len(set(self.streams)) != len(self.streams):
            raise DefinitionError("ShellUpdates.streams must not repeat a stream")
        if not callable(self.parse_line):
            raise DefinitionError("ShellUpdates.parse_line must be a function")


@dataclass(frozen=True)
class ShellSpec:
    """The command form of an action node."""

    exec: Callable[[NodeContext], Any] | Any
    parse: Callable[[dict[str, Any], NodeContext], Any] | None = None
    updates: ShellUpdates | None = None


@dataclass(frozen=True)
class ActionNode:
    """A function (or command) with side effects; its context can publish updates."""

    run: Callable[[ActionContext], Any] | None
    effect: str | None = None
    timeout_s: TimeoutArg = None
    shell: ShellSpec | None = None
    status_detail: str | None = None
    node_type: Literal["action"] = "action"
    fan_out: int | Callable[[NodeContext], int] | None = None
    """The most ``ctx.run_agent`` children one visit starts (a bound ``piw run --plan`` uses: docs/planning.md)."""
    check: Callable[[ActionContext], Any] | None = None
    """``effect="reconcile"``: asked once on resume whether the interrupted effect happened (``docs/effects.md``)."""

    @property
    def effect_class(self) -> EffectClass:
        """``retry``, ``once`` or ``reconcile``: what a resume does with an interrupted attempt."""
        return effect_class(self.effect)


@dataclass(frozen=True)
class NotifyNode:
    """A durable message to the origin session; never starts a model turn."""

    message: Callable[[NodeContext], str] | str
    kind: Literal["progress", "final"] = "progress"
    node_type: Literal["notify"] = "notify"


@dataclass(frozen=True)
class CheckpointNode:
    """The run ends ``waiting`` for an answer; the answer starts a continuation run."""

    summary: Callable[[NodeContext], Any] | Any = None
    human_decision: HumanDecision | None = None
    answer: type[BaseModel] | None = None
    """The model an answer (``piw answer RUN JSON``) must fit; the edges after the gate see its JSON dump."""
    node_type: Literal["checkpoint"] = "checkpoint"


Node = AgentNode | ComputeNode | ActionNode | NotifyNode | CheckpointNode


@dataclass(frozen=True)
class Edge:
    """Unconditional transition ``source → target``."""

    source: str
    target: str


@dataclass(frozen=True)
class Switch:
    """Route on a path of the finished node: ``$.x``/``$output.x`` (output), ``$result.outcome``, ``$exit``."""

    source: str
    on: str
    cases: Mapping[str, str]


@dataclass(frozen=True)
class Include:
    """Mount a child workflow; its nodes join the parent graph under the mount path."""

    child: WorkflowDefinition | str
    """The child definition, or the id of a built-in: the loader mounts the catalog's definition in its place
    when it loads the file (``docs/design/builtins.md`` B14), so a loaded workflow only ever holds definitions here."""
    input: Callable[[NodeContext], Any] | Any = None
    line: int | None = field(default=None, compare=False, repr=False)
    """The line of the workflow file that called ``include``, for the loader's errors about a built-in id."""


@dataclass(frozen=True)
class WorkflowDefinition:
    """A validated workflow definition as written by its author (before includes are flattened)."""

    name: str
    start_at: str
    nodes: Mapping[str, Node]
    edges: tuple[Edge | Switch, ...] = ()
    includes: Mapping[str, Include] = field(default_factory=dict)
    exits: Mapping[str, str] = field(default_factory=dict)
    input: type[BaseModel] | Callable[[Any], Any] | None = None
    title: str | Callable[[Any, str], str] | None = None
    description: str | None = None
    contract_id: str | None = None
    revision: int | str | None = None
    max_steps: int = 100
    budget: Budget | None = None
    source_file: str | None = None


# ---- helpers ---------------------------------------------------------------------------------------------


def _check_callable_or(value: Any, kinds: tuple[type, ...], what: str) -> None:
    if not (callable(value) or isinstance(value, kinds)):
        names = " or ".join(kind.__name__ for kind in kinds)
        raise DefinitionError(f"{what} must be a {names} or a function of the node context")


def _check_timeout(timeout_s: Any) -> None:
    if timeout_s is None or callable(timeout_s):
        return
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float):
        raise DefinitionError(f"timeout_s must be a number of seconds, None or a function, got {timeout_s!r}")
    if not math.isfinite(timeout_s) or timeout_s <= 0:
        raise DefinitionError(f"timeout_s must be finite and > 0, got {timeout_s!r}")


def _check_status_detail(status_detail: Any) -> None:
    if status_detail is not None and not isinstance(status_detail, str):
        raise DefinitionError("status_detail must be a string")


# The overloads give the types only; the defaults are the implementation's (spelled once, below).
@overload
def agent(
    *,
    prompt: PromptArg,
    expected_output: AssistantMessage,
    timeout_s: TimeoutArg = ...,
    status_detail: str | None = ...,
    tools: Sequence[str | McpTools] = ...,
    context: Literal["run", "step"] = ...,
    max_output_tokens: int | None = ...,
) -> AgentNode: ...
@overload
def agent(
    *,
    prompt: PromptArg,
    expected_output: str | type[BaseModel] | None = ...,
    validate: Validator | None = ...,
    timeout_s: TimeoutArg = ...,
    status_detail: str | None = ...,
    tools: Sequence[str | McpTools] = ...,
    updates: bool = ...,
    context: Literal["run", "step"] = ...,
    max_output_tokens: int | None = ...,
) -> AgentNode: ...
def agent(
    *,
    prompt: PromptArg,
    expected_output: str | type[BaseModel] | AssistantMessage | None = None,
    validate: Validator | None = None,
    timeout_s: TimeoutArg = 900.0,
    status_detail: str | None = None,
    tools: Sequence[str | McpTools] = (),
    updates: bool = False,
    context: Literal["run", "step"] = "run",
    max_output_tokens: int | None = None,
) -> AgentNode:
    """An agent step: the model submits JSON through the ``workflow`` tool, or replies (``assistant_message``)."""
    _check_callable_or(prompt, (str,), "prompt")
    is_model = isinstance(expected_output, type) and issubclass(expected_output, BaseModel)
    if not (expected_output is None or isinstance(expected_output, str | AssistantMessage) or is_model):
        raise DefinitionError(
            "expected_output must be None, a description string, a pydantic model class or assistant_message()"
        )
    if isinstance(expected_output, AssistantMessage) and validate is not None:
        raise DefinitionError("validate cannot be combined with assistant_message(): the reply is the output")
    if validate is not None and not callable(validate):
        raise DefinitionError("validate must be a function (value, ctx) -> value")
    _check_timeout(timeout_s)
    _check_status_detail(status_detail)
    if isinstance(tools, str) or not all(isinstance(name, str | McpTools) for name in tools):
        raise DefinitionError("tools must be a sequence of tool names and mcp(...) servers")
    servers = tuple(item for item in tools if isinstance(item, McpTools))
    names = tuple(item for item in tools if isinstance(item, str))
    if len({ref.server for ref in servers}) != len(servers):
        raise DefinitionError("tools names the same mcp server twice; use one mcp(NAME, only=[...])")
    if "workflow" in names:
        raise DefinitionError("tools must not list 'workflow': it is reserved and offered by piw itself")
    if not isinstance(updates, bool):
        raise DefinitionError(f"updates must be True or False, got {updates!r}")
    if updates and isinstance(expected_output, AssistantMessage):
        raise DefinitionError(
            "updates=True needs the workflow tool, which assistant_message() steps are never offered"
        )
    if context not in ("run", "step"):
        raise DefinitionError(f'context must be "run" or "step", got {context!r}')
    if max_output_tokens is not None and (type(max_output_tokens) is not int or max_output_tokens < 1):
        raise DefinitionError(f"max_output_tokens must be an int >= 1 or None, got {max_output_tokens!r}")
    return AgentNode(
        prompt,
        expected_output,
        validate,
        timeout_s,
        status_detail,
        names,
        servers,
        updates=updates,
        context=context,
        max_output_tokens=max_output_tokens,
    )


def decision(question: PromptArg, choices: Sequence[str], field: str = "route") -> AgentNode:
    """Sugar for an agent that picks one of ``choices`` into ``output[field]`` (route on ``$.<field>``)."""
    options = tuple(choices)
    if not options or not all(isinstance(choice, str) and choice for choice in options):
        raise DefinitionError("decision choices must be a non-empty list of strings")

    if not field.isidentifier() or field == "reason":
        raise DefinitionError(f"decision field {field!r} must be a Python identifier other than 'reason'")

    def check(value: Any, ctx: NodeContext) -> Any:
        data = value.model_dump() if isinstance(value, BaseModel) else value
        if not isinstance(data, dict) or data.get(field) not in options:
            raise ValueError(f"output.{field} must be one of: {', '.join(options)}")
        return value

    # A model rather than a description, so the step's workflow tool carries the choices as an enum that a
    # grammar-constrained server can enforce (docs/design/agent-steps.md §3.1); the old hint also held a "<why>" a small
    # model would copy.
    fields: dict[str, Any] = {field: (Literal[options], ...), "reason": (str, "")}
    shape = create_model("Decision", **fields)
    return agent(prompt=question, expected_output=shape, validate=check)


def compute(run: Callable[[NodeContext], Any] | Any, *, status_detail: str | None = None) -> ComputeNode:
    """A pure step computed from the context (its return value is the output)."""
    _check_status_detail(status_detail)
    return ComputeNode(run, status_detail)


def action(
    run: Callable[[ActionContext], Any],
    effect: str | None = None,
    timeout_s: TimeoutArg = None,
    *,
    status_detail: str | None = None,
    fan_out: int | Callable[[NodeContext], int] | None = None,
    check: Callable[[ActionContext], Any] | None = None,
) -> ActionNode:
    """A side-effecting function; ``effect`` is its class: ``"retry"`` (default; ``"idempotent"`` means the same),
    ``"once"`` or ``"reconcile"`` with ``check=fn`` (``docs/effects.md``); ``fan_out`` bounds the ``ctx.run_agent``
    children of one visit (a number, or a function of the context, docs/planning.md)."""
    if not callable(run):
        raise DefinitionError("action run must be a function of the action context")
    check_effect(effect, check)
    _check_timeout(timeout_s)
    _check_status_detail(status_detail)
    if (
        fan_out is not None
        and not callable(fan_out)
        and (isinstance(fan_out, bool) or not isinstance(fan_out, int) or fan_out < 0)
    ):
        raise DefinitionError(
            "action fan_out must be a whole number of 0 or more, or a function of the context"
        )
    return ActionNode(run, effect, timeout_s, None, status_detail, fan_out=fan_out, check=check)


def shell(
    exec: Callable[[NodeContext], Any] | ShellCommand | Mapping[str, Any],
    parse: Callable[[dict[str, Any], NodeContext], Any] | None = None,
    updates: ShellUpdates | None = None,
    timeout_s: TimeoutArg = 600.0,
    *,
    status_detail: str | None = None,
    effect: str | None = None,
    check: Callable[[ActionContext], Any] | None = None,
) -> ActionNode:
    """Run a command (argument list) as an action; output is the command result unless ``parse`` maps it.

    ``effect`` and ``check`` as for :func:`action` (``docs/effects.md``)."""
    if not (callable(exec) or isinstance(exec, ShellCommand | Mapping)):
        raise DefinitionError("shell exec must be a ShellCommand, a mapping or a function returning one")
    if parse is not None and not callable(parse):
        raise DefinitionError("shell parse must be a function (result, ctx) -> output")
    if updates is not None and not isinstance(updates, ShellUpdates):
        raise DefinitionError("shell updates must be a ShellUpdates(...)")
    _check_timeout(timeout_s)
    _check_status_detail(status_detail)
    check_effect(effect, check)
    return ActionNode(None, effect, timeout_s, ShellSpec(exec, parse, updates), status_detail, check=check)


def notify(
    message: Callable[[NodeContext], str] | str, kind: Literal["progress", "final"] = "progress"
) -> NotifyNode:
    """Send a durable message to the origin session, exactly once per node execution."""
    _check_callable_or(message, (str,), "notify message")
    if kind not in ("progress", "final"):
        raise DefinitionError("notify kind must be 'progress' or 'final'")
    return NotifyNode(message, kind)


def checkpoint(
    summary: Callable[[NodeContext], Any] | Any = None, *, answer: type[BaseModel] | None = None
) -> CheckpointNode:
    """Stop the run in ``waiting`` until someone answers (``piw answer``); ``answer`` is the model it must fit."""
    if answer is not None and not (isinstance(answer, type) and issubclass(answer, BaseModel)):
        raise DefinitionError("checkpoint answer must be a pydantic model class (or None for any JSON value)")
    return CheckpointNode(summary, None, answer)


def human_decision(
    audience: AudienceArg,
    choices: Sequence[str | Choice],
    request: RequestArg,
    on_timeout: GateTimeoutArg = None,
) -> CheckpointNode:
    """A protected gate that only a person (or the declared timeout policy) can answer, never a model.

    ``choices`` are strings or ``choice(id, label, inputs=[text_input(...)])``; ``request`` is a string (its
    title), a ``DecisionRequest``/mapping (title, subject, summary, blocks) or a function of the context returning
    one; ``on_timeout`` is ``timeout_after(minutes, choice)``, ``{"after_minutes": N, "choice": C}`` or a
    function of the context returning one or ``None``. ``audience`` may be a function of the context too.
    """
    return CheckpointNode(None, make_human_decision(audience, choices, request, on_timeout))


def include(child: WorkflowDefinition | str, input: Callable[[NodeContext], Any] | Any = None) -> Include:
    """Mount ``child`` into the parent graph; ``input`` (value or function) becomes the child's ``ctx.input``.

    ``child`` is a definition, or the id of a built-in (``include("plain-summary", ...)``), which the loader
    resolves only within the built-in catalog, never to a same-named workflow file (``docs/design/builtins.md`` B14).
    """
    if isinstance(child, str):
        if not BUILTIN_ID.fullmatch(child):
            raise DefinitionError(f"include({child!r}): a built-in id is lower-case letters, digits and '-'")
        author = _author_frame()
        return Include(child, input, line=author.f_lineno if author else None)
    if not isinstance(child, WorkflowDefinition):
        raise DefinitionError(
            "include child must be a workflow created by define_workflow(...) or a built-in id"
        )
    return Include(child, input)


def edge(source: str, target: str) -> Edge:
    """An unconditional edge."""
    if not isinstance(source, str) or not isinstance(target, str):
        raise DefinitionError("edge(source, target) takes two node ids")
    return Edge(source, target)


_PATH_PATTERN = re.compile(r"\$(?:output)?\.[A-Za-z0-9_\-.]+|\$result\.outcome|\$exit")


def switch(source: str, *, on: str, cases: Mapping[str, str]) -> Switch:
    """Route on a value of the finished node: ``$.field``, ``$output.field``, ``$result.outcome`` or ``$exit``."""
    if not isinstance(source, str):
        raise DefinitionError("switch source must be a node id")
    if not isinstance(on, str) or not _PATH_PATTERN.fullmatch(on):
        raise DefinitionError(
            f"switch on={on!r} must be '$.field', '$output.field', '$result.outcome' or '$exit'"
        )
    if not isinstance(cases, Mapping) or not cases:
        raise DefinitionError("switch cases must be a non-empty mapping value -> node id")
    if not all(isinstance(key, str) and isinstance(target, str) for key, target in cases.items()):
        raise DefinitionError("switch cases map string values to node ids")
    return Switch(source, on, dict(cases))


def _author_frame() -> FrameType | None:
    """The frame that called the DSL helper calling this function: the workflow file's code, when it loads."""
    frame = inspect.currentframe()
    helper = frame.f_back if frame else None
    return helper.f_back if helper else None


def define_workflow(
    *,
    name: str,
    start_at: str,
    nodes: Mapping[str, Node],
    edges: Sequence[Edge | Switch] = (),
    includes: Mapping[str, Include] | None = None,
    exits: Mapping[str, Mapping[str, str]] | None = None,
    input: type[BaseModel] | Callable[[Any], Any] | None = None,
    title: str | Callable[[Any, str], str] | None = None,
    description: str | None = None,
    contract_id: str | None = None,
    revision: int | str | None = None,
    max_steps: int = 100,
    budget: Budget | None = None,
) -> WorkflowDefinition:
    """Declare a workflow: nodes, edges, includes and limits. Shape errors are raised here, at load time."""
    author = _author_frame()
    if not isinstance(name, str) or not name.strip():
        raise DefinitionError("define_workflow name must be a non-empty string")
    if not isinstance(nodes, Mapping) or not nodes:
        raise DefinitionError(f"workflow {name!r}: nodes must be a non-empty mapping of node id -> node")
    mounts = dict(includes or {})
    _check_nodes(name, nodes, mounts)
    if not isinstance(start_at, str) or not start_at:
        raise DefinitionError(f"workflow {name!r}: start_at must name a node")
    edge_list = tuple(edges)
    for item in edge_list:
        if not isinstance(item, Edge | Switch):
            raise DefinitionError(f"workflow {name!r}: edges must be edge(...) or switch(...) values")
    exit_map: dict[str, str] = {}
    for exit_name, spec in (exits or {}).items():
        target = spec.get("from_") if isinstance(spec, Mapping) else None
        if not isinstance(target, str):
            raise DefinitionError(f"workflow {name!r}: exit {exit_name!r} must be {{'from_': '<node id>'}}")
        exit_map[exit_name] = target
    _check_limits(name, max_steps, budget, title, input)
    return WorkflowDefinition(
        name=name,
        start_at=start_at,
        nodes=dict(nodes),
        edges=edge_list,
        includes=mounts,
        exits=exit_map,
        input=input,
        title=title,
        description=description,
        contract_id=contract_id,
        revision=revision,
        max_steps=max_steps,
        budget=budget if budget is not None and not budget.empty else None,
        source_file=author.f_globals.get("__file__") if author else None,
    )


def _check_nodes(name: str, nodes: Mapping[str, Node], mounts: Mapping[str, Include]) -> None:
    """Every node and include id is a valid id, every node a node, every include an ``include(...)``."""
    for node_id in [*nodes, *mounts]:
        if not isinstance(node_id, str) or not NODE_ID_PATTERN.fullmatch(node_id):
            raise DefinitionError(
                f"workflow {name!r}: node id {node_id!r} must match [A-Za-z_][A-Za-z0-9_-]*"
            )
    for node_id, node in nodes.items():
        if not isinstance(node, AgentNode | ComputeNode | ActionNode | NotifyNode | CheckpointNode):
            raise DefinitionError(
                f"workflow {name!r}: node {node_id!r} is not a node; use agent(), compute(), action(), "
                "shell(), notify(), checkpoint() or human_decision()"
            )
    for mount_id, mounted in mounts.items():
        if mount_id in nodes:
            raise DefinitionError(f"workflow {name!r}: include {mount_id!r} has the same id as a node")
        if not isinstance(mounted, Include):
            raise DefinitionError(
                f"workflow {name!r}: includes[{mount_id!r}] must be include(child, input=...)"
            )


def _check_limits(
    name: str,
    max_steps: int,
    budget: Budget | None,
    title: str | Callable[[Any, str], str] | None,
    input: type[BaseModel] | Callable[[Any], Any] | None,
) -> None:
    """The run-wide settings have the types ``define_workflow`` documents."""
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise DefinitionError(f"workflow {name!r}: max_steps must be an int >= 1")
    if budget is not None and not isinstance(budget, Budget):
        raise DefinitionError(
            f"workflow {name!r}: budget must be Budget(max_cost_usd=..., max_tokens=..., ...)"
        )
    if title is not None and not (isinstance(title, str) or callable(title)):
        raise DefinitionError(f"workflow {name!r}: title must be a string or a function (input, name) -> str")
    if input is not None and not callable(input):
        raise DefinitionError(f"workflow {name!r}: input must be a pydantic model or a normalising function")
