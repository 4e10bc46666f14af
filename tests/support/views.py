"""Shared fixtures for the view, watch and CLI-view tests: real runs, made deterministic, and a plain
renderer.

The runs are produced by the real CLI in process (``piw run`` with the scripted provider) under a clock
that ticks one second per reading, then their random ids are rewritten to fixed ones in order of appearance
and durations are made to match the timestamps: snapshots are stable while the trace stays a genuine one (same
events, same payloads, ``seq`` untouched). A *running* run is a copy of the completed one cut after the
``reply`` step's prompt — exactly the bytes a live writer would have committed by then.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console, RenderableType

from piw.views.source import RunData, load_run
from tests.support.inprocess import replace_everywhere, run_piw
from tests.support.paths import TESTS

BASE = datetime(2026, 1, 1, tzinfo=UTC)
HOSTILE = "\x1b[2J\x1b]52;c;QUFB\x07\r\u202e[red]x[/red]"
SNAPSHOTS = TESTS / "views" / "snapshots"
RUN_IDS = {
    "completed": "20260101T000000000Z-views-demo-00000001",
    "failed": "20260101T000000000Z-views-demo-00000002",
    "waiting": "20260101T000000000Z-views-demo-00000003",
    "running": "20260101T000000000Z-views-demo-00000001",
}

WORKFLOW = '''
"""Exercises every view: progress, a loop back, a switch, two agents, a checkpoint and a notification."""

from pydantic import BaseModel

import piw.workflow.definition as dsl
from piw import action, assistant_message, checkpoint, compute, edge, notify, switch

HOSTILE = "\\x1b[2J\\x1b]52;c;QUFB\\x07\\r\\u202e[red]x[/red]"
PROGRESS = "pi-workflows.progress.v1"


class Triage(BaseModel):
    route: str


def crunch(ctx):
    for done in (0, 20, 40, 60):
        ctx.publish_update("progress", "rows", {"schema": PROGRESS, "status": "running", "label": "Rows " +
        HOSTILE,
                                                "completed": done, "total": 100, "unit": "rows"})
    ctx.publish_update("progress", "overall", {"schema": PROGRESS, "status": "running", "label": "Overall",
                                               "completed": 1, "total": 3, "unit": "stages"})
    ctx.publish_update("note", "last", {"msg": "note " + HOSTILE})
    if ctx.input.get("fail"):
        raise RuntimeError("disk full " + HOSTILE)
    return {"rows": 60, "note": HOSTILE}


workflow = dsl.define_workflow(
    name="views-demo",
    start_at="prepare",
    nodes={
        "prepare": compute(lambda ctx: {"mode": ctx.input.get("mode", "full")}, status_detail="Preparing " +
        HOSTILE), "crunch": action(crunch), "classify": dsl.agent(prompt="Classify the rows " + HOSTILE,
        expected_output=Triage,
                              status_detail="Classifying"),
        "reply": dsl.agent(prompt="Reply to the reporter " + HOSTILE,
                           expected_output=assistant_message(max_chars=300)),
        "approve": checkpoint(lambda ctx: {"question": "Ship it?"}),
        "announce": notify(lambda ctx: "Done: " + HOSTILE),
    },
    edges=[
        switch("prepare", on="$.mode", cases={"full": "crunch", "ask": "approve"}),
        edge("crunch", "classify"),
        switch("classify", on="$.route", cases={"reply": "reply", "again": "crunch", "skip": "announce"}),
        edge("reply", "announce"),
    ],
)
'''

REPLIES = {
    "classify": [{"text": "Let me think \x1b[31m[bold]about[/bold] it"}, {"submit": {"route": "reply"}}],
    "reply": [
        {
            "thinking": "hmm \x1b[2J",
            "text": "Thanks! \x1b]52;c;QUFB\x07 fixed \u202e[red]x[/red]\r\nSecond line",
        }
    ],
}


def piw_env(home: Path, columns: int = 80) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PIW_"))}
    env.update(PIW_HOME=str(home), COLUMNS=str(columns), NO_COLOR="1")
    return env


def _fake_clock() -> Callable[[], str]:
    """A clock that ticks one second per reading from 2026-01-01, fresh for each command."""
    ticks = itertools.count(1)

    def now_iso() -> str:
        moment = BASE + timedelta(seconds=next(ticks))
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    return now_iso


def run_cli(
    home: Path, *args: str, columns: int = 80, check: bool = False, fake_clock: bool = False
) -> subprocess.CompletedProcess[str]:
    """``piw ARGS`` (in process, see ``tests.support.inprocess``) with its own ``PIW_HOME``; stdout is never a terminal.

    With ``fake_clock`` every timestamp piw writes comes from a clock that ticks one second per reading, so the
    run's times (and the durations derived from them) are the same on every machine.
    """
    patches = [replace_everywhere("piw.wire", "now_iso", _fake_clock())] if fake_clock else []
    result = run_piw(args, env=piw_env(home, columns), patches=patches)
    if check and result.returncode != 0:
        raise AssertionError(f"piw {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result


_HEX = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
_UPDATE = re.compile(r"upd_[0-9a-f-]{36}")


def normalize_bundle(bundle: Path, run_id: str, workflow_dir: Path | None = None) -> Path:
    """Rewrite a real bundle's random ids to fixed ones (in order of appearance) and its durations to match
    its timestamps, and the workflow folder in traceback frames to ``/flows``; events, payloads and ``seq``
    stay as the run wrote them."""
    names = ["trace.ndjson", "session/entries.ndjson", "manifest.json", "workflow.json"]
    texts = {name: (bundle / name).read_text(encoding="utf-8") for name in names if (bundle / name).exists()}
    everything = "".join(texts.values())
    ids: dict[str, str] = {}
    for token in _HEX.findall(everything):
        ids.setdefault(token, f"{len(ids) + 1:08x}" * 4)
    updates: dict[str, str] = {}
    for token in _UPDATE.findall(everything):
        updates.setdefault(token, f"upd_{len(updates) + 1:04d}")
    old_id = bundle.name
    for name, text in texts.items():
        text = text.replace(old_id, run_id)
        text = _HEX.sub(lambda m: ids[m.group(0)], text)
        texts[name] = _UPDATE.sub(lambda m: updates[m.group(0)], text)
    texts["trace.ndjson"] = _fix_durations(texts["trace.ndjson"])
    if workflow_dir is not None:  # traceback frames name the workflow file: a fixed folder, as for the ids
        texts["trace.ndjson"] = texts["trace.ndjson"].replace(f'"file":"{workflow_dir}/', '"file":"/flows/')
    target = bundle.parent / run_id
    bundle.rename(target)
    (target / "state.json").unlink(missing_ok=True)
    for name, text in texts.items():
        (target / name).write_text(text, encoding="utf-8")
    return target


def _fix_durations(trace: str) -> str:
    started: dict[str, datetime] = {}
    lines = []
    for raw in trace.splitlines():
        event = json.loads(raw)
        at = datetime.fromisoformat(event["at"])
        if event["type"] == "node_started":
            started[event["attemptId"]] = at
        elif event["type"] in ("node_finished", "node_failed"):
            took = int((at - started[event["attemptId"]]).total_seconds() * 1000)
            _set_durations(event["payload"], took)
        lines.append(json.dumps(event, ensure_ascii=False, separators=(",", ":")))
    return "\n".join(lines) + "\n"


def _set_durations(value: Any, took: int) -> None:
    if isinstance(value, dict):
        for key in value:
            if key == "durationMs":
                value[key] = took
            else:
                _set_durations(value[key], took)


def cut_bundle(source: Path, home: Path, after_type: str, node: str) -> Path:
    """A copy of ``source`` in ``home`` whose trace ends at the first ``after_type`` event of ``node``."""
    target = home / "runs" / source.name
    shutil.copytree(source, target)
    lines = (target / "trace.ndjson").read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(
        i for i, line in enumerate(lines) if f'"type":"{after_type}"' in line and f'"nodeId":"{node}"' in line
    )
    kept = lines[: cut + 1]
    (target / "trace.ndjson").write_text("".join(kept), encoding="utf-8")
    # The session as it stood just before the next event: entries written after the cut event are in it.
    next_at = json.loads(lines[cut + 1])["at"] if cut + 1 < len(lines) else "9999"
    entries = (target / "session" / "entries.ndjson").read_text(encoding="utf-8").splitlines(keepends=True)
    entries = [line for line in entries if json.loads(line)["at"] < next_at]
    (target / "session" / "entries.ndjson").write_text("".join(entries), encoding="utf-8")
    manifest = json.loads((target / "manifest.json").read_text(encoding="utf-8"))
    manifest["status"] = "running"
    manifest.pop("finishedAt", None)
    (target / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return target


@dataclass(frozen=True)
class Runs:
    """Homes and ids of the fixture runs; ``running`` lives in its own home (it shares the completed run's
    id)."""

    root: Path
    homes: dict[str, Path]
    workflow: Path

    def home(self, kind: str) -> Path:
        return self.homes[kind]

    def bundle(self, kind: str) -> Path:
        return self.homes[kind] / "runs" / RUN_IDS[kind]

    def load(self, kind: str, at: int | None = None, now: datetime | None = None) -> RunData:
        clock = (lambda: now) if now is not None else (lambda: RUNNING_NOW)
        return load_run(self.homes[kind], RUN_IDS[kind], at, clock=clock)


def build_runs(root: Path) -> Runs:
    """Run the fixture workflow three ways through the CLI, normalise, and cut a running copy."""
    workflow = root / "views_demo.workflow.py"
    workflow.write_text(WORKFLOW, encoding="utf-8")
    (root / "views_demo.replies.json").write_text(json.dumps(REPLIES), encoding="utf-8")
    home = root / "home"
    title = "Demo " + HOSTILE
    invocations = {
        "completed": ["--title", title],
        "failed": ["--input", '{"fail": true}'],
        "waiting": ["--input", '{"mode": "ask"}'],
    }
    homes: dict[str, Path] = {}
    for kind, extra in invocations.items():
        before = set((home / "runs").iterdir()) if (home / "runs").exists() else set()
        run_cli(home, "run", str(workflow), "--provider", "scripted", *extra, fake_clock=True)
        (bundle,) = set((home / "runs").iterdir()) - before
        normalize_bundle(bundle, RUN_IDS[kind], root.resolve())
        homes[kind] = home
    running_home = root / "running-home"
    (running_home / "runs").mkdir(parents=True)
    cut_bundle(home / "runs" / RUN_IDS["completed"], running_home, "agent_prompt_sent", "reply")
    homes["running"] = running_home
    return Runs(root, homes, workflow)


RUNNING_NOW = BASE + timedelta(seconds=30)
"""The fixed "now" for the running run: a little after its last event, so elapsed clocks are stable."""


_BUILT: list[Runs] = []


def shared_runs(factory: pytest.TempPathFactory) -> Runs:
    """The fixture runs, built once per test session and shared by every module that asks."""
    if not _BUILT:
        _BUILT.append(build_runs(factory.mktemp("view-runs")))
    return _BUILT[0]


def render(renderable: RenderableType, width: int = 80, height: int | None = None) -> str:
    """What a plain, colourless console of ``width`` columns prints."""
    console = Console(
        width=width, height=height or 25, color_system=None, file=io.StringIO(), highlight=False
    )
    console.print(renderable)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def assert_terminal_safe(text: str) -> None:
    """No ESC, BEL, CR or bidi control reached the output; the control characters are shown as escapes."""
    for bad in ("\x1b", "\x07", "\r", "\u202e", "\u2066"):
        assert bad not in text, f"{bad!r} reached the terminal"


def check_snapshot(name: str, text: str) -> None:
    """Compare with ``tests/views/snapshots/NAME.txt``; ``PIW_UPDATE_SNAPSHOTS=1`` rewrites it."""
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("PIW_UPDATE_SNAPSHOTS") or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not os.environ.get("PIW_UPDATE_SNAPSHOTS"):
            pytest.fail(f"snapshot {path.name} was missing and has been written; run again")
    assert text == path.read_text(encoding="utf-8"), (
        f"snapshot {path.name} differs (PIW_UPDATE_SNAPSHOTS=1 to update)"
    )


def max_width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)
