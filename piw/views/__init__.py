"""Views: pure functions from what a run bundle holds to a rich renderable.

The same views back ``piw run``, ``piw watch`` and ``piw inspect``.

Every view reads — never writes run data — and never imports the engine, executors, providers or the agent loop (a
test walks the imports). The only files a read leaves are caches, through the store, as ``replay`` leaves fold
checkpoints: the steps and trace views printed plain leave their rows (:mod:`piw.views.row_cache`). One module per
view; :func:`view_for` picks one by name for a loaded :class:`RunData`.

================ ==================================================================================
``state``        :mod:`piw.views.state` — status, title, input digest, current node, outcome, totals
``graph``        :mod:`piw.views.graph` — boxed node cards, edges, branch labels, loops, start and end
``steps``        :mod:`piw.views.steps` — one row per attempt
``updates``      :mod:`piw.views.updates` — current value per ``(type, key)`` and the full history
``progress``     :mod:`piw.views.progress` — every progress track with its detail line
``trace``        :mod:`piw.views.trace` — raw events, filterable by node or attempt
``conversation`` :mod:`piw.views.conversation` — step cards, assistant text, tool calls, notifications
``output``       :mod:`piw.views.output` — the final output, error and traceback, or wait, in full
================ ==================================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from piw.views.source import RunData, load_run

# rich, which every view renders with, is imported with the first view made (not for --json).
if TYPE_CHECKING:
    from piw.views.base import View

VIEW_NAMES = ("state", "graph", "steps", "updates", "progress", "trace", "conversation", "output")

__all__ = ["VIEW_NAMES", "RunData", "View", "load_run", "view_for"]


def __getattr__(name: str) -> Any:
    if name == "View":
        from piw.views.base import View

        return View
    raise AttributeError(f"module 'piw.views' has no attribute {name!r}")


def view_for(
    name: str,
    run: RunData,
    *,
    node: str | None = None,
    attempt: str | None = None,
    expanded: bool = False,
    verbose: bool = False,
) -> View:
    """The named view of a loaded run (``name`` must be one of :data:`VIEW_NAMES`).

    Each view's module is imported here, when it is asked for: ``piw inspect`` shows one view, and importing
    all eight cost it ~20 ms of start-up.
    """
    state = run.state
    if name == "state":
        from piw.store.telemetry_status import read_telemetry
        from piw.views.state import state_view

        telemetry = read_telemetry(run.bundle.path)  # live OpenTelemetry export's counts (docs/telemetry.md)
        return state_view(
            state, run.now, live=run.live, notice=run.notice, at=run.at, forks=run.forks, telemetry=telemetry
        )
    if name == "graph":
        from piw.views.graph import graph_view

        return graph_view(run.snapshot, state, run.now)
    if name == "steps":
        from piw.views.steps import steps_view

        return steps_view(state, run.now, node=node, verbose=verbose, source=run.row_source())
    if name == "updates":
        from piw.views.updates import updates_view

        return updates_view(state, run.update_events())
    if name == "progress":
        from piw.views.progress import progress_view

        # A finished run's tracks read as its log printed them; a waiting run may still go on, so it ticks.
        finished = state.is_terminal and state.status != "waiting"
        return progress_view(run.update_events(), run.now, finished=finished)
    if name == "trace":
        from piw.views.trace import trace_view

        return trace_view(run.events(), node, attempt, source=run.row_source(), events_after=run.events_after)
    if name == "conversation":
        from piw.views.conversation import conversation_view

        return conversation_view(run.entries(), expanded)
    if name == "output":
        from piw.views.output import output_view

        return output_view(state, run.bundle.resolve)
    raise ValueError(f"unknown view {name!r}")
