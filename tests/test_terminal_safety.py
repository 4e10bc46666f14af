"""Terminal safety everywhere: every command, on a hostile workflow, prints no control sequence from its data.

The workflow puts escape sequences (CSI, OSC 52 clipboard writes, a screen clear), CR, BEL, DEL, a C1 CSI, bidi
overrides and rich markup into everything an author or a model controls: the workflow name, title, description,
status details, input, outputs (keys too), errors, shell output, updates, notifications, a checkpoint summary and an
assistant reply. Then every command runs on it and its bytes are scanned. Output to a pipe must hold no escape
sequence at all (spec README §5); ``--json`` must be valid JSON whose text is just as clean.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import PIW_COMMAND, Cli

HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b[2J\x1b[31mred\r\u202eevil\u2066\x7f\x9b1m\x00\x08[red]markup[/red]"

# Characters no byte of piw's output to a pipe may contain (whatever their source): C0 controls but \n
# (tabs become spaces), DEL, C1 controls and the bidi controls.
FORBIDDEN = {chr(c) for c in range(0x20) if c != 0x0A} | {chr(0x7F)} | {chr(c) for c in range(0x80, 0xA0)}
FORBIDDEN |= {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}

WORKFLOW = """
import sys
from piw import (ShellCommand, action, agent, assistant_message, checkpoint, compute, define_workflow, edge,
                 notify, shell, switch)

H = {hostile!r}

def publish(ctx):
    ctx.publish_update("demo.note", "k", {{"text": H, H: H}})
    return {{"text": H, H: [H]}}

def fail(ctx):
    raise ValueError(H)

workflow = define_workflow(
    name="hostile" + H,
    title=lambda input, name: "title " + H + str(input.get("q")),
    description="desc " + H,
    start_at="out",
    nodes={{
        "out": compute(lambda ctx: {{"text": H, H: H, "input": ctx.input}}),
        "pub": action(publish, status_detail="detail " + H),
        "sh": shell(ShellCommand(command=sys.executable,
                                 args=["-c", "import sys; print(sys.argv[1]); print(sys.argv[1], file=sys.stderr); "
                                       "sys.exit(3)", H])),
        "bad": action(fail),
        "say": agent(prompt="Say " + H, expected_output=assistant_message(), status_detail=H),
        "tell": notify("note " + H),
        "wait": checkpoint(summary=lambda ctx: {{"summary": H}}),
    }},
    edges=[edge("out", "pub"), edge("pub", "sh"),
           switch("sh", on="$result.outcome", cases={{"failed": "bad", "ok": "bad"}}),
           switch("bad", on="$result.outcome", cases={{"failed": "say", "ok": "say"}}),
           edge("say", "tell"), edge("tell", "wait")],
)
"""


def scan(text: str, where: str) -> None:
    bad = sorted({f"U+{ord(c):04X}" for c in text if c in FORBIDDEN})
    assert not bad, f"{where}: control characters {bad} reached the output: {text[:2000]!r}"
    interpreted = [
        m.start() for m in re.finditer("markup", text) if text[max(0, m.start() - 5) : m.start()] != "[red]"
    ]
    assert not interpreted, f"{where}: rich markup was interpreted"


def check(done: Any, where: str, codes: tuple[int, ...] = (0,)) -> None:
    assert done.returncode in codes, (
        f"{where}: exit {done.returncode}: {done.stdout[-800:]} {done.stderr[-800:]}"
    )
    assert "Traceback" not in done.stderr, f"{where}: {done.stderr[-2000:]}"
    scan(done.stdout, f"{where} stdout")
    scan(done.stderr, f"{where} stderr")


@pytest.fixture
def hostile(cli: Cli, tmp_path: Path) -> dict[str, Any]:
    folder = cli.cwd / ".piw" / "workflows"
    folder.mkdir(parents=True)
    path = folder / "hostile.workflow.py"
    path.write_text(WORKFLOW.format(hostile=HOSTILE), encoding="utf-8")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"text": "reply " + HOSTILE}]), encoding="utf-8")
    return {"path": path, "script": script, "input": json.dumps({"q": HOSTILE})}


def test_every_command_on_a_hostile_workflow_prints_no_control_sequence(
    cli: Cli, hostile: dict[str, Any]
) -> None:
    path, script, raw = str(hostile["path"]), str(hostile["script"]), hostile["input"]
    for args in (
        ("validate", path),
        ("graph", path),
        ("graph", path, "--format", "mermaid"),
        ("graph", path, "--format", "dot"),
        ("show", path),
        ("list",),
    ):
        check(cli(*args), " ".join(args[:3]))
    for args in (("graph", path, "--json"), ("show", path, "--json"), ("list", "--json")):
        done = cli(*args)
        check(done, " ".join(args))
        json.loads(done.stdout)

    run = cli("run", path, "--input", raw, "--provider", "scripted", "--script", script, "--verbose")
    check(run, "run")
    assert "evil" in run.stdout  # the data is shown, made harmless
    (row,) = cli.json("runs")
    run_id = row["runId"]
    assert row["status"] == "waiting" and HOSTILE in row["runTitle"]  # JSON keeps the exact value
    again = cli("run", path, "--input", raw, "--provider", "scripted", "--script", script, "--json")
    check(again, "run --json")
    assert json.loads(again.stdout)["finalOutput"] == {"summary": HOSTILE}  # exact, once parsed

    for args in (("runs",), ("runs", "--json"), ("inspect", run_id, "--json"), ("watch", run_id, "--once")):
        check(cli(*args), " ".join(args[:2]))
    for view in ("state", "graph", "steps", "updates", "progress", "trace", "conversation"):
        check(cli("inspect", run_id, "--view", view), f"inspect --view {view}")
    check(cli("inspect", run_id, "--view", "conversation", "--expanded"), "inspect conversation --expanded")
    check(cli("resume", run_id), "resume (waiting)", codes=(0, 2))
    check(
        cli("fork", run_id, "--from", "bad", "--provider", "scripted", "--script", script),
        "fork",
        codes=(0, 1),
    )
    answer = cli("answer", run_id, json.dumps({"a": HOSTILE}), "--provider", "scripted", "--script", script)
    check(answer, "answer", codes=(0, 1))
    check(cli("providers"), "providers")
    check(cli("view", run_id), "view (no terminal)", codes=(0, 1, 2))

    # Error lines quote what the user typed or the workflow raised: sanitized too.
    for args in (
        ("inspect", HOSTILE),
        ("run", HOSTILE),
        ("run", path, "--input", HOSTILE),
        ("graph", "x" + HOSTILE),
    ):
        check(cli(*args), f"error {args[0]}", codes=(2,))


def test_json_escapes_del_c1_and_bidi_and_stays_exact(cli: Cli, hostile: dict[str, Any]) -> None:
    path, script, raw = str(hostile["path"]), str(hostile["script"]), hostile["input"]
    done = cli("run", path, "--input", raw, "--provider", "scripted", "--script", script, "--json")
    scan(done.stdout, "run --json")
    assert "\\u007f" in done.stdout and "\\u009b" in done.stdout and "\\u202e" in done.stdout
    run_id = json.loads(done.stdout)["runId"]
    state = cli.json("inspect", run_id)
    assert state["outputs"]["out"]["text"] == HOSTILE and state["outputs"]["out"][HOSTILE] == HOSTILE


def _read_pty(master: int, process: subprocess.Popen[bytes], seconds: float) -> bytes:
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif process.poll() is not None:
            break
    return out


def test_on_a_real_terminal_no_hostile_sequence_reaches_it(cli: Cli, hostile: dict[str, Any]) -> None:
    """On a terminal rich draws with its own escape sequences; none of the workflow's may get through."""
    path, script, raw = str(hostile["path"]), str(hostile["script"]), hostile["input"]
    master, slave = pty.openpty()
    env = {**cli.environment(), "COLUMNS": "100", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [*PIW_COMMAND, "run", path, "--input", raw, "--provider", "scripted", "--script", script],
        cwd=cli.cwd, env=env, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    try:
        out = _read_pty(master, process, 60)
        process.wait(timeout=30)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    text = out.decode("utf-8", errors="replace")
    assert "evil" in text, text[-2000:]
    for needle in (
        "\x1b]52",
        "\x1b[2J",
        "\x1b[31mred",
        "\x07",
        "\u202e",
        "\u2066",
        "\x7f",
        "\x9b",
        "\x00",
        "\x08",
    ):
        assert needle not in text, f"{needle!r} reached the terminal"
