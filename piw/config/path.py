"""Where a home's ``config.toml`` is, named apart from :mod:`piw.config.settings` so that code which only needs
the path (an offline ``piw test`` case, a check whether the file exists) does not import the config models."""

from __future__ import annotations

from pathlib import Path


def config_path(piw_home: Path) -> Path:
    """The home's ``config.toml`` (``docs/providers.md``, "1. `$PIW_HOME/config.toml`")."""
    return piw_home / "config.toml"
