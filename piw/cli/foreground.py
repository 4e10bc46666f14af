"""Following a run in the foreground: the flags of the commands that do (``run``, ``resume``, ``fork``,
``answer``, ``decide``), the live display and agent wiring they give the run, and the outcome they end with.

A run that stops at a human decision on a terminal is prompted for and continued here (``piw.cli.prompt``).
The engine, the display and the agent stack are imported only when a run is followed, so ``piw --help``, which
reads every command module, does not load them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from piw.cli.console import make_console
from piw.errors import PiwError
from piw.run.launch import LaunchOptions
from piw.store.home import piw_home
from piw.terminal import json_text, safe_text, single_line

if TYPE_CHECKING:
    from piw.cli.live import LiveDisplay
    from piw.run.runner import ForegroundOptions
    from piw.store.db.idempotency import Adopted
    from piw.store.fold import RunState

EXIT_BY_STATUS = {"completed": 0, "waiting": 0, "running": 0, "failed": 1, "timed_out": 1, "cancelled": 1}

BudgetOption = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="Limits for this run, e.g. cost=2.50,tokens=200k,requests=20,steps=5 (tightens the workflow's).",
    ),
]
PlanOption = Annotated[
    bool,
    typer.Option("--plan", help="Print the projected requests, tokens and cost; send no model request."),
]

Start = Callable[["ForegroundOptions"], "RunState | Adopted"]
"""Starts, resumes or continues the run with the options the foreground gives it (``piw.run.runner``); a start
its idempotency key adopts returns the run the key started instead."""


@dataclass(frozen=True)
class Following:
    """How a command follows its run: ``--json``, the launch options and ``--verbose``."""

    as_json: bool
    launch: LaunchOptions
    verbose: bool = False
    replay_from: str | None = None
    """``piw fork --provider replay``: the parent run whose recorded replies answer the fork's agent steps."""

    def follow(self, start: Start, extra: dict[str, Any] | None = None) -> int:
        """Run in the foreground with the live display, closing it before the final JSON is printed; the exit code.

        A run that stops at a human decision on a terminal then prompts for it and continues here.
        """
        from piw.store.db.idempotency import Adopted

        state, code = self.once(start, extra)
        if isinstance(state, Adopted) or self.as_json or state.status != "waiting":
            return code
        from piw.cli.prompt import after_waiting, can_prompt

        if not can_prompt():
            return code
        continuing = replace(self, replay_from=None)  # the continuation is a run of its own, not the fork

        def follow(receipt: Any, claim: Any) -> tuple[RunState | Adopted, int]:
            from piw.run.runner import continue_run

            spec = receipt.spec
            return continuing.once(lambda options: continue_run(spec, piw_home(), options))

        return after_waiting(piw_home(), state, make_console(), follow)

    def once(self, start: Start, extra: dict[str, Any] | None = None) -> tuple[RunState | Adopted, int]:
        """Run ``start`` with the live display and print its outcome (``extra`` joins the ``--json`` object)."""
        from piw.store.db.idempotency import Adopted

        options, display = self._foreground()
        try:
            state = start(options)
        finally:
            display.close()
        if isinstance(state, Adopted):
            return state, report_adopted(state, self.as_json)
        if state.status == "waiting":  # announced on its channels (docs/channels.md, "Who posts")
            from piw.channels.duty import post_waiting

            post_waiting(piw_home(), state.run_id)
        return state, _finish(state, self.as_json, extra, verbose=self.verbose)

    def _foreground(self) -> tuple[ForegroundOptions, LiveDisplay]:
        """The live display and agent wiring of a foreground run (the live view goes to stderr with --json)."""
        from rich.text import Text

        from piw.agent_steps.factory import agent_executor_factory
        from piw.cli.live import LiveDisplay
        from piw.run.runner import ForegroundOptions

        console = make_console(sys.stderr if self.as_json else sys.stdout)
        home = piw_home()
        display = LiveDisplay(console, home=home)
        sink = display if display.interactive else None
        options = ForegroundOptions(
            listeners=[display],
            agent_executor_factory=agent_executor_factory(
                home, console, self.launch, verbose=self.verbose, sink=sink, replay_from=self.replay_from
            ),
            show_notification=lambda row: console.print(
                Text("✉ ", style="magenta")
                + safe_text(single_line(row.content))
                + Text("  (delivered late)", style="dim")
            ),
            launch=self.launch.recorded(),
            warn=_warn,
        )
        return options, display


def _finish(
    state: RunState, as_json: bool, extra: dict[str, Any] | None = None, verbose: bool = False
) -> int:
    from piw.cli.outcome import print_outcome
    from piw.run.runner import resolved_outcome

    if as_json:
        final_output, error = resolved_outcome(piw_home(), state)
        payload = {"runId": state.run_id, "status": state.status, "finalOutput": final_output, "error": error}
        sys.stdout.write(json_text({**payload, **(extra or {})}) + "\n")
    else:
        print_outcome(make_console(), piw_home(), state, verbose=verbose)
    return EXIT_BY_STATUS.get(state.status, 1)


def report_adopted(adopted: Adopted, as_json: bool) -> int:
    """A repeated start: report the run the key already started (exit 0, nothing new created)."""
    from piw.store.bundle import load_state, open_bundle

    run_id, key = adopted.run_id, adopted.key
    try:
        state = load_state(open_bundle(piw_home(), run_id))
        status, final, error = state.status, state.final_output, state.error
    except PiwError:
        status, final, error = "queued", None, None  # its host has not created the bundle yet
    if as_json:
        payload = {"runId": run_id, "status": status, "finalOutput": final, "error": error, "adopted": True}
        sys.stdout.write(json_text(payload) + "\n")
        return 0
    make_console().print(
        safe_text(
            f"Run {run_id} was already started with idempotency key {single_line(key)!r} ({status}); nothing new "
            f"was started. See it with 'piw inspect {run_id}'."
        ),
        soft_wrap=True,
    )
    return 0


def _warn(message: str) -> None:
    """A problem that does not stop the run: one ``Warning:`` line on stderr (never in ``--json`` stdout)."""
    make_console(sys.stderr).print(safe_text(f"Warning: {single_line(message)}"), soft_wrap=True)
