"""Calling workflow code: a ``BaseException`` it raises is caught at the boundary, like any other error.

Authors write ``sys.exit()`` in a node, or subclass ``BaseException``; neither may end piw (a run would stay
``running`` with nothing recorded) or escape as a traceback. :func:`call_user` turns every ``BaseException``
except ``KeyboardInterrupt`` into :class:`WorkflowCodeExit`, an ordinary ``Exception`` that the executors'
``except Exception`` handlers already turn into a failed node. ``KeyboardInterrupt`` passes untouched: Ctrl-C and
SIGTERM park the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


class WorkflowCodeExit(Exception):
    """Workflow code raised a ``BaseException`` (``SystemExit``, a ``BaseException`` subclass); ``original`` is it."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(describe_base_exception(original))
        self.original = original


def call_user(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Call author code; a ``BaseException`` other than ``KeyboardInterrupt`` comes back as ``WorkflowCodeExit``."""
    try:
        return fn(*args, **kwargs)
    except (Exception, KeyboardInterrupt):
        raise
    except BaseException as exc:
        raise WorkflowCodeExit(exc).with_traceback(exc.__traceback__) from exc


def is_escape(exc: BaseException) -> bool:
    """True for a ``BaseException`` that must not unwind piw: anything but ``Exception`` and ``KeyboardInterrupt``."""
    return not isinstance(exc, Exception | KeyboardInterrupt)


def describe_base_exception(exc: BaseException) -> str:
    """One line for a ``BaseException`` from workflow code; ``sys.exit()`` is named as such."""
    if isinstance(exc, WorkflowCodeExit):
        exc = exc.original
    if isinstance(exc, SystemExit):
        return f"SystemExit: sys.exit({exc.code!r}) was called in workflow code; a step cannot exit piw"
    text = str(exc).strip()
    message = text.splitlines()[0] if text else ""
    name = type(exc).__name__
    return f"{name}: {message}" if message else name


def sibling_import_hint(exc: BaseException, workflow_file: Path) -> str:
    """For a failed import of a module that sits beside the workflow file: why it fails and how to import it.

    piw does not put a workflow's folder on ``sys.path`` (``docs/authoring.md``, "The file"): a sibling module is
    not part of the run's source identity, so ``piw resume`` cannot tell when it changed. The bare
    ``No module named 'helper'`` reads as if ``helper.py`` were missing; this says what is going on. Empty when
    the module is not beside the file (a typo or a package that is not installed keeps the plain error).
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return ""
    top = exc.name.partition(".")[0]
    folder = workflow_file.parent
    found = next((p for p in (folder / f"{top}.py", folder / top) if p.exists()), None)
    if found is None:
        return ""
    return (
        f". {found.name} is beside the workflow, but the workflow's folder ({folder}) is not on sys.path: define it "
        "in the workflow file, install it as a package, or add the folder first with "
        "sys.path.insert(0, str(Path(__file__).parent)) (from pathlib import Path); piw resume does not notice "
        "when such a module changes"
    )
