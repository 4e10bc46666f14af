"""``piw new NAME``: write a starting workflow file to edit (``docs/cli.md``, ``docs/dynamic-workflows.md``).

``--dynamic`` writes a ``script`` workflow (an orchestration script in plain Python: a two-stage pipeline, a
verification fan-out and a synthesis, each in its own phase) that ``piw validate`` passes as written; without it,
one ``agent`` node. The file is never overwritten.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from piw.cli.app import app
from piw.cli.console import make_console
from piw.errors import UsageError
from piw.terminal import json_text, safe_text

NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")

AGENT = '''"""{name}: one agent step (docs/authoring.md). Run it with: piw run {file} --input '{{"topic": "..."}}'"""

from piw import agent, define_workflow

workflow = define_workflow(
    name="{name}",
    start_at="answer",
    nodes={{
        "answer": agent(
            prompt=lambda ctx: f"Write three sentences about {{ctx.input.get('topic', 'piw')}}.",
            expected_output="three sentences",
        )
    }},
)
'''

DYNAMIC = '''"""{name}: an orchestration script, durable leaf by leaf (docs/dynamic-workflows.md).

Check it:   piw validate {file} --input '{{"items": ["a", "b"]}}'
Launch it:  piw run {file} --input '{{"items": ["a", "b"]}}' --detach
Follow it:  piw watch   (or piw view; piw inspect RUN --view steps lists the leaves)

Keys come from where flow.agent is called (phase, function, item index), never from when: fan out over a sorted
list, never a set, and keep time.time(), random and uuid out of keys and item order.
"""

from piw import define_workflow, script


def main(flow):
    items = sorted(flow.input.get("items", []))  # sorted: the same item lands at the same index on every run

    def draft(item):
        return flow.agent(f"Draft a short note about {{item}}.")

    def improve(note):
        return flow.agent(f"Improve this note: {{note}}")

    def verify(note):
        return flow.agent(f"Check this note for mistakes and list them: {{note}}")

    with flow.phase("draft"):
        notes = flow.pipeline(items, draft, improve)  # an item enters improve as soon as its draft ends
    with flow.phase("verify"):
        checks = flow.parallel(notes, verify)  # at most max_concurrency at once, results in item order
    flow.log(f"{{len(checks)}} notes verified")
    with flow.phase("synthesis"):
        summary = flow.agent("Write one summary from these notes and checks: " + str(checks), key="summary")
    return {{"summary": summary, "notes": notes, "checks": checks}}


workflow = define_workflow(
    name="{name}",
    start_at="orchestrate",
    nodes={{"orchestrate": script(main, max_concurrency=8, max_agents=200)}},
)
'''


@app.command()
def new(
    name: Annotated[str, typer.Argument(help="The workflow's name; the file is NAME.workflow.py.")],
    dynamic: Annotated[
        bool,
        typer.Option(
            "--dynamic", help="Write a script workflow (docs/dynamic-workflows.md) instead of one agent."
        ),
    ] = False,
    directory: Annotated[
        Path, typer.Option("--dir", help="Where to write the file (default: the current directory).")
    ] = Path("."),
    as_json: Annotated[bool, typer.Option("--json", help="Print {path, name, dynamic} as JSON.")] = False,
) -> int:
    """Write a starting workflow file NAME.workflow.py; --dynamic writes an orchestration script."""
    if not NAME.fullmatch(name):
        raise UsageError(f"Workflow name {name!r} must match [A-Za-z][A-Za-z0-9_-]{{0,63}}.")
    path = directory / f"{name}.workflow.py"
    if path.exists():
        raise UsageError(f"{path} already exists; pick another NAME or --dir (piw new never overwrites).")
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory.")
    template = DYNAMIC if dynamic else AGENT
    path.write_text(template.format(name=name, file=path.name), encoding="utf-8")
    if as_json:
        sys.stdout.write(json_text({"path": str(path), "name": name, "dynamic": dynamic}) + "\n")
        return 0
    check = f"piw validate {path}" + (' --input \'{"items": ["a", "b"]}\'' if dynamic else "")
    make_console().print(safe_text(f"Wrote {path}. Check it with '{check}'."), soft_wrap=True)
    return 0
