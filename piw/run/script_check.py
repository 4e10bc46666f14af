"""``piw validate`` of a script node: two dry runs compared leaf by leaf (``docs/dynamic-workflows.md``).

A script is durable because each leaf has the same key every time it runs. Nothing enforces that at run time, so
``piw validate`` runs each script twice, each in its own Python process with its own hash seed (so the iteration
order of a ``set`` of strings differs as it may after a crash), against a recording stand-in that answers every
leaf from its expected output's schema: no model is asked. A key only one run reached, or one key asking two
different prompts, means a key depends on time, randomness or set order; the report names the call site.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from piw.errors import DefinitionError, ScriptUnstable
from piw.workflow.script import Flow, ScriptMain

SEEDS = ("1", "2")


def answer_from_schema(expected: Any) -> Any:
    """The smallest value that fits a leaf's expected output (``None``: an empty object; a description: text)."""
    if isinstance(expected, type) and issubclass(expected, BaseModel):
        from piw.workflow.schemas import json_schema

        schema = json_schema(expected)
        return _fill(schema, schema.get("$defs", {}))
    return {} if expected is None else "ok"


def _fill(schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    if "$ref" in schema:
        return _fill(defs.get(str(schema["$ref"]).rsplit("/", 1)[-1], {}), defs)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for many in ("anyOf", "oneOf", "allOf"):
        if schema.get(many):
            return _fill(schema[many][0], defs)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0]
    if kind == "object":
        props = schema.get("properties", {})
        return {name: _fill(props[name], defs) for name in schema.get("required", props)}
    if kind == "array":
        return [_fill(schema.get("items", {}), defs)] * int(schema.get("minItems", 0))
    return {"string": "x", "integer": 0, "number": 0, "boolean": False, "null": None}.get(str(kind), "x")


def dry_leaves(script: ScriptMain, run_input: Any) -> list[dict[str, Any]]:
    """Run ``script`` once with every leaf answered from its schema; the leaves it reached."""

    def ask(_key: str, _prompt: str, expected: Any, _tools: tuple[str, ...], _phase: str) -> Any:
        return answer_from_schema(expected)

    flow = Flow(run_input, {}, ask, max_concurrency=script.max_concurrency, max_agents=script.max_agents)
    script.main(flow)
    return flow.leaves


@dataclass(frozen=True)
class ScriptReport:
    """One script node that passed: its leaf count per phase."""

    node_id: str
    phases: dict[str, int]


def script_nodes(loaded: Any) -> dict[str, ScriptMain]:
    return {
        node_id: gnode.node.run
        for node_id, gnode in loaded.graph.nodes.items()
        if isinstance(getattr(gnode.node, "run", None), ScriptMain)
    }


def check_scripts(path: Path, run_input: Any) -> list[ScriptReport]:
    """Both dry runs of every script node in ``path``; ``ScriptUnstable`` names the first call site that differs."""
    runs = [_dry_run(path, run_input, seed) for seed in SEEDS]
    reports = []
    for node_id in runs[0]:
        first, second = runs[0][node_id], runs[1].get(node_id, [])
        _compare(node_id, first, second)
        reports.append(ScriptReport(node_id, dict(Counter(str(leaf["phase"]) for leaf in first))))
    return reports


def _compare(node_id: str, first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    a = {leaf["key"]: leaf for leaf in first}
    b = {leaf["key"]: leaf for leaf in second}
    for key in sorted(set(a) ^ set(b)):
        leaf = a.get(key) or b[key]
        raise ScriptUnstable(
            f"Script {node_id}: the leaf at {leaf['site']} has key {key!r} in one run only; its key depends on "
            "time, randomness or set order (use the item's index or a stable key=)."
        )
    for key in sorted(a):
        if a[key]["prompt"] != b[key]["prompt"]:
            raise ScriptUnstable(
                f"Script {node_id}: leaf {key!r} at {a[key]['site']} asks a different prompt in each run; its "
                "items come from time, randomness or set order (sort them)."
            )


def _dry_run(path: Path, run_input: Any, seed: str) -> dict[str, list[dict[str, Any]]]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-m", "piw.run.script_check", str(path), json.dumps(run_input)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise DefinitionError(f"A script in {path} failed in its dry run (no model asked): {last}")
    return dict(json.loads(done.stdout))


def _main(argv: list[str]) -> int:
    from piw.run.runner import tools_known
    from piw.store.home import piw_home
    from piw.workflow.loader import load_workflow

    loaded = load_workflow(Path(argv[0]), piw_home(), tools_known())
    run_input = json.loads(argv[1])
    found = {node_id: dry_leaves(script, run_input) for node_id, script in script_nodes(loaded).items()}
    sys.stdout.write(json.dumps(found))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(_main(sys.argv[1:]))
    except Exception as exc:  # one line for the parent's report
        sys.stderr.write(f"{type(exc).__name__}: {exc}\n")
        sys.exit(1)
