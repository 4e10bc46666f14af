"""Anchor: per-step cost of a LangGraph loop with the sync SqliteSaver checkpointer (runs in its own venv).

    python langgraph_steps.py STEPS

Prints one JSON object: ``median_ms`` (median gap between successive node calls), ``mean_ms`` (wall time of
the whole invoke over the steps), ``cpu_ms`` (process CPU per step) and the installed versions. The graph is a
single node routed back to itself ``STEPS`` times, so each superstep writes one checkpoint to a real SQLite
file (the saver commits per checkpoint; SQLite's default ``synchronous=FULL`` fsyncs each commit).
"""

from __future__ import annotations

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
        result = app.invoke({"n": 0}, config)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        conn.close()
    assert result["n"] == steps, result
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    print(json.dumps({
        "median_ms": statistics.median(gaps) * 1000,
        "mean_ms": wall / steps * 1000,
        "cpu_ms": cpu / steps * 1000,
        "versions": {name: version(name) for name in ("langgraph", "langgraph-checkpoint-sqlite")},
    }))


if __name__ == "__main__":
    main()
