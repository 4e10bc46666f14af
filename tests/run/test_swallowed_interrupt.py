"""A foreground run stops on SIGTERM even when Python swallows the ``KeyboardInterrupt`` it raised.

The signal's handler runs in the main thread wherever that thread is. Here it is inside a ``__del__`` (as in CI,
where it landed in a weakref callback): Python prints "Exception ignored in: …" and carries on, so the run would
go on as if nothing had been asked. ``RunControl.interrupted`` keeps the request; the loop unwinds at the end of
the step, and the run is parked for ``piw resume`` like any interrupted run.
"""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker, trace_lines

FLOW = """
import os
import signal
import time
from pathlib import Path
from piw import action, compute, define_workflow, edge

class SignalInFinalizer:
    def __del__(self):
        if not Path({mark!r}).exists():
            Path({mark!r}).write_text("sent")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here, inside __del__: its KeyboardInterrupt is dropped

def work(ctx):
    SignalInFinalizer()  # freed at once, in this thread
    for _ in range(40):
        ctx.sleep(0.05)
    return {{"ok": True}}

workflow = define_workflow(name="finalizer", start_at="work",
    nodes={{"work": action(work), "done": compute(lambda ctx: ctx.outputs["work"])}},
    edges=[edge("work", "done")])
"""


def test_sigterm_swallowed_in_a_finalizer_still_parks_the_run(
    cli: Cli, make_workflow: WorkflowMaker, tmp_path: Path, piw_home: Path
) -> None:
    mark = tmp_path / "sent"
    path = make_workflow("finalizer", FLOW.format(mark=str(mark)))
    started = time.monotonic()
    done = cli.process("run", str(path), "--json")
    took = time.monotonic() - started
    assert mark.exists()
    assert "Exception ignored" in done.stderr  # the interrupt really was swallowed
    assert done.returncode == 130, (took, done.stderr)
    assert "piw resume" in done.stderr.splitlines()[-1]
    run_id = next(p.name for p in (piw_home / "runs").iterdir())
    types = [line["type"] for line in trace_lines(piw_home, run_id)]
    assert "run_completed" not in types and types[-1] == "node_started"  # parked: no outcome recorded
