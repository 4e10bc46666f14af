"""Which holder a taker may stop: only the same process, on this machine and boot (``piw.store.db.holders``)."""

from __future__ import annotations

import subprocess
import sys

from piw.store.db.holders import holder_is_dead, runner_id, stale_holder_pid


def test_only_the_same_live_process_on_this_boot_is_named() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = runner_id(child.pid)
        assert stale_holder_pid(holder) == child.pid and not holder_is_dead(holder)
        host, pid, stamp = holder.rsplit(":", 2)
        started, _, boot = stamp.partition("@")
        assert boot  # this machine has a boot id: it is recorded
        recycled = f"{host}:{pid}:{int(started) + 1}@{boot}"
        assert stale_holder_pid(recycled) is None and holder_is_dead(recycled)  # another process, that pid
        assert stale_holder_pid(f"{host}:{pid}:{started}@00000000") is None  # another boot: another machine
        assert stale_holder_pid(f"{host}:{pid}:{started}") is None  # no boot recorded: never signalled
        assert stale_holder_pid(f"elsewhere:{pid}:{started}@{boot}") is None
        assert stale_holder_pid(runner_id()) is None  # never this process
    finally:
        child.kill()
        child.wait()
    assert stale_holder_pid(runner_id(child.pid)) is None
