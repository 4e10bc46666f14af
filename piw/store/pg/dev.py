"""``piw db dev``: a throwaway PostgreSQL in ``PIW_HOME/pg-dev``, so anyone can try many hosts on one machine
(``docs/many-machines.md``, "Trying it on one machine").

``initdb`` + ``pg_ctl`` from the machine's PostgreSQL binaries (``PATH``, ``pg_config --bindir``, or Debian's
``/usr/lib/postgresql/*/bin``), listening on 127.0.0.1 only (no Unix socket), on a free port chosen at the first
start and kept. The role ``piw`` has a generated password with scram authentication; it is kept in
``pg-dev/pgpass`` (0600), libpq's password file, so the URL this prints holds no password: set ``PGPASSFILE`` to
that file. PostgreSQL refuses to run as root: as root, the data directory belongs to the ``postgres`` user and lives
in a private directory under the system temp dir (``pg-dev/data`` links to it), since ``PIW_HOME`` is 0700.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from piw.errors import DatabaseUnavailable, StoreError

DEV_DIR = "pg-dev"
DEV_USER = "piw"
DEV_DATABASE = "piw"


def find_bindir() -> Path | None:
    """The folder of ``initdb``, ``pg_ctl`` and ``postgres``, or ``None`` when PostgreSQL is not installed."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(os.path.realpath(on_path)).parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            if found and (Path(found) / "initdb").exists():
                return Path(found)
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class DevServer:
    """Where the dev server lives and how to reach it."""

    folder: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://{DEV_USER}@127.0.0.1:{self.port}/{DEV_DATABASE}"

    @property
    def passfile(self) -> Path:
        return self.folder / "pgpass"

    @property
    def data(self) -> Path:
        """The data directory (as root, the real path behind ``pg-dev/data``: ``postgres`` cannot enter
        ``PIW_HOME``)."""
        return Path(os.path.realpath(self.folder / "data"))


def _run_as() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def _tool(bindir: Path, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*_run_as(), str(bindir / name), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if check and done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout).split())[-400:]
        raise StoreError(f"{name} failed (exit {done.returncode}): {detail}")
    return done


def _bindir() -> Path:
    bindir = find_bindir()
    if bindir is None:
        raise DatabaseUnavailable(
            "PostgreSQL is not installed here (no initdb on PATH, from pg_config or in /usr/lib/postgresql); "
            "install it (Debian: apt-get install postgresql) and run 'piw db dev' again."
        )
    return bindir


def _private_data_dir(folder: Path) -> Path:
    """As root: a directory the ``postgres`` user owns, outside the 0700 ``PIW_HOME``; ``folder/data`` links to it."""
    import pwd

    owner = pwd.getpwnam("postgres")
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / f"piw-pg-dev-{key}"
    target.mkdir(mode=0o700, exist_ok=True)
    os.chown(target, owner.pw_uid, owner.pw_gid)
    link = folder / "data"
    if not link.is_symlink():
        link.symlink_to(target / "data")
    return target / "data"


def _initdb(bindir: Path, folder: Path, password: str) -> None:
    data = _private_data_dir(folder) if os.geteuid() == 0 else folder / "data"
    if data.exists():
        shutil.rmtree(data)  # a first start that failed half-way (no password file): nothing of value in it
    pwfile = (data.parent if os.geteuid() == 0 else folder) / ".pw"
    pwfile.write_text(password + "\n", encoding="utf-8")
    os.chmod(pwfile, 0o600)
    if os.geteuid() == 0:
        import pwd

        owner = pwd.getpwnam("postgres")
        os.chown(pwfile, owner.pw_uid, owner.pw_gid)
    try:
        _tool(
            bindir,
            "initdb",
            "-D",
            str(data),
            "-U",
            DEV_USER,
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=reject",
            "-E",
            "UTF8",
            "--no-instructions",
        )
    finally:
        pwfile.unlink(missing_ok=True)


def _configure(server: DevServer) -> None:
    conf = server.data / "postgresql.conf"
    text = conf.read_text(encoding="utf-8")
    marker = "# piw db dev\n"
    head = text.split(marker, 1)[0]
    conf.write_text(
        head
        + marker
        + f"listen_addresses = '127.0.0.1'\nport = {server.port}\nunix_socket_directories = ''\n",
        encoding="utf-8",
    )


def _running(bindir: Path, server: DevServer) -> bool:
    if not server.data.is_dir() and not server.data.is_symlink():
        return False
    return _tool(bindir, "pg_ctl", "-D", str(server.data), "status", check=False).returncode == 0


def _port_file(folder: Path) -> Path:
    return folder / "port"


def start(home: Path) -> tuple[DevServer, bool]:
    """Start (creating on first use) the dev server of ``home``; ``(server, started)``, ``started`` false when it
    was already running."""
    bindir = _bindir()
    folder = home / DEV_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    port_file = _port_file(folder)
    port = int(port_file.read_text()) if port_file.is_file() else free_port()
    server = DevServer(folder, port)
    if _running(bindir, server):
        return server, False
    fresh = not (server.data / "PG_VERSION").exists() or not server.passfile.is_file()
    password = secrets.token_urlsafe(24)
    if fresh:
        _initdb(bindir, folder, password)
    for attempt in range(3):
        _configure(server)
        done = _tool(
            bindir,
            "pg_ctl",
            "-D",
            str(server.data),
            "-l",
            str(server.data / "server.log"),
            "-w",
            "-t",
            "60",
            "start",
            check=False,
        )
        if done.returncode == 0:
            break
        if attempt == 2:
            detail = " ".join((done.stderr or done.stdout).split())[-400:]
            raise StoreError(f"The dev PostgreSQL in {folder} did not start: {detail}")
        server = DevServer(folder, free_port())  # the kept port was taken meanwhile
    port_file.write_text(str(server.port), encoding="utf-8")
    if fresh:
        _write_passfile(server, password)
        _create_database(server, password)
    return server, True


def _write_passfile(server: DevServer, password: str) -> None:
    fd = os.open(server.passfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(f"127.0.0.1:*:*:{DEV_USER}:{password}\n")


def _create_database(server: DevServer, password: str) -> None:
    try:
        import psycopg
    except ImportError:
        raise DatabaseUnavailable(
            "The dev PostgreSQL started, but psycopg is not installed: pip install 'piw[postgres]'."
        ) from None
    url = f"postgresql://{DEV_USER}@127.0.0.1:{server.port}/postgres"
    with psycopg.connect(url, password=password, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {DEV_DATABASE}")


def stop(home: Path) -> DevServer | None:
    """Stop the dev server of ``home`` (``pg_ctl stop -m fast``); ``None`` when none was running."""
    bindir = _bindir()
    folder = home / DEV_DIR
    port_file = _port_file(folder)
    if not port_file.is_file():
        return None
    server = DevServer(folder, int(port_file.read_text()))
    if not _running(bindir, server):
        return None
    _tool(bindir, "pg_ctl", "-D", str(server.data), "-m", "fast", "-w", "stop")
    return server
