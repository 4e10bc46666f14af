"""Bookkeeping cost of a script's leaves (issue 35, docs/dynamic-workflows.md): what ``flow.agent`` adds per leaf
(key, counters, progress) on top of the ``ctx.run_agent`` child it asks, and what a rerun of ``main`` over 1,000
committed leaves costs in the flow before its first new leaf. The child step itself (the trace read, the request)
is not included: this measures the script layer only. Prints its figures."""

from __future__ import annotations

import time

from piw.workflow.script import Flow


def main_of(n: int):  # type: ignore[no-untyped-def]
    def main(flow: Flow) -> list[object]:
        def leaf(i: int) -> object:
            return flow.agent(f"Item {i}.")

        with flow.phase("all"):
            return flow.parallel(list(range(n)), leaf)

    return main


def run(n: int, committed: frozenset[str]) -> float:
    flow = Flow(
        {}, {}, lambda key, prompt, expected, tools, phase: {"key": key}, committed=committed, max_agents=n
    )
    started = time.perf_counter()
    main_of(n)(flow)
    return time.perf_counter() - started


if __name__ == "__main__":
    n = 1000
    fresh = min(run(n, frozenset()) for _ in range(5))
    keys = frozenset(f"all/leaf.{i}/leaf" for i in range(n))
    rerun = min(run(n, keys) for _ in range(5))
    print(f"flow.agent bookkeeping per leaf (1,000 leaves, 16 threads): {fresh / n * 1000:.3f} ms")
    print(f"rerun of main over 1,000 committed leaves (script layer): {rerun:.3f} s")
