"""The terminal prompt of a foreground run at a human decision, with real processes on a pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.cli import PIW_COMMAND, Cli
from tests.support.runs import WorkflowMaker, trace_lines

GATE = """
from piw import choice, compute, define_workflow, human_decision, switch, text_input, edge

workflow = define_workflow(
    name="prompted",
    start_at="n",
    nodes={
        "n": compute(lambda ctx: {"round": ctx.outputs.get("n", {"round": 0})["round"] + 1}),
        "approve": human_decision(
            "reviewers",
            [choice("continue", "Continue"), choice("stop", "Stop here"),
             choice("replan", "Replan", inputs=[text_input("instructions", prompt="What should change?")])],
            lambda ctx: f"Round {ctx.outputs['n']['round']}: ship it?",
        ),
        "done": compute(lambda ctx: {"answer": ctx.outputs["approve"], "round": ctx.outputs["n"]["round"]}),
    },
    edges=[edge("n", "approve"),
           switch("approve", on="$.choice", cases={"continue": "done", "stop": "done", "replan": "n"})],
)
"""

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


class Terminal:
    """``piw`` on a pseudo-terminal: what it printed so far, and keys typed into it."""

    def __init__(self, args: list[str], home: Path, cwd: Path) -> None:
        self.master, slave = pty.openpty()
        env = {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "100", "TERM": "dumb"}
        self.process = subprocess.Popen(
            [*PIW_COMMAND, *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env, close_fds=True
        )
        os.close(slave)
        self.output = ""

    def read_until(self, text: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.output:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} never appeared; output so far:\n{self.output}")
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                if not chunk and self.process.poll() is not None:
                    raise AssertionError(f"{text!r} never appeared; piw exited:\n{self.output}")
                self.output += ANSI.sub("", chunk.decode("utf-8", "replace"))
        return self.output

    def type(self, line: str) -> None:
        os.write(self.master, (line + "\n").encode())

    def wait(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.output += ANSI.sub("", os.read(self.master, 65536).decode("utf-8", "replace"))
                except OSError:
                    break
        return self.process.wait(timeout=max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


@pytest.fixture
def terminal(cli: Cli, make_workflow: WorkflowMaker):  # type: ignore[no-untyped-def]
    path = make_workflow("prompted", GATE)
    opened: list[Terminal] = []

    def start(*args: str) -> Terminal:
        term = Terminal([*args] or ["run", str(path)], cli.home, cli.cwd)
        opened.append(term)
        return term

    yield start
    for term in opened:
        term.close()


def runs(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runs").iterdir() if not p.name.startswith("."))


def test_a_person_decides_at_the_prompt_and_the_run_continues_there(terminal, cli: Cli) -> None:  # type: ignore[no-untyped-def]
    term = terminal()
    term.read_until("Decide (continue/stop/replan; Enter leaves it waiting): ")
    term.type("maybe")
    term.read_until(
        "'maybe' is not a choice of this decision; choose one of: continue, stop, replan. Try again."
    )
    term.type("replan")
    term.read_until("What should change? ")
    term.type("   ")  # blank required text is refused, and asked again
    term.read_until("needs non-blank text for 'instructions'")
    term.type("replan")
    term.read_until("What should change? ")
    term.type("smaller steps")
    term.read_until("Round 2: ship it?")  # the continuation ran here and opened the gate again
    term.read_until("Decide (continue/stop/replan; Enter leaves it waiting): ")
    term.type("stop")
    assert term.wait() == 0, term.output
    _, second, third = runs(cli.home)
    final = json.loads((cli.home / "runs" / third / "state.json").read_text())
    assert final["status"] == "completed"
    assert final["finalOutput"] == {"answer": {"choice": "stop", "provenance": "human"}, "round": 2}
    replanned = trace_lines(cli.home, second)[0]["payload"]["continuedFrom"]["humanDecision"]
    assert replanned["choice"] == "replan" and replanned["provenance"] == "human"
    assert trace_lines(cli.home, second)[0]["payload"]["carried"]["outputs"]["approve"]["instructions"] == (
        "smaller steps"
    )


def test_a_decision_answered_from_a_second_terminal_while_the_first_shows_it(terminal, cli: Cli) -> None:  # type: ignore[no-untyped-def]
    first = terminal()
    first.read_until("Decide (continue/stop/replan; Enter leaves it waiting): ")
    (parent,) = runs(cli.home)
    second = terminal("decide", parent, "continue")
    assert second.wait() == 0, second.output
    assert "Recorded continue (human)" in second.output
    first.read_until("Decided elsewhere: continue (human, by ")
    assert first.wait() == 0
    assert "; the continuation is run " in first.output
    child = next(run for run in runs(cli.home) if run != parent)
    state = json.loads((cli.home / "runs" / child / "state.json").read_text())
    assert state["status"] == "completed" and state["finalOutput"]["answer"]["choice"] == "continue"
    assert len(runs(cli.home)) == 2  # one continuation: the first terminal started none


def test_enter_leaves_the_run_waiting(terminal, cli: Cli) -> None:  # type: ignore[no-untyped-def]
    term = terminal()
    term.read_until("Enter leaves it waiting): ")
    term.type("")
    assert term.wait() == 0
    (parent,) = runs(cli.home)
    assert f"piw decide {parent} continue" in term.output
    done = cli("decide", parent, "continue")
    assert done.returncode == 0, done.stderr
