"""The throwaway homes offline replays run in: where they go, and the empty run database each one starts with.

A replay needs no durability (the home is deleted after it), so the homes go to memory (``/dev/shm``) where the
system has it. Creating ``piw.sqlite`` imports sqlite-utils (and click, pluggy, dateutil: about 0.1 s of a
``piw test`` process) and runs ~100 statements; every fresh home would pay that. Instead the empty database is made
once and copied: it is kept in ``PIW_HOME/cache`` under a name that carries this piw's schema digest, so later
``piw test`` processes copy it without importing sqlite-utils at all. A cached file that is not exactly this
schema is ignored and made again (``bench/bench_piw_test.py``, ``docs/testing.md``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from pathlib import Path

from piw.errors import PiwError
from piw.store.db.database import DATABASE_NAME, close_database, holds_current_schema
from piw.store.db.schema import ddl_sha256
from piw.store.home import home_path

_lock = threading.Lock()
_templates: dict[Path, Path | None] = {}
"""The template found or made for each ``PIW_HOME`` this process used (``None``: none could be made)."""


def scratch_root() -> str | None:
    """Memory (``/dev/shm``) where the system has it, else the temporary folder (``None``)."""
    memory = Path("/dev/shm")
    return str(memory) if memory.is_dir() and os.access(memory, os.W_OK | os.X_OK) else None


def seed(home: Path) -> None:
    """Give a new scratch home its empty run database (nothing when no template could be made: piw creates it)."""
    template = _template_path()
    if template is None:
        return
    target = home / DATABASE_NAME
    shutil.copyfile(template, target)
    os.chmod(target, 0o600)


def _template_path() -> Path | None:
    home = home_path()
    with _lock:
        if (
            home not in _templates or not (_templates[home] or home).exists()
        ):  # (a template removed meanwhile)
            _templates[home] = _find_or_make(home)
        return _templates[home]


def _find_or_make(home: Path) -> Path | None:
    cached = home / "cache" / f"piw-test-home-{ddl_sha256()[:16]}.sqlite" if home.is_dir() else None
    if cached is not None and holds_current_schema(cached):
        return cached
    made = Path(tempfile.mkdtemp(prefix="piw-test-template-", dir=scratch_root()))
    try:
        from piw.store.db.run_database import open_run_database

        open_run_database(made)
        close_database(made)
        if not holds_current_schema(made / DATABASE_NAME):
            return None
        if cached is None:  # no home to keep it in: this process only
            atexit.register(shutil.rmtree, made, True)
            return made / DATABASE_NAME
        cached.parent.mkdir(mode=0o700, exist_ok=True)
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
        shutil.copyfile(made / DATABASE_NAME, partial)
        os.chmod(partial, 0o600)
        os.replace(
            partial, cached
        )  # atomic: a concurrent piw test reads the old file or the new one, never half
        return cached
    except (OSError, PiwError):  # a read-only home or a full disk: each replay creates its database itself
        return None
    finally:
        if cached is not None:
            shutil.rmtree(made, ignore_errors=True)
