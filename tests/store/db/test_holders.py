"""Who holds a claim: boot-id runner ids and ``PIW_HOST_ID`` (``multi-host.md`` §4.4, ``docs/detached.md``).

A dead pid on this host is taken over at once; a holder with another host id (another machine, or another
test host on this one) is never judged by its pid; a holder from before this machine's last boot is dead.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from piw.store.db.holders import boot_id, holder_host, holder_is_dead, host_id, runner_id, stale_holder_pid


def _sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])


def test_a_runner_id_names_the_host_id_the_boot_and_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIW_HOST_ID", "worker-7")
    holder = runner_id()
    host, boot, pid, started = holder.split(":")
    assert (host, boot, pid) == ("worker-7", boot_id(), str(__import__("os").getpid()))
    assert started.isdigit() and holder_host(holder) == "worker-7" and host_id() == "worker-7"
    with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
        assert boot == handle.read().strip().replace("-", "")


def test_a_dead_pid_is_taken_over_only_under_the_same_host_id(monkeypatch: pytest.MonkeyPatch) -> None:
    child = _sleeper()
    monkeypatch.setenv("PIW_HOST_ID", "host-a")
    holder = runner_id(child.pid)
    child.kill()
    child.wait()
    assert holder_is_dead(holder)  # host-a judges its own dead pid at once
    monkeypatch.setenv("PIW_HOST_ID", "host-b")
    assert not holder_is_dead(holder)  # another host never judges host-a's pids: only expiry


def test_a_holder_from_before_the_last_boot_is_dead_even_if_its_pid_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = _sleeper()
    try:
        monkeypatch.setenv("PIW_HOST_ID", "host-a")
        host, boot, pid, started = runner_id(child.pid).split(":")
        assert not holder_is_dead(f"{host}:{boot}:{pid}:{started}")
        assert holder_is_dead(f"{host}:{'0' * 32}:{pid}:{started}")  # same pid and start time, an older boot
    finally:
        child.kill()
        child.wait()


def test_holders_written_before_boot_ids_are_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    child = _sleeper()
    monkeypatch.setenv("PIW_HOST_ID", "host-a")
    _, _, pid, started = runner_id(child.pid).split(":")
    legacy = f"host-a:{pid}:{started}"
    assert not holder_is_dead(legacy) and holder_host(legacy) == "host-a"
    child.kill()
    child.wait()
    assert holder_is_dead(legacy)
    assert not holder_is_dead("host-a:12x:1")  # not a holder: never "dead"


def test_only_the_same_live_process_on_this_boot_is_named_for_stopping() -> None:
    child = _sleeper()
    try:
        holder = runner_id(child.pid)
        assert stale_holder_pid(holder) == child.pid and not holder_is_dead(holder)
        host, boot, pid, started = holder.split(":")
        assert boot != "?"  # this machine has a boot id: it is recorded
        assert (
            stale_holder_pid(f"{host}:{boot}:{pid}:{int(started) + 1}") is None
        )  # another process, that pid
        assert stale_holder_pid(f"{host}:{'0' * 32}:{pid}:{started}") is None  # another boot
        assert stale_holder_pid(f"{host}:{pid}:{started}") is None  # no boot recorded: never signalled
        assert stale_holder_pid(f"elsewhere:{boot}:{pid}:{started}") is None
        assert stale_holder_pid(runner_id()) is None  # never this process
    finally:
        child.kill()
        child.wait()
    assert stale_holder_pid(runner_id(child.pid)) is None
