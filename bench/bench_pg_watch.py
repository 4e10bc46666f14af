"""Cross-host ``piw watch`` latency in database mode (docs/many-machines.md, "Watching from another machine").

A writer ``piw run --database URL`` (its own ``PIW_HOME``) runs a loop of compute steps, one every ~25 ms; a
``piw watch --database URL`` in another process with another ``PIW_HOME`` (another host, as far as piw can tell)
follows it. For every ``node_finished`` the writer committed after the watcher was up, the latency is the time the
watcher's line for it arrived minus the event's ``at`` (both clocks are this machine's, the ``at`` to the
millisecond). Prints p50/p95/max over the steps; the target is p95 ≤ 100 ms (``docs/design/multi-host.md`` §5).
Not a test: figures only.

    python bench/bench_pg_watch.py [--steps 200] [--url postgresql://…]
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LOOP = """
import time
from piw import compute, define_workflow, switch

def step(ctx):
    time.sleep(0.025)
    previous = ctx.outputs.get("step", {{"n": 0}})["n"]
    return {{"n": previous + 1, "more": previous + 1 < {steps}}}

workflow = define_workflow(
    name="bench-watch",
    start_at="step",
    max_steps={steps} + 10,
    nodes={{"step": compute(step), "done": compute(lambda ctx: ctx.outputs["step"])}},
    edges=[switch("step", on="$.more", cases={{"true": "step", "false": "done"}})],
)
"""


def _piw(home: Path, *argv: str, **kwargs: object) -> subprocess.Popen[str]:
    env = {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "piw", *argv], env=env, text=True, stdout=subprocess.PIPE, **kwargs
    )  # type: ignore[call-overload]


def _finished_at(home: Path) -> list[float]:
    """``at`` (epoch seconds) of every ``node_finished`` of node ``step`` in the writer's mirror of the run."""
    import orjson

    traces = sorted(home.glob("pg/*/runs/*/trace.ndjson"))
    assert traces, f"no mirror under {home}"
    times = []
    for line in traces[-1].read_bytes().splitlines():
        event = orjson.loads(line)
        if event["type"] == "node_finished" and event.get("nodeId") == "step":
            times.append(datetime.fromisoformat(event["at"].replace("Z", "+00:00")).timestamp())
    return times


def measure(url: str, steps: int, folder: Path) -> list[float]:
    source = folder / "loop.workflow.py"
    source.write_text(LOOP.format(steps=steps), encoding="utf-8")
    writer_home, watcher_home = folder / "host-a", folder / "host-b"
    writer = _piw(writer_home, "run", str(source), "--database", url, "--json", stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # the run exists and has steps behind it: the watcher's first lines are a backlog
    watcher = _piw(watcher_home, "watch", "--database", url, stderr=subprocess.DEVNULL)
    arrivals: list[float] = []
    started = time.time()

    def read() -> None:
        assert watcher.stdout is not None
        for line in watcher.stdout:
            if line.lstrip().startswith("✓ step"):
                arrivals.append(time.time())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    writer.wait(timeout=600)
    watcher.wait(timeout=60)
    reader.join(timeout=10)
    committed = _finished_at(writer_home)
    assert 0 < len(arrivals) <= len(committed), (len(arrivals), len(committed))
    # The watcher shows a backlog in short (the steps before it started are not each a line): its lines are the
    # last ones committed, so they are paired from the end.
    settled = started + 1.0  # past the backlog and the watcher's own start-up
    paired = zip(reversed(arrivals), reversed(committed), strict=False)
    return [seen - at for seen, at in paired if at > settled]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--url", default=None, help="an existing server (default: a throwaway one)")
    args = parser.parse_args()
    from tests.support.pg import server_url

    with server_url(args.url) as (url, _server), tempfile.TemporaryDirectory() as scratch:
        schema_url = url + ("&" if "?" in url else "?") + f"schema=bench_{secrets.token_hex(4)}"
        latencies = sorted(measure(schema_url, args.steps, Path(scratch)))
    p95 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))]
    print(
        f"cross-host watch (LISTEN/NOTIFY, another PIW_HOME), {len(latencies)} steps: "
        f"p50 {statistics.median(latencies) * 1000:.1f} ms  p95 {p95 * 1000:.1f} ms  max {latencies[-1] * 1000:.1f} ms"
    )


if __name__ == "__main__":
    main()
