"""Commands that read runs and definitions: ``inspect`` (one view of a replayed run), ``watch``, ``graph``.

Each parses its arguments, makes one library call and prints one view; none of them writes to a bundle.
"""

from __future__ import annotations

import difflib
import signal
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated

import typer

from piw.cli import quick_exit
from piw.cli.app import app
from piw.cli.console import make_console
from piw.cli.database import DatabaseOption, command_home
from piw.errors import RunNotFound, UsageError
from piw.store.home import piw_home
from piw.store.runref import resolve_run_id, run_ids
from piw.terminal import json_text, safe_json_bytes

if TYPE_CHECKING:
    from rich.console import Console

    from piw.views import View

VIEW_NAMES = ("state", "graph", "steps", "updates", "progress", "trace", "conversation", "output")
"""``piw.views.VIEW_NAMES``, repeated so that ``piw --help`` does not import every view (a test keeps them equal)."""

GRAPH_FORMATS = ("text", "mermaid", "dot")
_WRITE_CHUNK = 1 << 20
"""Bytes written to stdout in one call (and JSON gathered into one write)."""


def write_json_stream(pieces: Iterable[bytes]) -> None:
    """Write JSON pieces to stdout as they come, terminal-safe, so a long run's state is never one string."""

    def batches() -> Iterator[bytes]:
        buffered: list[bytes] = []
        size = 0
        for piece in pieces:
            buffered.append(safe_json_bytes(piece))
            size += len(piece)
            if size >= _WRITE_CHUNK:
                yield b"".join(buffered)
                buffered, size = [], 0
        buffered.append(b"\n")
        yield b"".join(buffered)

    _write_blocks(sys.stdout, batches())


def print_view(console: Console, view: View) -> None:
    """Print a view page by page, so a long trace never sits in memory as one renderable."""
    if not console.is_terminal:
        plain_blocks = getattr(view, "plain_blocks", None)
        blocks = plain_blocks(console.width) if plain_blocks is not None else None
        if blocks is not None:
            _write_blocks(console.file, blocks)
            return
    plain_lines = getattr(view, "plain_lines", None)
    plain = plain_lines(console.width) if plain_lines is not None and not console.is_terminal else None
    if plain is not None:
        # no styles to render: write the text itself (rich would build a Text per line and throw it away)
        out = console.file
        batch: list[str] = []
        for line in plain:
            batch.append(line)
            if len(batch) >= 1000:
                out.write("\n".join(batch) + "\n")
                batch = []
        if batch:
            out.write("\n".join(batch) + "\n")
        out.flush()
        return
    for page in view.pages(console, console.width):
        console.print(page)


def _write_blocks(out: IO[str], blocks: Iterable[bytes | memoryview]) -> None:
    """Write UTF-8 blocks (a view's cached rows among them, or JSON) as bytes when the stream has a buffer (a
    captured stdout, in tests and in-process use, is text only)."""
    out.flush()
    binary = getattr(out, "buffer", None)
    for block in blocks:
        if binary is None:
            out.write(bytes(block).decode("utf-8"))
            continue
        # a megabyte at a time: a write under way when the reader closes the pipe (``| head``) can end short
        # without an error; the next write reports the closed pipe, so a long cached text stops there
        whole = memoryview(block)  # (slices of it copy nothing)
        for start in range(0, len(whole), _WRITE_CHUNK):
            binary.write(whole[start : start + _WRITE_CHUNK])
    (binary or out).flush()


def _newest(home: Path) -> str:
    """The newest run (what ``latest`` names), or one line saying there is none yet."""
    ids = run_ids(home)
    if not ids:
        raise RunNotFound(f"No runs in {home / 'runs'} yet; start one with 'piw run WORKFLOW'.")
    return ids[0]


def _closest(name: str, names: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the closest of ``names`` (empty when none is close)."""
    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _check_node(run_id: str, snapshot: dict[str, object], node: str) -> None:
    """``--node`` must name a node of the run's definition, or a mount (which filters every node under it);
    a definition snapshot that cannot be read checks nothing."""
    nodes = snapshot.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        return
    known = {str(node_id) for node_id in nodes}
    mounts = {prefix for node_id in known for prefix in _mount_prefixes(node_id)}
    if node in known or node in mounts:
        return
    names = sorted(known | mounts)
    listed = ", ".join(names[:20]) + (f", … ({len(names) - 20} more)" if len(names) > 20 else "")
    raise UsageError(f"Run {run_id} has no node {node!r}.{_closest(node, names)} Its nodes: {listed}.")


def _mount_prefixes(node_id: str) -> Iterator[str]:
    parts = node_id.split("/")
    for end in range(1, len(parts)):
        yield "/".join(parts[:end])


@app.command()
def inspect(
    run_id: Annotated[
        str | None,
        typer.Argument(help="The run to show (an id, a unique prefix, latest or -N; default: the newest)."),
    ] = None,
    view: Annotated[str, typer.Option("--view", help=f"One of: {', '.join(VIEW_NAMES)}.")] = "state",
    node: Annotated[
        str | None,
        typer.Option("--node", help="Trace and steps views: only this node (steps: with its traceback)."),
    ] = None,
    attempt: Annotated[
        str | None, typer.Option("--attempt", help="Trace view: only this attempt (id or prefix).")
    ] = None,
    at: Annotated[int | None, typer.Option("--at", help="Replay only events 1..SEQ (time travel).")] = None,
    expanded: Annotated[
        bool, typer.Option("--expanded", help="Conversation view: expand step cards.")
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Steps view: every failure's whole traceback.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the replayed RunState as JSON.")] = False,
    database: DatabaseOption = None,
) -> int:
    """Replay a run's trace and show one view (default: state)."""
    if view not in VIEW_NAMES:
        raise UsageError(
            f"Unknown view {view!r}.{_closest(view, VIEW_NAMES)} Use one of: {', '.join(VIEW_NAMES)}."
        )
    if at is not None and at < 1:
        raise UsageError("--at takes a trace sequence number, 1 or more; see 'piw inspect RUN --view trace'.")
    if node is not None and view not in ("trace", "steps"):
        raise UsageError("--node filters the trace and steps views; add '--view steps' or '--view trace'.")
    if attempt is not None and view != "trace":
        raise UsageError("--attempt filters the trace view; add '--view trace'.")
    from piw.views import load_run, view_for
    from piw.views.source import with_artifact_check

    home = command_home(database)
    quick_exit.allow_detached_writes()  # (the fold checkpoints a first read of a long run leaves)
    run = load_run(home, resolve_run_id(home, run_id) if run_id else _newest(home), at)
    quick_exit.keep_until_exit(run)  # a long run's state: the process ends without freeing it
    if node is not None:
        _check_node(run.state.run_id, run.snapshot, node)
    decision = None
    if at is None and run.state.status == "waiting":  # (the decision views, and rich, only for a waiting run)
        from piw.cli.waiting import decision_summary

        decision = decision_summary(home, run.state)
    if as_json or view == "state":
        run = with_artifact_check(run)
    if as_json:
        extra = {"damage": run.damage.to_json()} if run.damage is not None else {}
        from piw.store.telemetry_status import read_telemetry

        telemetry = read_telemetry(run.bundle.path)
        if telemetry is not None and at is None:
            extra["telemetry"] = {key: value for key, value in telemetry.items() if key != "schema"}
        if decision is not None:
            extra["decision"] = decision
        from piw.store.state_json import iter_state_json

        write_json_stream(iter_state_json(run.state, extra or None))
        return 0
    if run.notice:  # in full on stderr: the state view clips its notice line to the width
        make_console(sys.stderr).print(f"Warning: {run.notice}", soft_wrap=True)
    console = make_console()
    shown = view_for(view, run, node=node, attempt=attempt, expanded=expanded, verbose=verbose)
    quick_exit.keep_until_exit(shown)
    print_view(console, shown)
    if view == "state" and decision is not None:
        from piw.cli.waiting import print_channels, wait_view

        wait = wait_view(home, run.state)
        if wait is not None:
            console.print(wait)
            print_channels(console, home, run.state.run_id)
    return 0


@app.command()
def watch(
    run_id: Annotated[
        str | None,
        typer.Argument(
            help="The run to follow (an id, a prefix, latest or -N; default: the newest running run, else the "
            "newest)."
        ),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    database: DatabaseOption = None,
) -> int:
    """Follow a run live until it ends or nobody is running it (q stops watching; Ctrl-C exits 130)."""
    from piw.cli.watch import Watcher, WatchInterrupted, run_to_watch
    from piw.store.bundle import open_bundle
    from piw.store.pg.place import following

    home = command_home(database)
    bundle = open_bundle(home, resolve_run_id(home, run_id) if run_id else run_to_watch(home))
    stop, interrupted = threading.Event(), threading.Event()

    def on_interrupt(_signum: int, _frame: object) -> None:
        # Ctrl-C asks the watcher to stop instead of raising wherever the main thread happens to be (inside the
        # file watcher's native code, a KeyboardInterrupt could be swallowed and leave the process waiting).
        interrupted.set()
        stop.set()

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        watcher = Watcher(bundle, make_console())
        # One frame of a long run: the process ends without freeing its state (not a live watch: it has threads).
        if once:
            quick_exit.keep_until_exit(watcher)
            quick_exit.allow_detached_writes()
        with following(home, bundle.run_id, active=not once):
            watcher.run(once=once, stop=stop)
    except WatchInterrupted:
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return 130 if interrupted.is_set() else 0


@app.command()
def graph(
    workflow: Annotated[str, typer.Argument(help="A workflow file path, or a name to discover.")],
    format: Annotated[str, typer.Option("--format", help="text, mermaid or dot.")] = "text",
    as_json: Annotated[bool, typer.Option("--json", help="Print the definition snapshot as JSON.")] = False,
) -> int:
    """Draw a workflow definition's graph."""
    from piw.views.graph import graph_view
    from piw.views.graph_export import to_dot, to_mermaid
    from piw.workflow.loader import load_workflow

    if format not in GRAPH_FORMATS:
        raise UsageError(f"Unknown format {format!r}; use one of: {', '.join(GRAPH_FORMATS)}.")
    snapshot = load_workflow(workflow, piw_home()).snapshot
    if as_json:
        sys.stdout.write(json_text(snapshot) + "\n")
    elif format == "mermaid":
        sys.stdout.write(to_mermaid(snapshot))
    elif format == "dot":
        sys.stdout.write(to_dot(snapshot))
    else:
        make_console().print(graph_view(snapshot))
    return 0
