"""The terminal prompt of a foreground run that stops at a human decision.

Only on a terminal (stdin and stdout both a TTY), after the wait has been printed: the person types a choice (and
the text it needs) and the run continues here, exactly as ``piw decide`` would. While the prompt waits it watches
the decision: answered from another terminal, it says so and stops asking; past its deadline, it applies the
declared timeout (the same sweep ``piw host`` does) and continues with it. Enter on an empty line or end of input
leaves the run waiting. A model never reaches this code: it reads the person's keyboard only.
"""

from __future__ import annotations

import select
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from piw.errors import AnswerInvalid, DecisionResolved, PiwError
from piw.run.answers import AnswerReceipt, Wait, claim_decision, now_text, read_wait, record_answer
from piw.run.sweeper import sweep_timeouts
from piw.store.db.rows import Claim
from piw.store.db.run_database import RunDatabase, open_run_database
from piw.store.fold import RunState
from piw.terminal import sanitize_terminal_text, single_line

POLL_S = 0.5


def can_prompt() -> bool:
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


@dataclass(frozen=True)
class Prompted:
    """What the prompt ended with: a recorded answer to continue, an answer from elsewhere, or nothing."""

    kind: Literal["answered", "elsewhere", "left"]
    receipt: AnswerReceipt | None = None
    claim: Claim | None = None
    message: str = ""


class _Stop(Exception):
    def __init__(self, prompted: Prompted) -> None:
        self.prompted = prompted


def _read_line(console: Console, question: str, check: Callable[[], Prompted | None]) -> str | None:
    """One line from the terminal (``None`` at end of input); ``check`` runs while nothing is typed."""
    console.print(question, end="")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if ready:
            line = sys.stdin.readline()
            return None if line == "" else line.rstrip("\n")
        stopped = check()
        if stopped is not None:
            console.print()
            raise _Stop(stopped)


def _watch(home: Path, database: RunDatabase, wait: Wait) -> Callable[[], Prompted | None]:
    """Answered elsewhere, or due: the prompt stops and says what happened."""
    decisions = database.decisions

    def check() -> Prompted | None:
        row = decisions.get_decision(wait.decision_id or "")
        if row is None:
            return None
        if row.status == "open" and row.expires_at is not None and row.expires_at <= decisions.clock():
            made = sweep_timeouts(home, database, run_id=wait.run_id)
            if made:
                choice = (made[0].spec.answer or {}).get("choice")
                return Prompted(
                    "answered",
                    made[0],
                    None,
                    f"No answer before the deadline: continuing with {choice} (timeout).",
                )
            row = decisions.get_decision(wait.decision_id or "")
            if row is None:
                return None
        if row.status == "resolved":
            how = f"{(row.response or {}).get('choice')} ({row.provenance}, by {row.answered_by})"
            return Prompted(
                "elsewhere",
                message=f"Decided elsewhere: {single_line(how)}; the continuation is run {row.continuation_run_id}.",
            )
        if row.status == "cancelled":
            return Prompted("elsewhere", message="The run was cancelled while waiting; it will not continue.")
        return None

    return check


def _ask_texts(
    console: Console, wait: Wait, choice: str, check: Callable[[], Prompted | None]
) -> dict[str, str]:
    picked: dict[str, Any] = next(
        (item for item in wait.output.get("choices", []) if item.get("id") == choice), {}
    )
    texts: dict[str, str] = {}
    for field in picked.get("inputs", []):
        name, prompt = (
            str(field.get("name")),
            sanitize_terminal_text(str(field.get("prompt", field.get("name")))),
        )
        optional = "" if field.get("required", True) else " (optional)"
        value = _read_line(console, f"{prompt}{optional} ", check)
        if value is None:
            raise _Stop(Prompted("left"))
        if value or field.get("required", True):
            texts[name] = value
    return texts


def ask(home: Path, state: RunState, console: Console) -> Prompted:
    """Prompt until a valid decision is recorded, the decision is settled elsewhere, or the person leaves."""
    try:
        wait, parent = read_wait(home, state.run_id)
    except PiwError:
        return Prompted("left")
    if wait.kind != "human_decision":
        return Prompted("left")
    database = open_run_database(home)
    check = _watch(home, database, wait)
    ids = [str(item.get("id")) for item in wait.output.get("choices", [])]
    try:
        settled = check()
        if settled is not None:
            return settled
        while True:
            line = _read_line(console, f"Decide ({'/'.join(ids)}; Enter leaves it waiting): ", check)
            if line is None or not line.strip():
                return Prompted("left")
            choice = line.strip()
            try:
                texts = _ask_texts(console, wait, choice, check) if choice in ids else {}
                claim = claim_decision(
                    wait, choice, texts, seen_sha256=wait.request_sha256, now_iso=now_text()
                )
                receipt, _ = record_answer(home, database, claim, parent, foreground=True)
            except AnswerInvalid as exc:
                console.print(f"{exc} Try again.")
                continue
            except DecisionResolved as exc:
                return Prompted("elsewhere", message=str(exc))
            return Prompted("answered", receipt, None, "")
    except _Stop as stop:
        return stop.prompted


def after_waiting(
    home: Path, state: RunState, console: Console, follow: Callable[[AnswerReceipt, Claim | None], Any]
) -> int:
    """The prompt loop of a foreground run that stopped at a decision: ask, then continue here, again and again.

    ``follow`` runs the continuation in the foreground (the live view) and returns ``(state, exit code)``.
    """
    code = 0
    while state.status == "waiting":
        prompted = ask(home, state, console)
        if prompted.message:
            console.print(prompted.message)
        if prompted.kind != "answered" or prompted.receipt is None:
            return code
        spec = prompted.receipt.spec
        if not prompted.message:
            console.print(
                f"Recorded {single_line(str((spec.answer or {}).get('choice')))} (human); continuing as run "
                f"{spec.run_id}."
            )
        state, code = follow(prompted.receipt, prompted.claim)
    return code
