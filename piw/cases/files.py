"""The files of a test case folder, their shapes, and reading them with one-line errors naming file and field.

``case.json`` says what runs (the workflow reference, the input, the definition it was recorded against),
``replies.ndjson`` holds one line per agent step visit (its recorded prompt and the model's replies) and
``expected.json`` what the run must do (``docs/testing.md``, "The case folder"). Paths and run-specific ids are
stored as placeholders (``<project>``, ``<home>``, ``<runId>``, ``<attemptId>``), so a case is the same file on
every machine and contains no absolute path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from piw.errors import BrokenCase
from piw.providers.messages import AssistantReply

CASE_FILE = "case.json"
EXPECTED_FILE = "expected.json"
REPLIES_FILE = "replies.ndjson"
CASE_SCHEMA = "piw.test-case.v1"

Mode = Literal["exact", "schema", "ignore", "check"]


class _Shape(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class WorkflowRef(_Shape):
    """A workflow file relative to the project (the folder holding the test directory), or a built-in."""

    path: str | None = None
    builtin: str | None = None
    revision: str | None = None


class DefinitionPin(_Shape):
    """The definition the case was recorded against: its digest and one digest per node (its snapshot and edges)."""

    digest: str
    nodes: dict[str, str] = Field(default_factory=dict)


class CaseFile(_Shape):
    """``case.json``."""

    schema_: Literal["piw.test-case.v1"] = Field("piw.test-case.v1", alias="schema")
    name: str
    workflow: WorkflowRef
    input: Any = None
    definition: DefinitionPin
    recorded_from: dict[str, Any] = Field(default_factory=dict)
    """The run the case came from (its id, provider and model): for people, never read when replaying."""


class NodeExpectation(_Shape):
    """What one node's latest attempt must give: ``exact`` output, valid against its ``schema``, anything
    (``ignore``), or whatever a ``check`` function (``FILE.py:function`` in the workflow's folder) accepts."""

    expect: Mode = "exact"
    outcome: str = "ok"
    output: Any = None
    check: str | None = None
    ignore_keys: list[str] = Field(default_factory=list)
    """Keys left out of an ``exact`` comparison at any depth (a shell node's ``durationMs``)."""


class Expected(_Shape):
    """``expected.json``: the run's status, its route (node ids in attempt order), each node, the final output."""

    status: str = "completed"
    route: list[str] = Field(default_factory=list)
    nodes: dict[str, NodeExpectation] = Field(default_factory=dict)
    final_output: Any = None


class RecordedStep(_Shape):
    """One line of ``replies.ndjson``: an agent step visit, the prompt it was sent and the model's replies."""

    node: str
    prompt: str
    replies: list[AssistantReply]


@dataclass(frozen=True)
class Case:
    """A case folder read and checked: every later failure is about the run, not the files."""

    folder: Path
    case: CaseFile
    expected: Expected
    steps: list[RecordedStep]

    @property
    def name(self) -> str:
        return self.case.name

    @property
    def project(self) -> Path:
        """The folder a case's workflow path is relative to (:func:`project_of` its test directory)."""
        return project_of(self.folder.resolve().parent)


PROJECT_MARKERS = ("pyproject.toml", "setup.py", ".git", ".piw")


def project_of(tests_dir: Path) -> Path:
    """The project a test directory belongs to: the nearest folder at or above the one holding it with a
    ``pyproject.toml``, ``setup.py``, ``.git`` or ``.piw``; else the folder holding it."""
    holder = tests_dir.resolve().parent
    for folder in (holder, *holder.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return holder


def shown(path: Path) -> str:
    """A case file as errors name it: relative to the working folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _field(error: ValidationError) -> tuple[str, str]:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "(top level)"
    return location, str(first["msg"])


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BrokenCase(
            shown(path), "(file)", "missing; record the case again with 'piw test record'"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BrokenCase(shown(path), "(file)", f"cannot be read ({exc})") from None
    except ValueError as exc:
        raise BrokenCase(shown(path), "(file)", f"is not valid JSON ({exc})") from None


def _model(model: type[_Shape], raw: Any, path: Path, prefix: str = "") -> Any:
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        location, message = _field(exc)
        raise BrokenCase(shown(path), prefix + location, message) from None


def read_case(folder: Path) -> Case:
    """Read a case folder; a malformed file raises :class:`BrokenCase` naming the file and the field."""
    case_path, expected_path, replies_path = (
        folder / name for name in (CASE_FILE, EXPECTED_FILE, REPLIES_FILE)
    )
    case: CaseFile = _model(CaseFile, _json(case_path), case_path)
    ref = case.workflow
    if (ref.path is None) == (ref.builtin is None):
        raise BrokenCase(shown(case_path), "workflow", "name exactly one of 'path' and 'builtin'")
    if ref.builtin is not None and ref.revision is None:
        raise BrokenCase(
            shown(case_path), "workflow.revision", "a built-in needs the revision it was recorded at"
        )
    expected: Expected = _model(Expected, _json(expected_path), expected_path)
    for node_id, node in expected.nodes.items():
        if node.expect == "check" and not node.check:
            field = f"nodes.{node_id}.check"
            raise BrokenCase(shown(expected_path), field, "expect 'check' needs 'check': 'FILE.py:function'")
    return Case(folder, case, expected, _steps(replies_path))


def _steps(path: Path) -> list[RecordedStep]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []  # a workflow without agent steps records no replies
    except (OSError, UnicodeDecodeError) as exc:
        raise BrokenCase(shown(path), "(file)", f"cannot be read ({exc})") from None
    steps = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise BrokenCase(shown(path), f"line {number}", f"is not valid JSON ({exc})") from None
        steps.append(_model(RecordedStep, raw, path, prefix=f"line {number}: "))
    return steps


def find_cases(places: Iterable[Path]) -> list[Path]:
    """Every case folder at or under ``places`` (a folder holding ``case.json``), in a stable order."""
    found: dict[Path, None] = {}
    for place in places:
        if (place / CASE_FILE).is_file():
            found[place] = None
            continue
        for case_json in sorted(place.rglob(CASE_FILE)):
            found[case_json.parent] = None
    return list(found)


def dump_json(value: Any) -> str:
    """How case files are written: indented, keys in the order given, one trailing newline (diff-friendly)."""
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def write_case(folder: Path, case: CaseFile, expected: Expected, steps: Iterable[RecordedStep]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CASE_FILE).write_text(dump_json(_dumped(case)), encoding="utf-8")
    write_expected(folder, expected)
    write_steps(folder, steps)


def write_expected(folder: Path, expected: Expected) -> None:
    (folder / EXPECTED_FILE).write_text(dump_json(_dumped(expected)), encoding="utf-8")


def write_steps(folder: Path, steps: Iterable[RecordedStep]) -> None:
    lines = [json.dumps(step_json(step), ensure_ascii=False) for step in steps]
    path = folder / REPLIES_FILE
    if lines:
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    elif path.exists():
        path.unlink()


def step_json(step: RecordedStep) -> dict[str, Any]:
    """A replies line: the reply's content, stop reason and usage (no provider timestamps)."""
    replies = [
        reply.model_dump(
            mode="json",
            by_alias=True,
            exclude={"completed_at", "retried", "provider", "model"},
            exclude_none=True,
        )
        for reply in step.replies
    ]
    return {"node": step.node, "prompt": step.prompt, "replies": replies}


def _dumped(shape: _Shape) -> dict[str, Any]:
    value: dict[str, Any] = shape.model_dump(mode="json", by_alias=True, exclude_none=False)
    if isinstance(shape, CaseFile):
        value["workflow"] = {key: item for key, item in value["workflow"].items() if item is not None}
    if isinstance(shape, Expected):
        value["nodes"] = {node: _node(raw) for node, raw in value["nodes"].items()}
    return value


def _node(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A node expectation without the defaults it does not use (``check`` unset, no ``ignoreKeys``)."""
    return {key: item for key, item in raw.items() if not (key in ("check", "ignoreKeys") and not item)}
