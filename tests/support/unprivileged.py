"""Run a command that respects permission bits even when the tests run as root.

Root ignores a folder's missing write bit (``CAP_DAC_OVERRIDE``), so a home made read-only with ``chmod`` is still
writable to it. :func:`unprivileged` prefixes a command with ``setpriv`` dropping the two capabilities that bypass
file permissions: the process stays root (it reaches the venv under ``/root``) but reads and writes as the
permission bits say, as a user who made their own home read-only would. Without root nothing needs dropping.
"""

from __future__ import annotations

import os
import shutil
import subprocess

_CAPS = "-dac_override,-dac_read_search"


def can_drop_privileges() -> bool:
    """Whether :func:`unprivileged` makes permission bits binding here (not root, or root with ``setpriv``)."""
    if os.geteuid() != 0:
        return True
    if shutil.which("setpriv") is None:
        return False
    probe = subprocess.run([*_prefix(), "true"], capture_output=True, check=False)
    return probe.returncode == 0


def _prefix() -> list[str]:
    return ["setpriv", f"--inh-caps={_CAPS}", f"--bounding-set={_CAPS}"]


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` run without the capabilities that bypass permission bits (unchanged when not root)."""
    return [*_prefix(), *argv] if os.geteuid() == 0 else list(argv)
