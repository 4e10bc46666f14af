"""Memory of a long ``piw watch``: its RSS at every 100,000 events appended while it follows the run.

    python bench/bench_long_watch.py [--events 1000000] [--every 100000] [--baseline PATH]

This process plays the run's writer: it holds the run's writer lock (a watcher stops following a running run that
no process writes), appends ``node_started``/``node_finished`` pairs and leaves fold checkpoints as piw's writer
does (``CheckpointTrail``). A real ``piw watch RUN`` follows it (its frames go to ``/dev/null``); after each
``--every`` events, once the watcher's CPU time has stopped growing (it has folded them), its ``VmRSS`` and
``VmHWM`` are read from ``/proc``. ``--baseline`` names another checkout of piw (for example one of ``main``),
followed the same way in the same run, so the figures stand side by side. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bundles import NODES, _at, make_bundle  # noqa: E402

from piw.store.bundle import Bundle, WriterLock  # noqa: E402
from piw.store.fold import fold, fold_more  # noqa: E402
from piw.store.foldcache import CHECKPOINT_EVERY, CheckpointTrail  # noqa: E402
from piw.store.trace import TraceEvent, read_trace  # noqa: E402

WATCH = "import sys; from piw.cli.main import main; sys.argv[0] = 'piw'; main()"


def _proc(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, VmRSS kB, VmHWM kB) of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return cpu, int(status["VmRSS"].split()[0]), int(status["VmHWM"].split()[0])


def _settled(pid: int) -> tuple[int, int]:
    """Wait until the watcher's CPU time stops growing (1 s without a tick); its (RSS, peak) in MB."""
    last, quiet = -1.0, 0
    while quiet < 4:
        time.sleep(0.25)
        cpu, rss, hwm = _proc(pid)
        quiet = quiet + 1 if cpu == last else 0
        last = cpu
    return rss // 1024, hwm // 1024


def follow(tree: Path | None, events: int, every: int) -> list[tuple[int, int, int]]:
    """(events appended, watcher RSS MB, watcher peak MB) at each step, for piw from ``tree`` (None: this one)."""
    rows: list[tuple[int, int, int]] = []
    with tempfile.TemporaryDirectory(prefix="piw-long-watch-") as tmp:
        home = Path(tmp)
        run_id = make_bundle(home, 2, running=True)
        bundle = Bundle(run_id, home / "runs" / run_id)
        state = fold(read_trace(bundle.trace_path).events)
        lock = WriterLock(bundle).acquire()
        trail = CheckpointTrail(bundle.path, state)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIW_")}
        env.update(PIW_HOME=str(home), COLUMNS="100")
        if tree is not None:
            env["PYTHONPATH"] = str(tree)
        watcher = subprocess.Popen(
            [sys.executable, "-c", WATCH, "watch", run_id],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            rss, hwm = _settled(watcher.pid)
            rows.append((0, rss, hwm))
            seq = state.trace_seq
            attempt = "a0"
            with bundle.trace_path.open("ab") as out:
                while seq < events:
                    batch: list[TraceEvent] = []
                    while not batch or seq % 1000:
                        seq += 1
                        node = NODES[(seq // 2) % len(NODES)]
                        if seq % 2:  # (line 2, the bundle's last, is a node_started)
                            payload = {"outcome": "ok", "durationMs": seq % 17, "output": {"n": seq}}
                            batch.append(
                                TraceEvent(
                                    seq, _at(seq), "node", "node_finished", run_id, payload, node, attempt
                                )
                            )
                        else:
                            attempt = uuid.uuid4().hex
                            batch.append(
                                TraceEvent(
                                    seq,
                                    _at(seq),
                                    "node",
                                    "node_started",
                                    run_id,
                                    {"nodeType": "compute"},
                                    node,
                                    attempt,
                                )
                            )
                    lines = [event.encode() for event in batch]
                    out.write(b"".join(lines))
                    out.flush()
                    state = fold_more(state, batch)
                    for line in lines[:-1]:
                        trail.extension.feed(line)
                    trail.appended(lines[-1], state)  # (batches end on every CHECKPOINT_EVERY-th line)
                    if seq % every == 0:
                        rss, hwm = _settled(watcher.pid)
                        rows.append((seq, rss, hwm))
                        print(f"  … {tree or 'this tree'}: line {seq:,}, RSS {rss} MB", file=sys.stderr)
        finally:
            watcher.terminate()
            watcher.wait(timeout=30)
            lock.release()
    assert CHECKPOINT_EVERY % 1000 == 0
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--every", type=int, default=100_000)
    parser.add_argument("--baseline", type=Path, help="another checkout of piw to follow the same way")
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline:
        trees.append(("baseline", args.baseline))
    results = {name: follow(tree, args.events, args.every) for name, tree in trees}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"piw watch RSS (MB) while {args.events:,} events are appended — {when}")
    print("appended    " + "   ".join(f"{name:>22}" for name in results))
    for index, (appended, *_rest) in enumerate(results["this tree"]):
        cells = [f"RSS {rows[index][1]:4d}, peak {rows[index][2]:4d}" for rows in results.values()]
        print(f"{appended:>9,}   " + "   ".join(f"{cell:>22}" for cell in cells))


if __name__ == "__main__":
    main()
