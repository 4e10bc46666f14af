"""The built-in catalog (builtins.md §1, §2, §9): identity, rules every built-in follows, and revision pins.

``PINS`` is ``{id: (revision, definition digest)}``. A change to a built-in's compiled graph (nodes, types,
edges, switch cases, exits, includes, max_steps, expected outputs, fixed timeouts) changes its digest; under an
unchanged revision that fails here. Bump the revision in the workflow file (revisions only grow), then update the
pin. A change to a child (plain-summary) also changes every includer's digest, so they bump too.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from piw.errors import RunInterrupted
from piw.providers.scripted import ScriptedProvider
from piw.run.engine import Engine, RunOptions
from piw.workflow.loader import LoadedWorkflow, import_definition, load_workflow
from tests.support.builtin_harness import BUILTINS, Started, executor_for

PINS: dict[str, tuple[int, str]] = {
    "plain-summary": (1, "sha256:fa1c88436f9db6adf3f6d086323c5446e1736ee0159ac5d6669275be69f1e644"),
    "autoplan": (2, "sha256:8f320f5ec36258e95edcb369fde7f697ef08caa399e426791c459731f043216b"),
    "orchestrate": (1, "sha256:3e39c96fab38caefd1ec41d762797b6c491047775762484154f4fbaf4edab9d6"),
    "monitor": (1, "sha256:45a39db29c8343bb7f5d5b6a97e97632c90150098f07e9d24be0ac22c4c26eed"),
    "plan-approval": (1, "sha256:b731eceec0e685ec93269a61bbf1a2b6179246c11e85b5a00b054c4a35ab4c28"),
    "plan-change": (1, "sha256:25b2b86b69c6726015de61b338374bc30a9509389efb260332b97cad8ff11014"),
}

CATALOG = {
    # id: (contract id, max_steps, exits, description)
    "plain-summary": (
        "piw.plain-summary.v1",
        2,
        {"completed"},
        "One plain-language reply about supplied material.",
    ),
    "autoplan": (
        "piw.autoplan.v1",
        9,
        {"ready", "blocked"},
        "Compare candidate plans, choose one, write it, explain it plainly.",
    ),
    "monitor": (
        "piw.monitor.v1",
        8_010,
        {"finished"},
        "Check a target on an interval and report every check.",
    ),
    "orchestrate": (
        "piw.orchestrate.v1",
        7,
        {"completed", "failed"},
        "A planner splits work; named workers do the parts.",
    ),
    "plan-approval": (
        "piw.plan-approval.v1",
        3,
        {"continue", "stop", "replan"},
        "A person approves, stops or redirects a plan.",
    ),
    "plan-change": (
        "piw.plan-change.v1",
        160,
        {"ready", "blocked"},
        "Autoplan, then approval, with bounded replanning.",
    ),
}

FILES = sorted(BUILTINS.glob("*.workflow.py"))


def catalog_problems(pins: dict[str, tuple[int, str]], current: dict[str, tuple[int, str]]) -> list[str]:
    """What is wrong between the pinned and the installed catalog (empty when they agree)."""
    problems = []
    for builtin_id, (revision, digest) in sorted(current.items()):
        if builtin_id not in pins:
            problems.append(f"{builtin_id}: not pinned; add {builtin_id!r}: ({revision}, {digest!r})")
            continue
        pinned_revision, pinned_digest = pins[builtin_id]
        if revision < pinned_revision:
            problems.append(f"{builtin_id}: revision {revision} is lower than the pinned {pinned_revision}")
        elif digest != pinned_digest and revision == pinned_revision:
            problems.append(
                f"{builtin_id}: the definition changed ({digest}) under unchanged revision {revision}; bump the "
                "revision in the workflow file, then the pin"
            )
        elif digest != pinned_digest or revision != pinned_revision:
            problems.append(f"{builtin_id}: revision {revision} is new; pin it as ({revision}, {digest!r})")
    problems += [f"{builtin_id}: pinned but not installed" for builtin_id in sorted(set(pins) - set(current))]
    return problems


def installed(home: Path) -> dict[str, tuple[int, str]]:
    found = {}
    for path in FILES:
        loaded = load_workflow(path, home)
        revision = loaded.definition.revision
        assert isinstance(revision, int)
        found[path.name.removesuffix(".workflow.py")] = (revision, loaded.digest)
    return found


def test_pins_match_the_installed_catalog(piw_home: Path) -> None:
    assert catalog_problems(PINS, installed(piw_home)) == []


def test_a_graph_change_under_an_unchanged_revision_is_caught(piw_home: Path, tmp_path: Path) -> None:
    # A copy of plain-summary with one more node but the same revision: the digest moves, the pin check fails.
    source = (BUILTINS / "plain-summary.workflow.py").read_text(encoding="utf-8")
    changed = source.replace(
        '"finish": compute(finish),', '"finish": compute(finish),\n        "extra": compute(1),'
    )
    changed = changed.replace(
        'edges=[edge("summarize", "finish")]', 'edges=[edge("summarize", "finish"), edge("finish", "extra")]'
    )
    changed = changed.replace(
        'exits={"completed": {"from_": "finish"}}', 'exits={"completed": {"from_": "extra"}}'
    )
    path = tmp_path / "plain-summary.workflow.py"
    path.write_text(changed, encoding="utf-8")
    digest = load_workflow(path, piw_home).digest
    assert digest != PINS["plain-summary"][1]
    problems = catalog_problems({"plain-summary": PINS["plain-summary"]}, {"plain-summary": (1, digest)})
    assert problems == [
        f"plain-summary: the definition changed ({digest}) under unchanged revision 1; bump the revision in the "
        "workflow file, then the pin"
    ]
    assert catalog_problems(
        PINS, {**installed(piw_home), "plain-summary": (0, PINS["plain-summary"][1])}
    ) == ["plain-summary: revision 0 is lower than the pinned 1"]


def test_every_catalog_entry_is_installed_with_its_identity(piw_home: Path) -> None:
    ids = {path.name.removesuffix(".workflow.py") for path in FILES}
    assert set(CATALOG) <= ids
    for path in FILES:
        builtin_id = path.name.removesuffix(".workflow.py")
        definition = import_definition(path)
        loaded = load_workflow(path, piw_home)
        assert definition.name == builtin_id  # B1: the id is the file stem and the name
        assert isinstance(definition.revision, int) and definition.revision >= 1
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert docstring is not None and docstring.splitlines()[0] == definition.description
        assert loaded.source == {"kind": "builtin", "id": builtin_id, "revision": definition.revision}
        if builtin_id in CATALOG:
            contract, max_steps, exits, description = CATALOG[builtin_id]
            assert (definition.contract_id, definition.max_steps, set(definition.exits)) == (
                contract,
                max_steps,
                exits,
            )
            assert definition.description == description


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_builtins_import_only_stdlib_pydantic_and_the_public_api(path: Path) -> None:
    allowed_piw = {"piw", "piw.plan", "piw.progress"}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        for name in names:
            top = name.split(".")[0]
            if top == "piw":
                assert name in allowed_piw, f"{path.name} imports {name}"
            else:
                assert top in sys.stdlib_module_names or top in ("pydantic", "__future__"), (path.name, name)


def test_piw_list_shows_each_builtin_with_revision_and_contract(cli: Any) -> None:
    rows = {row["id"]: row for row in cli.json("list")}
    for builtin_id, (contract, _, _, description) in CATALOG.items():
        row = rows[builtin_id]
        assert (row["revision"], row["contractId"], row["description"]) == (
            PINS[builtin_id][0],
            contract,
            description,
        )
        assert row["source"] == {"kind": "builtin", "id": builtin_id, "revision": PINS[builtin_id][0]}
    listed = cli("list")
    assert "piw show WORKFLOW" in listed.stdout
    for builtin_id, (contract, *_rest) in CATALOG.items():  # the table names id, kind, revision and contract
        line = next(line for line in listed.stdout.splitlines() if line.startswith(builtin_id + " "))
        assert line.split()[:4] == [builtin_id, "builtin", str(PINS[builtin_id][0]), contract]


def test_includes_resolve_only_within_the_catalog(cli: Any, piw_home: Path) -> None:
    # B14: a same-named project workflow never replaces the included built-in.
    project = Path(cli.cwd) / ".piw" / "workflows"
    project.mkdir(parents=True)
    (project / "plain-summary.workflow.py").write_text(
        "from piw import compute, define_workflow\n"
        "workflow = define_workflow(name='plain-summary', start_at='x', nodes={'x': compute(1)})\n",
        encoding="utf-8",
    )
    shown = cli.json("show", "autoplan")
    kinds = {node["id"]: node["type"] for node in shown["graph"]["nodes"]}
    assert kinds["ready_summary"] == "include plain-summary (revision 1)"
    graph = cli.json("graph", str(BUILTINS / "autoplan.workflow.py"))
    assert graph["nodes"]["ready_summary/summarize"]["expectedOutput"] == {"kind": "assistant-message"}


def test_resuming_a_run_of_an_older_revision_is_refused_with_restart_guidance(
    cli: Any, piw_home: Path
) -> None:
    # A run recorded under plain-summary revision 0 (as if started before the installed revision 1), parked in
    # its agent step; resuming it with the installed definition must be refused, write nothing, and say how to
    # start again.
    current = load_workflow("plain-summary", piw_home)
    old_source = {"kind": "builtin", "id": "plain-summary", "revision": 0}
    older: LoadedWorkflow = replace(current, source=old_source, digest="sha256:" + "0" * 64)
    started = Started()

    def interrupt(event: Any, state: Any) -> None:
        if event.type == "node_started" and event.node_id == "summarize":
            raise KeyboardInterrupt

    engine = Engine(
        older,
        piw_home,
        RunOptions(
            agent_executor=executor_for(ScriptedProvider([])),
            listeners=[interrupt],
            on_start=started.on_start,
        ),
    )
    with pytest.raises(RunInterrupted):
        engine.start({"source": "text", "purpose": "why"})
    assert started.bundle is not None
    run_id = started.bundle.run_id
    trace = started.bundle.trace_path.read_bytes()
    done = cli("resume", run_id, "--provider", "scripted")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"Error: Workflow source changed since run {run_id} started (builtin plain-summary revision 0, installed "
        f"revision 1). Completed steps cannot be replayed against a different definition. To keep them, fork the "
        f"run onto the changed workflow: 'piw fork {run_id} --from summarize --workflow plain-summary'. Or cancel "
        f"it with 'piw cancel {run_id}' and start again with 'piw run plain-summary'."
    )
    assert started.bundle.trace_path.read_bytes() == trace  # nothing written
