"""Anchor: per-step cost of a LangGraph loop with the sync SqliteSaver checkpointer (runs in its own venv).

    python langgraph_steps.py STEPS

Prints one JSON object: ``median_ms`` (median gap between successive node calls), ``mean_ms`` (first to last
call over the gaps), ``total_ms`` (the whole invoke, set-up included, per step), ``cpu_ms`` (process CPU per
step) and the installed versions. The graph is a single node routed back to itself ``STEPS`` times with
``durability="sync"``: each superstep's checkpoint is committed to a real SQLite file before the next step
starts (SQLite's default ``synchronous=FULL`` fsyncs each commit), which is what piw's commit rule does.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph


class Counter(TypedDict):
    n: int


def main() -> None:
    steps = int(sys.argv[1])
    stamps: list[float] = []

    def step(state: Counter) -> Counter:
        stamps.append(time.perf_counter())
        return {"n": state["n"] + 1}

    graph = StateGraph(Counter)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda state: "step" if state["n"] < steps else END)
    with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp:
        conn = sqlite3.connect(str(Path(tmp) / "checkpoints.sqlite"), check_same_thread=False)
        app = graph.compile(checkpointer=SqliteSaver(conn))
        config = {"configurable": {"thread_id": "bench"}, "recursion_limit": steps + 10}
        cpu, wall = time.process_time(), time.perf_counter()
        result = app.invoke({"n": 0}, config, durability="sync")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        conn.close()
    assert result["n"] == steps, result
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    print(
        json.dumps(
            {
                "median_ms": statistics.median(gaps) * 1000,
                "mean_ms": (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1000,
                "total_ms": wall / steps * 1000,
                "cpu_ms": cpu / steps * 1000,
                "versions": {name: version(name) for name in ("langgraph", "langgraph-checkpoint-sqlite")},
            }
        )
    )


if __name__ == "__main__":
    main()
