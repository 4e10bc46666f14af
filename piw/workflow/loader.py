"""Loading and discovery: resolve a workflow reference, import its file, validate it and fix its identity.

Order (docs/design/README.md §3): an explicit path; ``./.piw/workflows/NAME.workflow.py``; ``$PIW_HOME/workflows/``; the
built-in ``NAME``; then the shipped examples. The current folder itself is not searched; a name found only there
is answered with the path to type (docs/authoring.md, "Discovery order"). A file's SHA-256 is its source
identity; a built-in's is ``{id, revision}``.

``include("plain-summary", ...)`` in a workflow file names a built-in by id; the loader mounts it when it loads
the file, only from ``workflows/builtins/``, never from a same-named file in the project or user folders, so a
built-in always mounts the catalog's own child whatever the current directory holds (``docs/design/builtins.md`` B14).
Built-ins are cached by file content: every include of one id in a process is the same object, which keeps
include-cycle detection (by identity) meaningful and avoids importing a file once per mount.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import math
import os
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO, cast

from pydantic import BaseModel, ValidationError

from piw.errors import DefinitionError, ImportTimeout, InputInvalid, LoadError
from piw.wire import sha256_hex
from piw.workflow.definition import Include, WorkflowDefinition
from piw.workflow.graph import FlatGraph, Mount, definition_digest, flatten, snapshot
from piw.workflow.import_deadline import DeadlinePassed, DeadlineSetting, ImportDeadline, import_setting
from piw.workflow.user_code import (
    WorkflowCodeExit,
    call_user,
    describe_base_exception,
    is_escape,
    sibling_import_hint,
)

SUFFIX = ".workflow.py"


def shipped_workflows_dir() -> Path:
    """``piw/workflows`` inside an installed wheel, else the repository's top-level ``workflows/``."""
    package = Path(__file__).resolve().parent.parent
    inside = package / "workflows"
    return inside if inside.is_dir() else package.parent / "workflows"


def builtins_dir() -> Path:
    return shipped_workflows_dir() / "builtins"


def examples_dir() -> Path:
    return shipped_workflows_dir() / "examples"


@dataclass(frozen=True)
class LoadedWorkflow:
    """A definition with its validated flat graph, snapshot, digest and source identities."""

    definition: WorkflowDefinition
    graph: FlatGraph
    snapshot: dict[str, Any]
    digest: str
    source: dict[str, Any]
    sources: list[dict[str, Any]]
    path: Path


def search_paths(home: Path) -> list[tuple[str, Path]]:
    """Where names are looked up, in order, with a label for ``piw list``."""
    return [
        ("project", Path.cwd() / ".piw" / "workflows"),
        ("user", home / "workflows"),
        ("builtin", builtins_dir()),
        ("example", examples_dir()),
    ]


def shown_path(path: Path | str) -> str:
    """A path as one printable line: bytes that are not UTF-8 (``os.fsencode``) are shown as ``\\xff``."""
    return os.fsencode(str(path)).decode("utf-8", "backslashreplace")


def utf8_path(path: Path) -> Path:
    """``path`` itself when it is valid UTF-8, else a :class:`LoadError` saying so.

    A workflow's path goes into the run's trace and every ``--json`` shape, which hold UTF-8 text only; a name
    with other bytes (``b"\\xff"``, which Python keeps as a lone surrogate) would fail half-way through a command
    with a traceback (``docs/guarantees.md``, "Hostile workflow files")."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        raise LoadError(
            f"Workflow path {shown_path(path)} is not valid UTF-8; piw records a workflow's path as text, so "
            "rename the file (or its folder) to a UTF-8 name."
        ) from None
    return path


def resolve_reference(reference: str, home: Path) -> Path:
    """Turn a CLI workflow reference (path or name) into a file path."""
    candidate = utf8_path(Path(reference)).expanduser()
    looks_like_path = reference.endswith(".py") or "/" in reference or reference.startswith((".", "~"))
    if looks_like_path:
        # A bare name is never read as a path, so a stray file called "hello" in the cwd is not imported.
        if candidate.is_file():
            return utf8_path(candidate.resolve())  # the current folder's own name may not be UTF-8
        raise LoadError(f"Workflow file {reference} does not exist.")
    for _, folder in search_paths(home):
        path = folder / f"{reference}{SUFFIX}"
        if path.is_file():
            return path.resolve()
    names = [path.name.removesuffix(SUFFIX) for _, path in discover(home)]
    close = difflib.get_close_matches(reference, names, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    if (Path.cwd() / f"{reference}{SUFFIX}").is_file():
        # Not imported by name: a name never runs code from whatever folder the shell is in, and a file here
        # would silently lose to (or shadow) a built-in or example of the same name. The path is two keys more.
        hint = f" Did you mean './{reference}{SUFFIX}'?"
    raise LoadError(
        f"No workflow named {reference!r}.{hint} See 'piw list' for what is available, or pass a file path."
    )


_import_lock = threading.RLock()


def import_definition(path: Path, deadline: DeadlineSetting | None = None) -> WorkflowDefinition:
    """Import a ``*.workflow.py`` file and return the ``workflow`` it binds; errors name the file.

    The import runs under ``deadline`` (``PIW_IMPORT_TIMEOUT`` or 10 s when omitted): an endless loop at import
    time is an :class:`ImportTimeout`, not a hang (``piw.workflow.import_deadline``)."""
    source = _read(utf8_path(path))
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise LoadError(f"{path}:{exc.lineno}: syntax error: {exc.msg}.") from None
    module_name = f"piw_workflow_{sha256_hex(str(path))[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"{path}: cannot be imported as a Python module.")
    module = importlib.util.module_from_spec(spec)
    setting = deadline or import_setting(None)
    # One import at a time: two threads loading the same file share its module name, and pydantic resolves a
    # model's annotations through sys.modules, so the second thread's empty module would replace the first's
    # half-way through (``piw test -j N`` runs cases in threads).
    with _import_lock:
        sys.modules[module_name] = module
        try:
            _execute(code, module.__dict__, path, setting)
        finally:
            sys.modules.pop(module_name, None)
    workflow = getattr(module, "workflow", None)
    if workflow is None:
        raise LoadError(f"{path}: the file does not bind `workflow`; add `workflow = define_workflow(...)`.")
    if not isinstance(workflow, WorkflowDefinition):
        raise LoadError(
            f"{path}: `workflow` must be the result of define_workflow(...), not {type(workflow).__name__}."
        )
    _mount_builtins(workflow, path)
    return workflow


def _execute(code: Any, namespace: dict[str, Any], path: Path, setting: DeadlineSetting) -> None:
    """Run the module's code under its deadline; whatever it raises becomes one error naming the file and line."""
    try:
        # The bytes read above, never a cached .pyc: the import system trusts a pyc whose source has the same
        # size and modification second, so a file edited twice within a second would run its older version
        # under the new source's hash.
        with ImportDeadline(setting.seconds):
            exec(code, namespace)
    except DeadlinePassed as exc:
        line = _user_line(exc, path)
        where = f"{path}:{line}" if line else str(path)
        raise ImportTimeout(
            f"{where}: importing the workflow file took longer than {setting.seconds:g} s ({setting.advice()}); "
            "look for an endless loop or a blocking call that runs when the file is imported."
        ) from None
    except DefinitionError as exc:
        line = _user_line(exc, path)
        raise DefinitionError(f"{path}:{line}: {exc}" if line else f"{path}: {exc}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit or a BaseException subclass at import time is a load error too
        line = _user_line(exc, path)
        where = f"{path}:{line}" if line else str(path)
        what = describe_base_exception(exc) if is_escape(exc) else f"{type(exc).__name__}: {exc}".rstrip(": ")
        raise LoadError(f"{where}: {what}{sibling_import_hint(exc, path)}") from None


_builtins: dict[tuple[str, str], WorkflowDefinition] = {}
_loading: list[str] = []
_builtins_lock = threading.RLock()


def builtin_definition(builtin_id: str) -> WorkflowDefinition:
    """The built-in ``builtin_id`` from the catalog; an unknown id or an include cycle is a ``DefinitionError``."""
    path = builtins_dir() / f"{builtin_id}{SUFFIX}"
    if not path.is_file():
        known = ", ".join(sorted(p.name.removesuffix(SUFFIX) for p in builtins_dir().glob(f"*{SUFFIX}")))
        raise DefinitionError(f"include({builtin_id!r}): no built-in has that id (built-ins: {known})")
    with _builtins_lock:
        if builtin_id in _loading:
            chain = " → ".join([*_loading[_loading.index(builtin_id) :], builtin_id])
            raise DefinitionError(f"include({builtin_id!r}) forms an include cycle ({chain})")
        key = (str(path.resolve()), sha256_hex(_read(path)))
        cached = _builtins.get(key)
        if cached is not None:
            return cached
        _loading.append(builtin_id)
        try:
            definition = import_definition(path)
        finally:
            _loading.pop()
        _builtins[key] = definition
        return definition


def _mount_builtins(workflow: WorkflowDefinition, path: Path) -> None:
    """Put the catalog's definition in place of every ``include("id")`` that ``workflow`` reaches.

    Definitions are frozen but their ``includes`` mapping is the dict ``define_workflow`` made, so the mount is
    replaced in place and every holder of the definition sees the built-in.
    """
    seen: set[int] = set()
    todo = [workflow]
    while todo:
        definition = todo.pop()
        if id(definition) in seen:
            continue
        seen.add(id(definition))
        for mount_id, mounted in definition.includes.items():
            child = mounted.child
            if isinstance(child, str):
                try:
                    child = builtin_definition(child)
                except DefinitionError as exc:
                    where = f"{path}:{mounted.line}" if mounted.line else str(path)
                    raise DefinitionError(f"{where}: {exc}") from None
                cast(dict[str, Include], definition.includes)[mount_id] = replace(mounted, child=child)
            todo.append(child)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise LoadError(f"{path}: cannot read the file ({exc.strerror}).") from None


def _user_line(exc: BaseException, path: Path) -> int | None:
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if Path(frame.filename) == path]
    return frames[-1].lineno if frames else None


def source_identity(definition: WorkflowDefinition, path: Path | None) -> dict[str, Any]:
    """``{"kind":"builtin","id","revision"}`` for built-ins, else ``{"kind":"file","path","hash"}``."""
    file = Path(definition.source_file).resolve() if definition.source_file else path
    if file is not None and file.parent == builtins_dir().resolve():
        if definition.revision is None:
            raise DefinitionError(f"{file}: built-in workflows must declare revision=...")
        return {"kind": "builtin", "id": file.name.removesuffix(SUFFIX), "revision": definition.revision}
    if file is None:
        raise LoadError(f"workflow {definition.name!r} has no source file")
    return {"kind": "file", "path": str(file), "hash": sha256_hex(file.read_bytes())}


def load_workflow(
    reference: str | Path, home: Path, tools_known: Callable[[str], bool] | None = None
) -> LoadedWorkflow:
    """Load, validate (both passes) and identify a workflow."""
    path = Path(reference) if isinstance(reference, Path) else resolve_reference(reference, home)
    definition = import_definition(path, import_setting(home))
    try:
        graph = flatten(definition, tools_known)
    except DefinitionError as exc:
        raise DefinitionError(f"{path}: {exc}") from None
    snap = snapshot(graph)
    sources = [
        {
            "mountPath": mount.path.split("/"),
            "workflowName": mount.definition.name,
            "source": source_identity(mount.definition, None),
        }
        for mount in _sorted_mounts(graph)
    ]
    return LoadedWorkflow(
        definition=definition,
        graph=graph,
        snapshot=snap,
        digest=definition_digest(snap),
        source=source_identity(definition, path),
        sources=sources,
        path=path,
    )


def _sorted_mounts(graph: FlatGraph) -> list[Mount]:
    return [graph.mounts[key] for key in sorted(graph.mounts)]


MAX_INPUT_DEPTH = 64
"""Nesting levels ``--input`` may have: deeper input cannot be a real request and would exhaust the recursion
of every JSON encoder and walker between here and the trace."""


def parse_input_option(text: str | None, stdin: TextIO | None = None) -> Any:
    """``--input JSON``, ``--input @file`` or ``--input -`` (standard input); omitted means ``{}``. Anything
    that could not be stored in the trace exactly (non-UTF-8 bytes, lone surrogates, non-finite numbers, absurd
    nesting) is refused here."""
    if text is None:
        return {}
    raw = text
    if text == "-":
        raw = (stdin or sys.stdin).read()
        if not raw.strip():
            raise InputInvalid(
                "--input - read nothing from standard input; pipe the JSON in, e.g. echo '{}' | piw …"
            )
    elif text.startswith("@"):
        name = text[1:]
        shown = name if name.isprintable() else repr(name)  # one line, whatever the file name holds
        if not name:
            raise InputInvalid("--input @ names no file; give the path after it, e.g. --input @input.json.")
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            raise InputInvalid(f"--input file {shown}: cannot read it ({exc.strerror}).") from None
        except ValueError:  # an embedded NUL
            raise InputInvalid(f"--input file {shown}: not a usable file name.") from None
        try:
            raw = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputInvalid(
                f"--input file {shown} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})."
            ) from None
    try:
        value = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        hint = ""
        if raw is text and text.isprintable() and (text.endswith(".json") or Path(text).is_file()):
            hint = f"; to read the file, write --input @{text}"  # a file name typed without its @
        raise InputInvalid(
            f"--input is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}){hint}."
        ) from None
    except RecursionError:
        raise InputInvalid(f"--input is nested too deeply (at most {MAX_INPUT_DEPTH} levels).") from None
    except ValueError as exc:
        raise InputInvalid(f"--input is not valid JSON ({exc}).") from None
    _check_input(value)
    return value


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of range for a JSON number")
    return value


def _check_input(value: Any) -> None:
    """Refuse input nested deeper than MAX_INPUT_DEPTH or holding text that is not valid Unicode."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict | list):
            if depth > MAX_INPUT_DEPTH:
                raise InputInvalid(f"--input is nested too deeply (at most {MAX_INPUT_DEPTH} levels).")
            if isinstance(item, dict):
                for key in item:
                    _check_text(key)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputInvalid(
            f"--input holds text that is not valid Unicode (a lone surrogate U+{ord(text[exc.start]):04X}); "
            "pass UTF-8."
        ) from None


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "null" if value is None else type(value).__name__


def _preview(value: Any, limit: int = 40) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _json_input(definition: WorkflowDefinition, value: Any) -> Any:
    """The input goes into ``run_started``; refuse what JSON cannot hold before any bundle exists."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputInvalid(f"Invalid input for {definition.name}: it is not JSON ({exc}).") from None
    return value


def prepare_input(definition: WorkflowDefinition, raw: Any) -> Any:
    """Validate the run input with the workflow's model or normaliser; errors name the field."""
    model = definition.input
    if model is None:
        value = {} if raw is None else raw
        if not isinstance(value, dict):
            raise InputInvalid(
                f"Invalid input for {definition.name}: without an input model the input must be a JSON object "
                f'({{...}}), not {_json_kind(value)}; wrap it, e.g. {{"items": {_preview(value)}}}, or declare '
                "input= in define_workflow."
            )
        return _json_input(definition, value)
    if isinstance(model, type) and issubclass(model, BaseModel):
        try:
            validated = call_user(model.model_validate, {} if raw is None else raw).model_dump(
                mode="json", by_alias=True
            )
        except WorkflowCodeExit as exc:
            raise InputInvalid(f"Invalid input for {definition.name}: {exc}.") from None
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'input'}: {error['msg']}"
                for error in exc.errors()
            )
            raise InputInvalid(f"Invalid input for {definition.name}: {problems}.") from None
        return _json_input(definition, validated)
    normalise = cast(Callable[[Any], Any], model)
    try:
        value = call_user(normalise, raw)
    except Exception as exc:
        raise InputInvalid(f"Invalid input for {definition.name}: {exc}.") from None
    return _json_input(definition, value)


def resolve_title(definition: WorkflowDefinition, input_value: Any) -> str | None:
    title = definition.title
    if title is None:
        return None
    if callable(title):
        try:
            value = call_user(title, input_value, definition.name)
        except WorkflowCodeExit as exc:
            raise InputInvalid(f"Workflow title function failed: {exc}.") from None
        except Exception as exc:
            raise InputInvalid(f"Workflow title function failed: {type(exc).__name__}: {exc}.") from None
        return str(value) if value is not None else None
    return title


def discover(home: Path) -> Iterator[tuple[str, Path]]:
    """Every workflow file in the search paths, with its origin label (first occurrence of a name wins)."""
    seen: set[str] = set()
    for label, folder in search_paths(home):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob(f"*{SUFFIX}")):
            name = path.name.removesuffix(SUFFIX)
            if name not in seen:
                seen.add(name)
                yield label, path
