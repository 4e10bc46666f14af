"""``piw show WORKFLOW``: what a workflow does, what input it takes, its graph, and a run command that works."""

from __future__ import annotations

import sys
import textwrap
from typing import Annotated, Any

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.follow_flags import ModelOption, ProviderOption
from piw.cli.foreground import PlanOption
from piw.cli.plan import print_plan, projection_of
from piw.store.home import piw_home
from piw.terminal import json_text, sanitize_terminal_text, single_line


def _source_text(source: dict[str, Any]) -> str:
    if source.get("kind") == "builtin":
        return f"builtin {source.get('id')} revision {source.get('revision')}"
    return f"file {source.get('path')} (sha256 {str(source.get('hash'))[:12]}…)"


def _need(field: Any) -> str:
    if field.required:
        return "required"
    if field.has_default and field.default is not None:
        return f"default {json_text(field.default)}"
    if not field.has_default and field.type.startswith("list of"):
        return "default []"
    return "optional"


def show_json(info: Any) -> dict[str, Any]:
    definition = info.definition
    loaded = info.loaded
    data: dict[str, Any] = {
        "id": info.reference,
        "name": definition.name,
        "description": definition.description,
        "contractId": definition.contract_id,
        "revision": definition.revision,
        "source": loaded.source,
        "definitionDigest": loaded.digest,
        "maxSteps": definition.max_steps,
        "input": {"fields": [f.to_json() for f in info.fields], "schema": info.schema},
        "graph": {
            "startAt": definition.start_at,
            "nodes": [line.to_json() for line in info.graph],
            "exits": dict(definition.exits),
        },
        "example": {
            "command": info.command(),
            "input": info.example_input,
            "inputFile": str(info.example_input_file) if info.example_input_file else None,
            "repliesFile": str(info.replies_file) if info.replies_file else None,
        },
    }
    return data


def render(info: Any, width: int) -> list[str]:
    definition = info.definition
    loaded = info.loaded
    lines = [f"{definition.name} — {single_line(definition.description or '(no description)')}"]
    meta = [_source_text(loaded.source)]
    if definition.contract_id:
        meta.append(f"contract {definition.contract_id}")
    meta.append(f"digest {loaded.digest[:19]}…")
    lines += ["  " + " · ".join(meta), ""]
    lines.append("Input")
    if info.schema is None:
        lines.append("  (no input model: any JSON object, or none)")
    name_width = min(max((len(f.path) for f in info.fields), default=4) + 2, 28)
    for field in info.fields:
        need = _need(field)
        head = f"  {field.path.ljust(name_width)}{single_line(field.type)}; {single_line(need)}"
        lines.append(head)
        if field.description:
            body = textwrap.wrap(single_line(field.description), max(30, width - name_width - 4))
            lines += [" " * (name_width + 2) + part for part in body]
    lines += ["", f"Graph (start {definition.start_at}, at most {definition.max_steps:,} steps)"]
    id_width = min(max(len(line.id) for line in info.graph) + 2, 26)
    kind_width = min(max(len(line.label) for line in info.graph) + 2, 40)
    for line in info.graph:
        head = f"  {line.id.ljust(id_width)}{line.label.ljust(kind_width)}"
        routes = line.route_texts()
        lines.append(head + routes[0])
        lines += [" " * len(head) + route for route in routes[1:]]
    lines += ["", "Example"]
    lines.append("  " + sanitize_terminal_text(info.command()))
    if info.needs_model and info.replies_file is not None:
        lines.append(f"  (offline: the scripted provider replays {info.replies_file})")
    elif info.needs_model:
        lines.append("  (agent steps need a model: add --provider NAME, see 'piw providers')")
    return lines


@app.command()
def show(
    workflow: Annotated[
        str, typer.Argument(help="A built-in id, a discovered name or a workflow file path.")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the description with the input's JSON Schema.")
    ] = False,
    plan: PlanOption = False,
    input: Annotated[
        str | None, typer.Option("--input", help="With --plan: the run input (default: the example input).")
    ] = None,
    provider: ProviderOption = None,
    model: ModelOption = None,
) -> int:
    """Show what a workflow does: its input fields, graph, revision and an example run command."""
    from piw.run.runner import tools_known
    from piw.workflow.describe import describe
    from piw.workflow.loader import load_workflow, parse_input_option

    loaded = load_workflow(workflow, piw_home(), tools_known())
    info = describe(workflow, loaded)
    if plan:
        raw = parse_input_option(input) if input is not None else info.example_input
        return print_plan(projection_of(loaded, piw_home(), raw, provider, model), as_json)
    if as_json:
        sys.stdout.write(json_text(show_json(info)) + "\n")
        return 0
    console = make_console()
    for line in render(info, console.width):
        console.out(line, highlight=False)
    return 0
