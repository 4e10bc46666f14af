"""Publish durable progress updates from a function action and from a shell command's output lines.

piw run batch
piw run batch --input '{"items": 8}'
"""

from typing import Any

from pydantic import BaseModel, Field

from piw import (
    ActionContext,
    NodeContext,
    ShellCommand,
    ShellLine,
    ShellUpdates,
    UpdateInput,
    action,
    define_workflow,
    edge,
    shell,
)

PROGRESS = "pi-workflows.progress.v1"


class Input(BaseModel):
    items: int = Field(default=5, ge=1, le=100)


def process(ctx: ActionContext) -> dict[str, int]:
    """A function action: publish one progress snapshot per item, then a terminal one."""
    total = ctx.input["items"]
    for done in range(total + 1):
        ctx.publish_update(
            "progress",
            "rows",
            {
                "schema": PROGRESS,
                "status": "running",
                "label": "Processing rows",
                "completed": done,
                "total": total,
                "unit": "rows",
            },
        )
        if done < total:
            ctx.sleep(0.3)  # stands in for real work; returns early (raising Cancelled) on timeout or cancel
    ctx.publish_update(
        "progress",
        "rows",
        {
            "schema": PROGRESS,
            "status": "completed",
            "label": "Processing rows",
            "completed": total,
            "total": total,
            "unit": "rows",
        },
    )
    return {"processed": total}


COPY_SCRIPT = 'for i in $(seq 1 "$1"); do echo "COPIED $i $1"; sleep 0.2; done; echo "DONE $1"'


def copy_command(ctx: NodeContext) -> ShellCommand:
    count = str(ctx.outputs["process"]["processed"])
    return ShellCommand(command="bash", args=["-c", COPY_SCRIPT, "copy", count])


def copy_line(line: ShellLine, ctx: NodeContext) -> UpdateInput | None:
    """A shell update parser: one line of output in, an update (or None to skip the line) out."""
    words = line.text.split()
    if words[:1] == ["COPIED"]:
        status, done, total = "running", int(words[1]), int(words[2])
    elif words[:1] == ["DONE"]:
        status, done, total = "completed", int(words[1]), int(words[1])
    else:
        return None
    return UpdateInput(
        type="progress",
        key="copy",
        data={
            "schema": PROGRESS,
            "status": status,
            "label": "Copying results",
            "completed": done,
            "total": total,
            "unit": "files",
        },
    )


def copied(result: dict[str, Any], ctx: NodeContext) -> dict[str, int]:
    """The node's output, parsed from the command result (stdout ends with "DONE <n>")."""
    return {"copied": int(result["stdout"].split()[-1])}


workflow = define_workflow(
    name="batch",
    description="Publishes progress updates from an action and from a shell command's output lines.",
    input=Input,
    start_at="process",
    nodes={
        "process": action(process, timeout_s=120),
        "copy": shell(copy_command, parse=copied, updates=ShellUpdates(parse_line=copy_line), timeout_s=60),
    },
    edges=[edge("process", "copy")],
)
