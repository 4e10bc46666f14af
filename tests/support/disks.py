"""Real filesystems for the fault tests: mounts (a small tmpfs that fills up, a read-only bind) and a workflow
that fills 1.5 MB before its one effect (``tests/test_home_faults.py``, ``tests/run/test_host_disk_full.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CAN_MOUNT = os.geteuid() == 0 and shutil.which("mount") is not None
"""Mounting needs root and mount(8); without them the mount cases are skipped."""


def mount(*args: str) -> bool:
    """``mount ARGS``: whether it worked."""
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


def unmount(path: Path) -> None:
    """Unmount for sure: close this process's database connections first, then lazily if still busy."""
    from piw.store.db.database import close_databases

    close_databases()
    if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


FILL = """
from piw import action, compute, define_workflow, edge

def effect(ctx):
    with open(ctx.input["log"], "a") as handle:
        handle.write(ctx.node_id + "\\n")
    return 1

nodes = {f"n{i}": compute(lambda c, i=i: {"blob": str(i) * 300_000}) for i in range(8)}
nodes["act"] = action(effect)
workflow = define_workflow(
    name="fill", start_at="n0", nodes=nodes,
    edges=[*(edge(f"n{i}", f"n{i + 1}") for i in range(7)), edge("n7", "act")],
)
"""
"""Eight 300 kB outputs, then an action that appends its node id to ``input.log``: fills a 1.5 MB tmpfs first."""
