"""``piw test record RUN``: turn a finished run into a test case folder.

Everything comes from the run bundle through its readers: the state from the fold (route, outputs, final output),
the definition snapshot, and each agent step's prompt and replies from the recorded conversation
(:func:`piw.providers.recorded.recordings`, the reader ``piw fork --provider replay`` uses). Nothing of the
trace is parsed a second way. Secrets and absolute paths never enter the case (``docs/testing.md``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from piw.cases.files import (
    CaseFile,
    DefinitionPin,
    Expected,
    NodeExpectation,
    RecordedStep,
    WorkflowRef,
    project_of,
    step_json,
    write_case,
)
from piw.cases.places import Places
from piw.errors import CaseError
from piw.providers.base import WORKFLOW_TOOL
from piw.providers.messages import AssistantReply, ToolCallBlock
from piw.providers.recorded import recordings
from piw.store.bundle import Bundle, load_state, open_bundle, slugify
from piw.store.fold import RunState

FINISHED = ("completed", "failed", "timed_out", "cancelled")
ATTEMPT = "<attemptId>"


def node_digests(snapshot: dict[str, Any]) -> dict[str, str]:
    """One digest per node: its snapshot entry and its outgoing edges (what ``piw test`` reports as changed)."""
    edges = snapshot.get("edges") or []
    digests = {}
    for node_id, node in (snapshot.get("nodes") or {}).items():
        own = [edge for edge in edges if isinstance(edge, dict) and edge.get("from") == node_id]
        canonical = json.dumps({"node": node, "edges": own}, sort_keys=True, separators=(",", ":"))
        digests[node_id] = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    return digests


def record_case(home: Path, run_id: str, tests_dir: Path, name: str | None = None) -> Path:
    """Write the case folder for run ``run_id`` under ``tests_dir``; its path. The run must have finished."""
    bundle = open_bundle(home, run_id)
    state = load_state(bundle)
    if state.status not in FINISHED:
        raise CaseError(
            f"Run {run_id} is {state.status}; record a run that has finished (wait for it, or 'piw resume' it)."
        )
    project = project_of(tests_dir)
    places = Places(project, home, run_id)
    case_name = slugify(name or f"{state.workflow_name}-{run_id.rsplit('-', 1)[-1]}")
    folder = tests_dir / case_name
    if folder.exists():
        raise CaseError(f"Test case {folder} already exists; pass --name NAME or remove it.")
    snapshot = bundle.read_snapshot()
    case = CaseFile(
        name=case_name,
        workflow=_workflow_ref(state, project),
        input=places.generalize_value(bundle.resolve(state.input)),
        definition=DefinitionPin(digest=state.definition_digest, nodes=node_digests(snapshot)),
        recorded_from=_recorded_from(state, bundle),
    )
    expected = expected_of(state, bundle, places)
    steps = recorded_steps(bundle, places)
    _refuse_secrets(home, case, expected, steps)
    write_case(folder, case, expected, steps)
    return folder


def _workflow_ref(state: RunState, project: Path) -> WorkflowRef:
    source = state.workflow_source
    if source.get("kind") == "builtin":
        return WorkflowRef(builtin=str(source.get("id")), revision=str(source.get("revision")))
    path = Path(str(source.get("path", "")))
    try:
        relative = path.resolve().relative_to(project)
    except ValueError:
        raise CaseError(
            f"The run's workflow file {path} is outside the project {project} (the nearest folder above the test "
            "directory with a pyproject.toml, setup.py, .git or .piw); keep the workflow in the project, or pass "
            "--dir inside the project that holds it."
        ) from None
    return WorkflowRef(path=relative.as_posix())


def _recorded_from(state: RunState, bundle: Bundle) -> dict[str, Any]:
    models = sorted(
        {
            f"{reply.provider}/{reply.model}"
            for rec in recordings(bundle)
            for reply in rec.replies
            if reply.provider
        }
    )
    return {"runId": state.run_id, "status": state.status, "models": models}


def expected_of(state: RunState, bundle: Bundle, places: Places) -> Expected:
    """What the run did, as expectations: every node ``exact`` (a shell output's ``durationMs`` left out)."""
    nodes = {}
    for node_id, record in state.results.items():
        output = places.generalize_value(bundle.resolve(record.output))
        ignore = ["durationMs"] if isinstance(output, dict) and "durationMs" in output else []
        nodes[node_id] = NodeExpectation(outcome=record.outcome, output=output, ignore_keys=ignore)
    return Expected(
        status=state.status,
        route=[step.node_id for step in state.steps],
        nodes=nodes,
        final_output=places.generalize_value(bundle.resolve(state.final_output)),
    )


def recorded_steps(bundle: Bundle, places: Places) -> list[RecordedStep]:
    """Each agent step visit in run order: its prompt and replies, with ids and paths as placeholders."""
    steps = []
    for rec in recordings(bundle):
        prompt = places.generalize(rec.prompt.replace(rec.attempt_id, ATTEMPT))
        replies = [_placeheld(reply, rec.attempt_id, places) for reply in rec.replies]
        steps.append(RecordedStep(node=rec.node_id, prompt=prompt, replies=replies))
    return steps


def _placeheld(reply: AssistantReply, attempt_id: str, places: Places) -> AssistantReply:
    blocks: list[Any] = []
    for block in reply.content:
        if isinstance(block, ToolCallBlock) and block.name == WORKFLOW_TOOL and "attempt" in block.arguments:
            block = block.model_copy(update={"arguments": {**block.arguments, "attempt": ATTEMPT}})
        blocks.append(block)
    raw = reply.model_copy(update={"content": blocks}).model_dump(mode="json", by_alias=True)
    text = places.generalize(json.dumps(raw, ensure_ascii=False).replace(attempt_id, ATTEMPT))
    return AssistantReply.model_validate(json.loads(text))


def _refuse_secrets(home: Path, case: CaseFile, expected: Expected, steps: list[RecordedStep]) -> None:
    """A configured key or secret header value anywhere in the case refuses the recording (nothing is written)."""
    from piw.config.settings import configured_secrets, load_config
    from piw.providers.redaction import contains_secret

    try:
        secrets = configured_secrets(load_config(home))
    except Exception:  # a broken config.toml has no secrets to compare against; the run's bundle was redacted
        secrets = []
    if not secrets:
        return
    texts = [case.model_dump_json(), expected.model_dump_json(), *(json.dumps(step_json(s)) for s in steps)]
    if any(contains_secret(text, secrets) for text in texts):
        raise CaseError(
            "Refusing to record: the run holds a configured secret (an API key or $NAME header value) in a "
            "prompt, reply or output. Remove it from the workflow's inputs and prompts, then run it again."
        )
