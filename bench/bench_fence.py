"""The fence on every bundle write (``persistence.md`` §10.2): what it costs per append and per step.

Run ``python bench/bench_fence.py`` (``--steps N``, default 1,000). It prints, for this machine, in one run:

- one ``Lease.fence()`` inside the lease (a clock comparison) against one row read (``SqliteQueue.fence``);
- the median per-step overhead of a ``compute`` loop (two fenced appends a step) under ``effects`` and ``flush``,
  three ways: with the lease's fence (what piw does), with a fence that reads the queue row on every append
  (the literal reading of §10.2), and with no claim at all (the engine used without the queue: the floor).

The lease's fence reads the row only past its own lease deadline or once a renewal is due; why that is sound is in
``piw/store/db/lease.py``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from piw.run.engine import Engine, RunOptions
from piw.run.runner import ForegroundOptions, start_run
from piw.store.db.database import close_databases
from piw.store.db.lease import Lease
from piw.store.db.rows import NewRun
from piw.store.db.run_database import open_run_database
from piw.store.trace import TraceEvent
from piw.workflow.loader import load_workflow

LOOP = """
from piw import compute, define_workflow, switch

def step(ctx):
    previous = ctx.outputs.get("step", {{"n": 0}})["n"]
    return {{"n": previous + 1, "more": previous + 1 < {steps}}}

workflow = define_workflow(
    name="bench-fence",
    start_at="step",
    max_steps={steps} + 10,
    nodes={{"step": compute(step), "done": compute(lambda ctx: ctx.outputs["step"])}},
    edges=[switch("step", on="$.more", cases={{"true": "step", "false": "done"}})],
)
"""


def per_call_us(home: Path) -> tuple[float, float]:
    queue = open_run_database(home).queue
    queue.enqueue(NewRun("20260101T000000000Z-probe-00000000", "x", {}, "sha256:0", {}))
    claim = queue.claim_next("probe")
    assert claim is not None
    lease = Lease(queue, claim)
    count = 20_000
    began = time.perf_counter()
    for _ in range(count):
        lease.fence()
    fast = (time.perf_counter() - began) / count * 1e6
    began = time.perf_counter()
    for _ in range(count // 10):
        queue.fence(claim)
    read = (time.perf_counter() - began) / (count // 10) * 1e6
    return fast, read


def step_ms(flow: Path, home: Path, durability: str, mode: str) -> float:
    """Median gap between ``node_finished`` events of the loop."""
    finished: list[float] = []

    def listener(event: TraceEvent, state: Any) -> None:
        if event.type == "node_finished":
            finished.append(time.perf_counter())

    if mode == "none":
        workflow = load_workflow(str(flow), home)
        options = RunOptions(durability=durability, listeners=[listener])  # type: ignore[arg-type]
        Engine(workflow, home, options).start({})
    else:
        original = Lease.fence
        if mode == "row":
            Lease.fence = Lease.confirm  # type: ignore[assignment, method-assign]
        try:
            options_fg = ForegroundOptions(listeners=[listener], durability=durability, record_origin=False)
            start_run(str(flow), home, {}, None, options_fg)
        finally:
            Lease.fence = original  # type: ignore[method-assign]
    gaps = [b - a for a, b in itertools.pairwise(finished)]
    return statistics.median(gaps) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    os.environ.pop("PIW_DURABILITY", None)
    with tempfile.TemporaryDirectory(prefix="piw-bench-fence-") as tmp:
        folder = Path(tmp)
        home = folder / "home"
        home.mkdir()
        fast, read = per_call_us(home)
        print(f"one fence: inside the lease {fast:.2f} µs, reading the queue row {read:.1f} µs")
        flow = folder / "bench-fence.workflow.py"
        flow.write_text(LOOP.format(steps=args.steps), encoding="utf-8")
        print(f"per-step overhead of a {args.steps}-step compute loop (median gap between node_finished):")
        for durability in ("effects", "flush"):
            figures = {}
            for mode in ("none", "lease", "row", "lease", "row", "none"):  # twice each, interleaved
                figures.setdefault(mode, []).append(step_ms(flow, home, durability, mode))
            lease, row, none = (min(figures[m]) for m in ("lease", "row", "none"))
            print(
                f"  {durability:8} lease fence {lease:6.3f} ms   row read per append {row:6.3f} ms "
                f"(+{(row - lease) * 1000:.0f} µs/step)   no claim {none:6.3f} ms"
            )
        close_databases()


if __name__ == "__main__":
    main()
