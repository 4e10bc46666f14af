"""Anchor: per-step cost of a DBOS workflow of ``@DBOS.step`` calls on SQLite (runs in its own venv).

    python dbos_steps.py STEPS

Prints one JSON object like ``langgraph_steps.py``: ``median_ms`` (median gap between successive step calls),
``mean_ms`` (first to last call over the gaps), ``total_ms`` (the workflow's wall time per step), ``cpu_ms``
and the installed version. DBOS records each step's result in its system database (here a SQLite file)
before the workflow goes on.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from dbos import DBOS, DBOSConfig

stamps: list[float] = []


@DBOS.step()
def step(n: int) -> int:
    stamps.append(time.perf_counter())
    return n + 1


@DBOS.workflow()
def loop(steps: int) -> int:
    n = 0
    for _ in range(steps):
        n = step(n)
    return n


def main() -> None:
    steps = int(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="dbos-bench-") as tmp:
        config: DBOSConfig = {
            "name": "piw-bench",
            "system_database_url": f"sqlite:///{Path(tmp) / 'dbos.sqlite'}",
            "run_admin_server": False,
        }
        DBOS(config=config)
        DBOS.launch()
        cpu, wall = time.process_time(), time.perf_counter()
        result = loop(steps)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        DBOS.destroy()
    assert result == steps, result
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    print(
        json.dumps(
            {
                "median_ms": statistics.median(gaps) * 1000,
                "mean_ms": (stamps[-1] - stamps[0]) / (len(stamps) - 1) * 1000,
                "total_ms": wall / steps * 1000,
                "cpu_ms": cpu / steps * 1000,
                "versions": {"dbos": version("dbos")},
            }
        )
    )


if __name__ == "__main__":
    main()
