"""Loading and discovery: reference resolution order, import errors, source identity and run input."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import piw.workflow.loader
from piw import DefinitionError, LoadError
from piw.errors import InputInvalid
from piw.workflow.loader import (
    discover,
    import_definition,
    load_workflow,
    parse_input_option,
    prepare_input,
    resolve_reference,
    resolve_title,
    shipped_workflows_dir,
)
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

SIMPLE = """
from piw import compute, define_workflow
workflow = define_workflow(name="{name}", start_at="a", nodes={{"a": compute({value!r})}})
"""


def write(folder: Path, name: str, value: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.workflow.py"
    path.write_text(SIMPLE.format(name=name, value=value), encoding="utf-8")
    return path


def test_resolution_order(tmp_path: Path, piw_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    explicit = write(tmp_path / "elsewhere", "hello", "explicit")
    user = write(piw_home / "workflows", "hello", "user")
    shipped = shipped_workflows_dir() / "examples" / "hello.workflow.py"
    assert resolve_reference("hello", piw_home) == user.resolve()
    project = write(tmp_path / ".piw" / "workflows", "hello", "project")
    assert resolve_reference("hello", piw_home) == project.resolve()
    assert resolve_reference(str(explicit), piw_home) == explicit.resolve()
    assert resolve_reference("elsewhere/hello.workflow.py", piw_home) == explicit.resolve()
    os.remove(project)
    os.remove(user)
    assert resolve_reference("hello", piw_home) == shipped.resolve()
    with pytest.raises(LoadError, match="piw list"):
        resolve_reference("nothing-here", piw_home)
    with pytest.raises(LoadError, match="does not exist"):
        resolve_reference("./nothing.workflow.py", piw_home)
    labels = [label for label, _ in discover(piw_home)]
    assert labels.count("example") >= 1


def test_discover_first_name_wins(tmp_path: Path, piw_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / ".piw" / "workflows", "hello", "project")
    write(piw_home / "workflows", "hello", "user")
    write(piw_home / "workflows", "mine", "user")
    found = {path.name.removesuffix(".workflow.py"): label for label, path in discover(piw_home)}
    assert found["hello"] == "project" and found["mine"] == "user"


def test_import_errors_name_the_file_and_line(make_workflow: WorkflowMaker) -> None:
    path = make_workflow("boom", "x = 1\nraise RuntimeError('kaput')\n")
    with pytest.raises(LoadError) as info:
        import_definition(path)
    assert str(info.value) == f"{path}:2: RuntimeError: kaput"
    bad_helper = make_workflow(
        "bad", "from piw import notify, define_workflow\n\n\nnode = notify('x', kind='shout')\n"
    )
    with pytest.raises(DefinitionError) as dinfo:
        import_definition(bad_helper)
    assert str(dinfo.value).startswith(f"{bad_helper}:4: notify kind")


def test_identity_of_a_file_is_its_hash(make_workflow: WorkflowMaker, piw_home: Path) -> None:
    path = make_workflow("ident", SIMPLE.format(name="ident", value=1))
    loaded = load_workflow(path, piw_home)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert loaded.source == {"kind": "file", "path": str(path.resolve()), "hash": digest}
    assert loaded.sources == [] and loaded.snapshot["name"] == "ident"
    path.write_text(path.read_text() + "# edited\n")
    again = load_workflow(path, piw_home)
    assert again.source["hash"] != digest and again.digest == loaded.digest  # same graph, new source


def test_included_children_are_identified_by_their_own_files(
    make_workflow: WorkflowMaker, piw_home: Path
) -> None:
    child = make_workflow("kid", SIMPLE.format(name="kid", value=1))
    parent = make_workflow(
        "mom",
        f"""
        import importlib.util
        from piw import compute, define_workflow, edge, include
        spec = importlib.util.spec_from_file_location("kid_module", {str(child)!r})
        kid = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(kid)
        workflow = define_workflow(name="mom", start_at="k", nodes={{"z": compute(2)}},
                                   includes={{"k": include(kid.workflow)}}, edges=[edge("k", "z")])
        """,
    )
    loaded = load_workflow(parent, piw_home)
    (entry,) = loaded.sources
    assert entry["mountPath"] == ["k"] and entry["workflowName"] == "kid"
    assert entry["source"] == {
        "kind": "file",
        "path": str(child.resolve()),
        "hash": hashlib.sha256(child.read_bytes()).hexdigest(),
    }


def test_builtins_are_identified_by_id_and_revision(
    tmp_path: Path, piw_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "shipped"
    (fake / "builtins").mkdir(parents=True)
    monkeypatch.setattr(piw.workflow.loader, "shipped_workflows_dir", lambda: fake)
    path = fake / "builtins" / "tiny.workflow.py"
    path.write_text(SIMPLE.format(name="tiny", value=1).replace("})", "}, revision=4)"), encoding="utf-8")
    assert load_workflow(path, piw_home).source == {"kind": "builtin", "id": "tiny", "revision": 4}
    path.write_text(SIMPLE.format(name="tiny", value=1), encoding="utf-8")
    with pytest.raises(DefinitionError, match="revision"):
        load_workflow(path, piw_home)


def test_shipped_workflows_dir_prefers_the_wheel_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo_layout = shipped_workflows_dir()
    assert (repo_layout / "examples" / "hello.workflow.py").is_file()
    package = tmp_path / "site-packages" / "piw"
    package.mkdir(parents=True)
    monkeypatch.setattr(piw.workflow.loader, "__file__", str(package / "workflow" / "loader.py"))
    assert shipped_workflows_dir() == package.parent / "workflows"  # no piw/workflows: the repository layout
    (package / "workflows").mkdir()
    assert shipped_workflows_dir() == package / "workflows"  # installed wheel: piw/workflows


@pytest.mark.parametrize(
    ("text", "value"),
    [(None, {}), ('{"a": [1, 2.5, "é"]}', {"a": [1, 2.5, "é"]}), ("7", 7), ('"s"', "s"), ("null", None)],
)
def test_parse_input_option(text: str | None, value: object) -> None:
    assert parse_input_option(text) == value


def test_parse_input_option_from_file_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_text('{"from": "file"}', encoding="utf-8")
    assert parse_input_option(f"@{path}") == {"from": "file"}
    for bad in ("{", "NaN", '{"x": -Infinity}', f"@{tmp_path / 'missing.json'}"):
        with pytest.raises(InputInvalid):
            parse_input_option(bad)


def test_prepare_input_and_title(make_workflow: WorkflowMaker) -> None:
    path = make_workflow(
        "typed",
        """
        from pydantic import BaseModel
        from piw import compute, define_workflow

        class In(BaseModel):
            name: str
            count: int = 1

        workflow = define_workflow(name="typed", start_at="a", input=In, nodes={"a": compute(1)},
                                   title=lambda data, name: f"{name}: {data['name']} x{data['count']}")
        """,
    )
    definition = import_definition(path)
    value = prepare_input(definition, {"name": "n"})
    assert value == {"name": "n", "count": 1}
    assert resolve_title(definition, value) == "typed: n x1"
    with pytest.raises(InputInvalid, match="name"):
        prepare_input(definition, {"count": 2})
    with pytest.raises(InputInvalid, match="title function failed"):
        resolve_title(definition, {})


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda p: p.write_bytes(b'{"q": "\xff\xfe"}'), "is not UTF-8 (byte 0xff at offset 7)"),
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested too deeply"),
        (lambda p: p.write_text("[" * 65 + "]" * 65), "nested too deeply (at most 64 levels)"),
        (lambda p: p.write_text('{"big": 1e999}'), "out of range"),
        (lambda p: p.write_text('"\\udc80"'), "lone surrogate U+DC80"),
    ],
)
def test_input_that_cannot_be_stored_is_one_error_line(
    make: Any, needle: str, cli: Cli, tmp_path: Path
) -> None:
    source = tmp_path / "input.json"
    make(source)
    done = cli("run", "hello", "--input", f"@{source}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("Error: ") and needle in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (cli.home / "runs").exists() or not any((cli.home / "runs").iterdir())
    assert cli("run", "hello", "--input", '{"n":' * 64 + "1" + "}" * 64).returncode == 0  # 64 levels are fine


def test_an_edited_file_runs_its_new_source_even_with_the_same_size_and_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader runs the bytes it read (and hashed), never a cached .pyc: Python trusts a pyc whose source has
    the same size and modification second, so an edit within a second ran the older definition."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    path = tmp_path / "edited.workflow.py"
    body = (
        "from piw import compute, define_workflow\n"
        'workflow = define_workflow(name="{}", start_at="a", nodes={{"a": compute(1)}})\n'
    )
    path.write_text(body.format("first"), encoding="utf-8")
    stamp = path.stat().st_mtime_ns
    assert import_definition(path).name == "first"
    path.write_text(body.format("again"), encoding="utf-8")  # same size
    os.utime(path, ns=(stamp, stamp))  # and the same modification time
    assert import_definition(path).name == "again"
    assert not (tmp_path / "__pycache__").exists()  # nothing is written beside a user's workflow
