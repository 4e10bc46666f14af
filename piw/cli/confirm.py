"""``piw run --confirm-above COST`` and ``[budget] confirm_above``: a run whose projected cost is over the line asks
before its first model request (``docs/planning.md``).

In the foreground, on a terminal, it asks ``Start it? [y/N]``; with stdin not a terminal nobody can answer, so it
refuses (exit 2) unless ``--yes`` says yes in advance. ``--detach`` queues the run waiting on its ``budget`` gate
with the projection in the message, for ``piw answer RUN '{"confirm": true}'``. An unknown projected cost (no
price, an unbounded loop) counts as over the line: it cannot be shown to be under it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from piw.errors import NotConfirmed, UsageError


def parse_cost(text: str) -> float:
    """``1.50`` or ``$1.50`` → 1.5; anything else is one ``UsageError``."""
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise UsageError(
            f"--confirm-above {text!r}: give a cost in USD of 0 or more, e.g. --confirm-above 1.50."
        )
    return value


def threshold(home: Path, flag: str | None) -> float | None:
    """The flag's line, else ``[budget] confirm_above``; a file without a ``[budget]`` table is not validated
    here (a run without agent steps never loads the provider layer: ``tests/cli/test_startup.py``)."""
    if flag is not None:
        return parse_cost(flag)
    import tomllib

    try:
        raw = tomllib.loads((home / "config.toml").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        raw = {"budget": None}  # the full load below says what is wrong, as a run would
    if "budget" not in raw:
        return None
    from piw.config.settings import load_config

    return load_config(home).budget.confirm_above


def confirmation_needed(
    workflow: str, home: Path, raw_input: Any, launch: Any, flag: str | None, *, yes: bool, detach: bool
) -> dict[str, Any] | None:
    """``None`` when the run may start as usual; for ``--detach`` over the line, the budget stop to wait on.
    In the foreground over the line it asks, or raises :class:`NotConfirmed`."""
    line = threshold(home, flag)
    if line is None or yes:
        return None
    from piw.cli.plan import projection_of

    projection = projection_of(workflow, home, raw_input, launch.provider, launch.model, launch.script)
    cost = projection.total.cost
    if cost.expected is not None and cost.expected <= line:
        return None
    described = _described(projection, line)
    if detach:
        return {
            "reason": described,
            "limit": "confirmAbove",
            "limits": {},
            "spent": {},
            "byNode": {},
            "confirm": {
                "above": line,
                "projection": projection.total.to_json(),
                "bounded": projection.bounded,
            },
        }
    if not sys.stdin.isatty():
        raise NotConfirmed(
            f"Not started: {described}, and stdin is not a terminal to ask; pass --yes to start it anyway, or "
            "--detach to queue it waiting for 'piw answer RUN {\"confirm\": true}'."
        )
    from piw.cli.console import make_console

    console = make_console(sys.stderr)
    console.print(f"The {described}.", soft_wrap=True, highlight=False)
    answer = console.input("Start it? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise NotConfirmed("Not started: declined at the confirmation prompt.", exit_code=1)
    return None


def _described(projection: Any, line: float) -> str:
    cost = projection.total.cost
    requests = projection.total.requests.expected
    if cost.expected is None:
        why = "an unbounded loop" if not projection.bounded else "no price for the model"
        return f"projected cost is unknown ({why}) and confirm_above is ${line:.4f}"
    high = "unbounded" if cost.high is None else f"${cost.high:.4f}"
    asked = f", {requests:.0f} model requests" if requests is not None else ""
    return (
        f"projected cost ${cost.expected:.4f} (low ${cost.low or 0:.4f}, high {high}{asked}) is above "
        f"confirm_above ${line:.4f}"
    )
