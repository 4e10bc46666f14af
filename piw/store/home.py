"""Where runs live: ``PIW_HOME``, run ids and what counts as a bundle folder.

Split from :mod:`piw.store.bundle` so that a command can find the home and resolve a run reference without
importing the trace codec and the fold (``piw --help`` imports this module, not that one).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from piw.errors import HomeUnavailable

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def piw_home() -> Path:
    """``$PIW_HOME`` when set and non-empty, else ``~/.local/share/piw``; created 0700 and tightened.

    Tightening only removes group and other bits: a home its owner made read-only (or one on a read-only
    filesystem) stays as it is, so the read-only commands keep working there. A home that cannot be created is
    one clear error.
    """
    home = home_path()
    if not home.is_dir():
        try:
            home.mkdir(mode=0o700, parents=True)
        except OSError as exc:
            raise HomeUnavailable(
                f"PIW_HOME {home} cannot be created ({exc.strerror or exc}); set PIW_HOME to a folder you can "
                "write, or create it."
            ) from None
    tighten(home)
    tighten(home / "runs")
    return home


def home_path() -> Path:
    """Where ``PIW_HOME`` is, resolved, without creating or touching it."""
    configured = os.environ.get("PIW_HOME")
    home = Path(configured).expanduser() if configured else Path.home() / ".local" / "share" / "piw"
    return home.resolve()


def config_path(piw_home: Path) -> Path:
    """The home's ``config.toml`` (read by :mod:`piw.providers.config`; named here so that code which only needs
    the path does not import the config layer)."""
    return piw_home / "config.toml"


def tighten(path: Path) -> None:
    """Remove group and other permission bits (never add any); a path that cannot be changed is left alone."""
    try:
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            os.chmod(path, mode & 0o700)
    except OSError:
        pass  # missing, not ours, or on a read-only filesystem: nothing to tighten from here


def is_bundle_dir(path: Path) -> bool:
    """A run bundle: a valid run id holding a manifest or a trace (a lost manifest does not hide a run)."""
    return (
        not path.name.startswith(".")
        and RUN_ID_PATTERN.fullmatch(path.name) is not None
        and ((path / "manifest.json").is_file() or (path / "trace.ndjson").is_file())
    )
