"""Time to the first model request: ``piw run`` of a workflow whose first node is an agent step, from process
start to the request arriving at a loopback OpenAI-compatible stub (issue 34, target 2: ≤ 300 ms here).

Each run is a fresh ``piw`` process (byte-compiled modules, as an installed piw has them) with its own home and a
``config.toml`` whose default provider is the stub. The stub notes ``time.monotonic()`` when the request arrives
(the clock is shared by every process on the machine); the figure is that instant minus the instant just before
``subprocess.Popen``, and beside it the CPU the process had used by then (``/proc/PID/stat``, 10 ms ticks), which a
loaded machine moves less than the wall clock. Prints min/median/max over ``--runs``, and the same for
``python -c 'import openai'`` and ``piw --help``, measured in the same run, for scale. ``--vs PIW`` times another
``piw`` executable (a baseline checkout's venv) the same way, interleaved with this one. Not a test: figures only.

    python bench/bench_first_request.py [--runs 7] [--vs /path/to/baseline/.venv/bin/piw]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from piw.testing import OpenAIStub, StubReply  # noqa: E402

PIW = str(Path(sys.executable).with_name("piw"))
FLOW = """
from piw import agent, assistant_message, define_workflow

step = agent(prompt="Say hello.", expected_output=assistant_message())
workflow = define_workflow(name="first", start_at="step", nodes={"step": step})
"""


def _home(folder: Path, stub: OpenAIStub) -> Path:
    home = folder / f"home-{len(list(folder.iterdir()))}"
    home.mkdir(mode=0o700)
    config = f"""
        default = "stub/m"
        [providers.stub]
        api = "openai-completions"
        base_url = "{stub.base_url}"
        models = ["m"]
        """
    (home / "config.toml").write_text(textwrap.dedent(config), encoding="utf-8")
    return home


def _cpu_ms(pid: int) -> float:
    """User + system CPU the process ``pid`` has used so far (``/proc``; 0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def first_request(folder: Path, stub: OpenAIStub, flow: Path, piw: str = PIW) -> tuple[float, float]:
    """Wall and CPU milliseconds from just before the process starts to the request's arrival at the stub."""
    arrived: list[tuple[float, float]] = []
    child: list[subprocess.Popen[str]] = []

    def respond(body: dict[str, Any]) -> StubReply:
        arrived.append((time.monotonic(), _cpu_ms(child[0].pid)))
        return StubReply.text("hello")

    stub.respond = respond
    env = {**os.environ, "PIW_HOME": str(_home(folder, stub))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.monotonic()
    process = subprocess.Popen(
        [piw, "run", str(flow), "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    child.append(process)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0 and arrived, stderr
    return (arrived[0][0] - started) * 1000, arrived[0][1]


def command_ms(command: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    started = time.monotonic()
    subprocess.run(command, env=env, capture_output=True, check=True, timeout=120)
    return (time.monotonic() - started) * 1000


def _line(label: str, values: list[float]) -> str:
    return (
        f"{label:34s} min {min(values):7.1f} ms  median {statistics.median(values):7.1f} ms  "
        f"max {max(values):7.1f} ms  (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--vs", help="another piw executable, timed the same way (the baseline)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="piw-first-") as scratch, OpenAIStub(models=["m"]) as stub:
        folder = Path(scratch)
        flow = folder / "first.workflow.py"
        flow.write_text(FLOW, encoding="utf-8")
        homes = folder / "homes"
        homes.mkdir()
        first_request(homes, stub, flow)  # warm-up: byte-compile, page cache
        if args.vs:
            first_request(homes, stub, flow, args.vs)
        firsts, cpus, imports, helps, baselines, baseline_cpus = [], [], [], [], [], []
        for _ in range(args.runs):  # interleaved, so that load on the machine falls on each alike
            wall, cpu = first_request(homes, stub, flow)
            firsts.append(wall)
            cpus.append(cpu)
            if args.vs:
                wall, cpu = first_request(homes, stub, flow, args.vs)
                baselines.append(wall)
                baseline_cpus.append(cpu)
            imports.append(command_ms([sys.executable, "-c", "import openai"]))
            helps.append(command_ms([PIW, "--help"]))
        print(_line("piw run → first model request", firsts))
        print(_line("  its CPU until then", cpus))
        if baselines:
            print(_line("baseline piw run → first request", baselines))
            print(_line("  its CPU until then", baseline_cpus))
            ratios = [new / old for new, old in zip(firsts, baselines, strict=True)]
            print(f"{'this / baseline, pair by pair':34s} median {statistics.median(ratios):.3f}")
        print(_line("python -c 'import openai'", imports))
        print(_line("piw --help", helps))


if __name__ == "__main__":
    main()
