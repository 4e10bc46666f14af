"""Benchmark the fault cases that cost time: a huge model reply against a step deadline.

Prints its figures; it asserts nothing (timings belong in a benchmark, never in a test).

    python bench/bench_faults.py [--mb 10] [--deadline 20] [--runs 3] [--verbose]

A loopback OpenAI-compatible stub answers an assistant-mode step with ``--mb`` megabytes of text in 64 KiB SSE
chunks; ``piw run`` (a real subprocess, stdout a pipe) follows it with the step's ``timeout_s=--deadline``. For each
run it prints the wall time of the whole command, the outcome, how many bytes the command printed, and the size
of the reply the bundle kept. Before the display was bounded, printing the reply ran on the agent loop's thread:
the issue measured 224 s for 10 MB against a 20 s deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from piw.testing import OpenAIStub, StubReply

WORKFLOW = """
from piw import agent, assistant_message, define_workflow
workflow = define_workflow(name="huge", start_at="say", nodes={{
    "say": agent(prompt="Say a lot.", expected_output=assistant_message(), timeout_s={deadline})}})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="reply size in megabytes (default 10)")
    parser.add_argument("--deadline", type=float, default=20.0, help="the step's timeout_s (default 20)")
    parser.add_argument("--runs", type=int, default=3, help="runs to time (default 3)")
    parser.add_argument("--verbose", action="store_true", help="run with --verbose (expanded cards)")
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)
    text = ("word " * (size // 5 + 1))[:size]
    piw = Path(sys.executable).with_name("piw")
    command = [str(piw)] if piw.is_file() else [sys.executable, "-m", "piw"]
    walls: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, OpenAIStub(models=["m"]) as stub:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        stub.respond = lambda body: replace(StubReply.text(text), chunk_size=65536)
        (home / "config.toml").write_text(
            f'default = "stub/m"\n[providers.stub]\napi = "openai-completions"\nbase_url = "{stub.base_url}"\n'
            'models = ["m"]\n',
            encoding="utf-8",
        )
        flow = Path(tmp) / "huge.workflow.py"
        flow.write_text(WORKFLOW.format(deadline=args.deadline), encoding="utf-8")
        env = {**os.environ, "PIW_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "100"}
        print(
            f"reply {size:,} characters, deadline {args.deadline:g} s, piw run{' --verbose' * args.verbose}"
        )
        for number in range(1, args.runs + 1):
            started = time.monotonic()
            done = subprocess.run(
                [*command, "run", str(flow), *(["--verbose"] if args.verbose else [])],
                env=env, capture_output=True, text=True, check=False,
            )  # fmt: skip
            wall = time.monotonic() - started
            walls.append(wall)
            run_id = sorted(p.name for p in (home / "runs").iterdir() if not p.name.startswith("."))[-1]
            state = json.loads((home / "runs" / run_id / "state.json").read_text(encoding="utf-8"))
            kept = (state.get("outputs") or {}).get("say")
            kept_bytes = kept["$artifact"]["bytes"] if isinstance(kept, dict) and "$artifact" in kept else 0
            print(
                f"run {number}: {wall:6.2f} s  exit {done.returncode}  status {state['status']:<9}  "
                f"printed {len(done.stdout) + len(done.stderr):,} chars  bundle kept {kept_bytes:,} bytes"
            )
    print(
        f"median wall {statistics.median(walls):.2f} s over {len(walls)} runs (deadline {args.deadline:g} s)"
    )


if __name__ == "__main__":
    main()
