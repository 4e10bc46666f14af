"""Engine benchmarks: per-step overhead under each durability setting, and trace replay (fold) throughput.

Run ``python bench/bench_engine.py`` (``--steps N``, ``--events N`` to resize). It prints, for this disk and
machine:

- the cost of one fsync'd append (the unit the durability targets are quoted in);
- the median per-step overhead of a loop of ``compute`` steps and of trivial ``action`` steps under
  ``effects``, ``always`` and ``flush``, with the fsyncs each step cost;
- replay throughput: reading, parsing and folding a large trace of node_started/node_finished pairs, in
  events/s, with the peak memory of a fresh process doing only that.

Targets (spec): a compute step under ``effects`` costs no fsync and ≤ 0.2 ms; an action step under ``effects``
≤ 1.3 × one fsync'd append; fold ≥ 500,000 events/s with peak memory ≤ 300 MB.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from piw.run.runner import ForegroundOptions, start_run
from piw.store.trace import FileLayer, TraceEvent

LOOP = """
from piw import action, compute, define_workflow, edge, switch

def step(ctx):
    previous = ctx.outputs.get("step", {{"n": 0}})["n"]
    return {{"n": previous + 1, "more": previous + 1 < {steps}}}

workflow = define_workflow(
    name="bench-{kind}",
    start_at="step",
    max_steps={steps} + 10,
    nodes={{"step": {kind}(step), "done": compute(lambda ctx: ctx.outputs["step"])}},
    edges=[switch("step", on="$.more", cases={{"true": "step", "false": "done"}})],
)
"""


class CountingFiles(FileLayer):
    """The real file layer, counting fsyncs and timing them."""

    def __init__(self) -> None:
        self.fsyncs = 0
        self.fsync_s: list[float] = []

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        started = time.perf_counter()
        super().fsync(fd)
        self.fsync_s.append(time.perf_counter() - started)


def fsync_append_ms(folder: Path, count: int = 200) -> float:
    """Median cost of one appended ~250-byte line followed by fsync, in ms."""
    path = folder / "fsync-probe.ndjson"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    line = (json.dumps({"seq": 1, "payload": "x" * 200}) + "\n").encode()
    samples = []
    try:
        for _ in range(count):
            started = time.perf_counter()
            os.write(fd, line)
            os.fsync(fd)
            samples.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(samples) * 1000


def step_overhead(kind: str, durability: str, steps: int, folder: Path) -> tuple[float, float, float, float]:
    """(median ms/step, mean ms/step, fsyncs/step, median ms per in-run fsync) for a ``steps``-step loop; both
    per-step figures are gaps between ``node_finished`` events (the run's start is not a step)."""
    source = folder / f"bench-{kind}.workflow.py"
    source.write_text(LOOP.format(kind=kind, steps=steps), encoding="utf-8")
    home = folder / f"home-{kind}-{durability}"
    finished: list[float] = []

    def listener(event: TraceEvent, state: Any) -> None:
        if event.type == "node_finished":
            finished.append(time.perf_counter())

    files = CountingFiles()
    options = ForegroundOptions(listeners=[listener], durability=durability, files=files, record_origin=False)
    state = start_run(str(source), home, {}, None, options)
    assert state.status == "completed", state.error
    gaps = [b - a for a, b in itertools.pairwise(finished)]
    in_run = statistics.median(files.fsync_s) * 1000 if files.fsync_s else 0.0
    return statistics.median(gaps) * 1000, statistics.fmean(gaps) * 1000, files.fsyncs / len(finished), in_run


def write_trace(path: Path, events: int) -> None:
    """A realistic trace: run_started, then node_started/node_finished pairs over a few node ids."""
    run_id = "20260101T000000000Z-bench-00000000"
    nodes = [f"node_{i}" for i in range(12)]
    with path.open("w", encoding="utf-8") as handle:
        seq = 1
        handle.write(
            json.dumps(
                {
                    "seq": 1,
                    "at": "2026-01-01T00:00:00.000Z",
                    "scope": "run",
                    "type": "run_started",
                    "runId": run_id,
                    "payload": {
                        "workflowName": "bench",
                        "input": {},
                        "workflowSource": {"kind": "file", "path": "/bench.workflow.py", "hash": "0" * 64},
                        "definitionDigest": "sha256:" + "0" * 64,
                        "maxSteps": events,
                    },
                },
                separators=(",", ":"),
            )
            + "\n"
        )
        while seq < events:
            node = nodes[seq % len(nodes)]
            attempt = uuid.uuid4().hex
            ms = seq % 1000
            at = f"2026-01-01T00:{(seq // 60000) % 60:02d}:{(seq // 1000) % 60:02d}.{ms:03d}Z"
            base = {"at": at, "scope": "node", "runId": run_id, "nodeId": node, "attemptId": attempt}
            seq += 1
            handle.write(
                json.dumps(
                    {"seq": seq, **base, "type": "node_started", "payload": {"nodeType": "compute"}},
                    separators=(",", ":"),
                )
                + "\n"
            )
            if seq >= events:
                break
            seq += 1
            output = {"n": seq, "label": f"item {seq}", "ok": True}
            payload = {"outcome": "ok", "durationMs": seq % 17, "output": output}
            handle.write(
                json.dumps(
                    {"seq": seq, **base, "type": "node_finished", "payload": payload}, separators=(",", ":")
                )
                + "\n"
            )


def fold_child(path: str) -> None:
    """Read, parse and fold one trace in this (fresh) process; print timings and peak memory as JSON."""
    from piw.store.fold import fold
    from piw.store.trace import iter_trace, read_trace

    started = time.perf_counter()
    state = fold(iter_trace(Path(path)))
    streamed = time.perf_counter() - started
    rss_streamed = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    count = state.trace_seq
    del state
    started = time.perf_counter()
    events = read_trace(Path(path)).events
    parsed = time.perf_counter() - started
    started = time.perf_counter()
    fold(events)
    folded = time.perf_counter() - started
    print(
        json.dumps(
            {
                "events": count,
                "streamed_s": streamed,
                "rss_streamed_mb": rss_streamed,
                "parse_s": parsed,
                "fold_s": folded,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--fold-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fold_child:
        fold_child(args.fold_child)
        return
    os.environ.pop("PIW_DURABILITY", None)
    with tempfile.TemporaryDirectory(prefix="piw-bench-", dir=os.environ.get("PIW_BENCH_DIR")) as tmp:
        folder = Path(tmp)
        # The probe runs right before each loop (a shared disk is noisy); the unit is the median of probes.
        rows, probes = [], []
        for kind in ("compute", "action"):
            for durability in ("effects", "always", "flush"):
                probes.append(fsync_append_ms(folder))
                rows.append((kind, durability, *step_overhead(kind, durability, args.steps, folder)))
        unit = statistics.median(probes)
        print(
            f"one fsync'd append: {unit:.3f} ms (median of {len(probes)} probes of 200; "
            f"range {min(probes):.3f}–{max(probes):.3f}; {folder})"
        )
        print(f"per-step overhead, {args.steps}-step loops (median gap between node_finished events):")
        for kind, durability, median, mean, fsyncs, in_run in rows:
            ratio = f"  = {median / unit:.2f} × fsync'd append" if kind == "action" else ""
            fsync_note = f" (in-run fsync {in_run:.3f} ms)" if fsyncs else ""
            print(
                f"  {kind:8} {durability:8} median {median:7.3f} ms  mean {mean:7.3f} ms  "
                f"fsyncs/step {fsyncs:4.2f}{fsync_note}{ratio}"
            )
        trace = folder / "trace.ndjson"
        started = time.perf_counter()
        write_trace(trace, args.events)
        size = trace.stat().st_size / 1e6
        print(
            f"replay: {args.events:,} events, {size:.0f} MB "
            f"(generated in {time.perf_counter() - started:.1f} s)"
        )
        results = []
        for _ in range(3):  # best of three fresh processes: the machine may be shared
            child = subprocess.run(
                [sys.executable, __file__, "--fold-child", str(trace)],
                capture_output=True,
                text=True,
                check=True,
            )
            results.append(json.loads(child.stdout))
        result = {key: min(r[key] for r in results) for key in results[0]}
        n = result["events"]
        print(
            f"  read+parse+fold, streaming: {n / result['streamed_s']:,.0f} events/s "
            f"({result['streamed_s']:.2f} s), peak RSS {result['rss_streamed_mb']:.0f} MB"
        )
        print(f"  parse only (read_trace):    {n / result['parse_s']:,.0f} events/s")
        print(f"  fold only (parsed events):  {n / result['fold_s']:,.0f} events/s")


if __name__ == "__main__":
    main()
