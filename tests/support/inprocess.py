"""Run the ``piw`` command line inside the test process, as the console script would, and undo what it changed.

A ``piw`` subprocess costs about a second of interpreter start and imports per call; most CLI tests only care
about what the command prints, its exit code and the files it leaves, so they run ``piw.cli.main.main(argv)``
here instead. The call sees what a subprocess would: ``sys.argv[0] == "piw"``, the given environment and
working directory, stdout and stderr that are not terminals (so output is plain), and an empty stdin unless the
test passes one. Whatever process-wide state a run may change is put back afterwards: the environment, the
working directory, signal handlers, the tool registry, ``sys.path`` and ``sys.modules`` entries of workflow files,
and the standard streams. An uncaught exception becomes a traceback on stderr and exit code 1, as it would in a
subprocess, so a test that checks "no traceback" still fails on one.

Tests where process behaviour is the point (signals, SIGKILL crashes, terminals, locks, races, packaging) use
``cli.process``/``cli.popen`` (real subprocesses) instead.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

_REPO = str(REPO) + os.sep
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE)


class _Output(io.StringIO):
    """A captured stream that, like a pipe, is not a terminal and has an encoding."""

    encoding = "utf-8"

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _process_state(cwd: Path | None) -> Iterator[None]:
    """Put back the working directory, signal handlers, tool registry, sys.path and workflow-file modules, and
    close the database connections the command opened."""
    from piw.tools import registry

    old_cwd = os.getcwd()
    handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    tools = dict(registry._tools)
    path = list(sys.path)
    modules = set(sys.modules)
    argv = sys.argv
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(old_cwd)
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        with registry._lock:
            registry._tools.clear()
            registry._tools.update(tools)
        sys.path[:] = path
        for name in set(sys.modules) - modules:
            # Modules a workflow file imported from its own folder must not leak into the next test; piw's
            # own lazily imported modules (and third-party ones) may stay, they hold no run state.
            origin = getattr(sys.modules.get(name), "__file__", None) or ""
            if origin and not _installed(origin) and not origin.startswith(_REPO):
                sys.modules.pop(name, None)
        sys.argv = argv
        # A process's database connections end with it: the next command opens piw.sqlite afresh (and meets a
        # file that was replaced or damaged in between, as a new process would).
        from piw.store.db.database import close_databases

        close_databases()


def _installed(origin: str) -> bool:
    return any(part in origin for part in ("site-packages", "dist-packages", f"{os.sep}lib{os.sep}python"))


@contextlib.contextmanager
def _streams(stdin: str) -> Iterator[tuple[_Output, _Output]]:
    saved = sys.stdin, sys.stdout, sys.stderr
    out, err = _Output(), _Output()
    sys.stdin = io.StringIO(stdin)
    sys.stdout, sys.stderr = out, err
    try:
        yield out, err
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved


def run_piw(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    input: str | None = None,
    patches: Sequence[Callable[[], Callable[[], None]]] = (),
) -> subprocess.CompletedProcess[str]:
    """``piw ARGS`` in this process with exactly ``env`` as its environment; returns what a subprocess would.

    ``patches`` are callables applied just before the call; each returns the function that undoes it.
    """
    from piw.cli.main import main

    if any(key.startswith("PIW_TEST_KILL") for key in env):
        raise AssertionError("a run that SIGKILLs itself needs a real process: use cli.process(...)")
    argv = [str(arg) for arg in args]
    with _environment(env), _process_state(cwd), _streams(input or "") as (out, err):
        sys.argv = ["piw", *argv]
        undo = [patch() for patch in patches]
        try:
            main(argv)
            code: int = 0
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:  # a subprocess prints the traceback and exits 1
            traceback.print_exc(file=err)
            code = 1
        finally:
            for revert in reversed(undo):
                revert()
            with contextlib.suppress(Exception):
                sys.stdout.flush()
    return subprocess.CompletedProcess(["piw", *argv], code, out.getvalue(), err.getvalue())


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # sys.exit("message") prints the message and exits 1
    return 1


def replace_everywhere(module_name: str, attribute: str, value: Any) -> Callable[[], Callable[[], None]]:
    """A patch for :func:`run_piw`: ``module.attribute`` and every ``from module import attribute`` copy."""

    def apply() -> Callable[[], None]:
        original = getattr(sys.modules[module_name], attribute)
        for module in list(sys.modules.values()):
            if module is not None and getattr(module, attribute, None) is original:
                setattr(module, attribute, value)

        def revert() -> None:
            # Modules first imported during the call copied the replacement: put the original back there too.
            for module in list(sys.modules.values()):
                if module is not None and getattr(module, attribute, None) is value:
                    setattr(module, attribute, original)

        return revert

    return apply
