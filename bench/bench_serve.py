"""piw serve: the read latency of a long run's state over HTTP, and the latency of an answer (issue 31 bench).

Starts a real ``piw serve --port 0`` on loopback with a synthetic 1,000,000-event run (``bundles.make_bundle``) and
``--answers`` waiting gates, then prints:

- ``GET /api/runs/{run_id}`` (the bytes of ``piw inspect RUN --json``, 500,000 steps): the first read (it folds
  the trace and leaves fold checkpoints), then ``--runs`` warm reads, p50 and max, and the same state with
  ``?steps=none`` (what a dashboard polls), beside ``piw inspect RUN --json`` warm as a process; and
  ``GET /api/runs/{run_id}/waiting`` and ``GET /api/runs`` warm (target: warm state read <= 300 ms, as the
  views');
- ``POST /api/runs/{run_id}/decide`` for each waiting gate (check, sweep, the one-winner transaction), p50 and max,
  and the identical repeat (adopted), beside ``piw decide --detach`` as a process.

    python bench/bench_serve.py [--events 1000000] [--runs 10] [--answers 30]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import httpx2

GATE = textwrap.dedent(
    """
    from piw import compute, define_workflow, edge, human_decision

    workflow = define_workflow(
        name="gate",
        start_at="gate",
        nodes={
            "gate": human_decision("ops", ["yes", "no"], "Ship it?"),
            "after": compute(lambda ctx: {"got": ctx.outputs["gate"]}),
        },
        edges=[edge("gate", "after")],
    )
    """
)
PIW = [sys.executable, "-m", "piw"]


def piw(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIW, *args], env=env, capture_output=True, text=True, check=True)


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms (n={len(values)})"


def timed(call) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def start_server(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [*PIW, "serve", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.search(r"(http://\S+) ", line)
    assert found, line
    threading.Thread(target=process.stdout.read, daemon=True).start()
    return process, found.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--answers", type=int, default=30)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bundles import make_bundle

    with tempfile.TemporaryDirectory(prefix="piw-bench-serve-", dir=os.environ.get("PIW_BENCH_DIR")) as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1"}
        run_id = make_bundle(home, args.events)
        size = (home / "runs" / run_id / "trace.ndjson").stat().st_size / 1e6
        gate = Path(tmp) / "gate.workflow.py"
        gate.write_text(GATE, encoding="utf-8")
        waiting = [json.loads(piw(env, "run", str(gate), "--json").stdout) for _ in range(args.answers + 1)]
        token = json.loads(piw(env, "tokens", "create", "bench", "--scope", "operate", "--json").stdout)[
            "token"
        ]
        process, url = start_server(env)
        try:
            report(url, token, run_id, size, args, waiting, env)
        finally:
            process.terminate()
            process.wait(10)
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times stretch)")


def report(url: str, token: str, run_id: str, size: float, args, waiting, env) -> None:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {token}"}
    with httpx2.Client(base_url=url, headers=headers, timeout=600) as client:
        for _ in range(100):
            try:
                client.get("/api/runs", params={"limit": 1})
                break
            except httpx2.TransportError:
                time.sleep(0.1)
        first, response = timed(lambda: client.get(f"/api/runs/{run_id}"))
        body = len(response.content) / 1e6  # type: ignore[attr-defined]
        warm = [timed(lambda: client.get(f"/api/runs/{run_id}"))[0] for _ in range(args.runs)]
        light = [
            timed(lambda: client.get(f"/api/runs/{run_id}", params={"steps": "none"}))[0]
            for _ in range(args.runs)
        ]
        inspect = [timed(lambda: piw(env, "inspect", run_id, "--json"))[0] for _ in range(3)]
        gate_id = waiting[-1]["runId"]
        wait_reads = [timed(lambda: client.get(f"/api/runs/{gate_id}/waiting"))[0] for _ in range(args.runs)]
        lists = [timed(lambda: client.get("/api/runs"))[0] for _ in range(args.runs)]
        print(f"{args.events:,}-event run ({size:.0f} MB trace), state JSON {body:.1f} MB")
        print(f"  GET /api/runs/{{id}} first read      {first * 1000:.0f} ms")
        print(f"  GET /api/runs/{{id}} warm (all steps) {ms(warm)}")
        print(f"  GET /api/runs/{{id}}?steps=none warm  {ms(light)}   (target <= 300 ms)")
        print(f"  piw inspect RUN --json warm (process) {ms(inspect)}")
        print(f"  GET /api/runs/{{gate}}/waiting warm   {ms(wait_reads)}")
        print(f"  GET /api/runs ({len(waiting) + 1} runs) warm    {ms(lists)}")
        answers, repeats = [], []
        for run in waiting[:-1]:
            body_json = {"choice": "yes", "requestSha256": run["finalOutput"]["requestSha256"]}
            path = f"/api/runs/{run['runId']}/decide"
            took, done = timed(lambda: client.post(path, json=body_json))  # noqa: B023
            assert done.status_code == 200, done.text  # type: ignore[attr-defined]
            answers.append(took)
            repeats.append(timed(lambda: client.post(path, json=body_json))[0])  # noqa: B023
        last = waiting[-1]
        cli = [timed(lambda: piw(env, "decide", last["runId"], "yes", "--detach", "--json"))[0]]
        print(f"  POST …/decide (first answer)        {ms(answers)}")
        print(f"  POST …/decide (identical repeat)    {ms(repeats)}")
        print(f"  piw decide --detach (process)       {ms(cli)}")


if __name__ == "__main__":
    main()
