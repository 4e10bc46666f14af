"""An e-mail-like workflow whose ``send`` action counts its effects in a file, and a way to SIGKILL its ``piw run``
while ``send`` runs (``docs/effects.md``; tests/run/test_effect_classes.py, tests/cli/test_database_effects.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker

FLOW = """
import json, time
from pathlib import Path
from piw import action, compute, define_workflow, edge

def send(ctx):
    Path(ctx.input["keys"]).open("a").write(ctx.idempotency_key + "\\n")
    count = Path(ctx.input["counter"])
    count.write_text(str(int(count.read_text() or 0) + 1) if count.exists() else "1")
    if not Path(ctx.input["release"]).exists():
        time.sleep(60)  # killed here
    return {"sent": True}

def check(ctx):
    checks = Path(ctx.input["checks"])
    checks.write_text(str(int(checks.read_text() or 0) + 1) if checks.exists() else "1")
    if Path(ctx.input["counter"]).exists() and not Path(ctx.input["missing"]).exists():
        return {"sent": True, "found": "by check"}
    return None

workflow = define_workflow(
    name="mail", start_at="draft",
    nodes={
        "draft": compute(lambda c: {"to": "a@example.org"}),
        "send": action(send, effect=EFFECT),
        "after": compute(lambda c: {"after": c.outputs["send"]}),
    },
    edges=[edge("draft", "send"), edge("send", "after")],
)
"""


def effect_flow(make_workflow: WorkflowMaker, effect: str) -> Path:
    return make_workflow("mail", FLOW.replace("EFFECT", effect))


def effect_input(tmp_path: Path) -> dict[str, str]:
    names = ("counter", "release", "checks", "missing", "keys")
    return {name: str(tmp_path / f"{name}.txt") for name in names}


def count(path: str) -> int:
    return int(Path(path).read_text()) if Path(path).exists() else 0


def killed_mid_action(cli: Cli, flow: Path, raw: dict[str, str], env: dict[str, str] | None = None) -> str:
    """Start the run as a real process, SIGKILL it once the action has counted its effect; the run id."""
    process = cli.popen("run", str(flow), "--input", json.dumps(raw), env=env)
    deadline = time.monotonic() + 60
    while count(raw["counter"]) == 0:
        assert process.poll() is None and time.monotonic() < deadline, "the action never started"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    run_id: str = cli.json("runs", env=env)[0]["runId"]
    return run_id
