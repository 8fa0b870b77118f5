"""Debian's PgBouncer in transaction pooling mode, in front of the configured database, on a free
loopback port: for the tests and ``make chaos --pgbouncer``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from django.db import connection

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def available() -> bool:
    return os.access(PGBOUNCER, os.X_OK)


def wait_until_listening(port: int, timeout: float = 30.0, process=None) -> None:
    """Return once something accepts connections on the loopback ``port``; raise if ``process``
    exits first or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PgBouncer:
    """Debian's pgbouncer in transaction pooling mode, in front of the test database, on a free
    loopback port. It refuses to run as root: it runs as the owner of the server's socket
    directory (the embedded server's) or as ``postgres``."""

    def __init__(self, *, pool_size: int = 20) -> None:
        db = connection.settings_dict
        host = db["HOST"] or ""
        self.port = _free_port()
        user = "postgres"
        if host.startswith("/"):
            import pwd

            user = pwd.getpwuid(os.stat(host).st_uid).pw_name
            target = f"host={host}"
        else:
            target = f"host={host or '127.0.0.1'} port={db['PORT'] or 5432}"
        if db.get("PASSWORD"):
            target += f" password={db['PASSWORD']}"
        # its own directory, which the user it runs as can reach (a test's may be root's alone)
        workdir = Path(tempfile.mkdtemp(prefix="growth-pgbouncer-"))
        config = workdir / "pgbouncer.ini"
        config.write_text(f"""[databases]
* = {target} user={db['USER']}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
max_client_conn = 500
default_pool_size = {pool_size}
ignore_startup_parameters = extra_float_digits,options
logfile = {workdir}/pgbouncer.log
pidfile = {workdir}/pgbouncer.pid
""")
        shutil.chown(workdir, user)
        for path in workdir.iterdir():
            shutil.chown(path, user)
        args = [PGBOUNCER, config]
        if os.geteuid() == 0:
            args[1:1] = ["-u", user]
        # Its stderr into a file, never a pipe: pgbouncer logs there too, and once a pipe nobody
        # reads was full (64 KB: a database restart's flood of "server login has been failing"),
        # it blocked on the write and answered no client any more.
        stderr = workdir / "pgbouncer.stderr"
        with stderr.open("wb") as sink:
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=sink)
        self.log = workdir / "pgbouncer.log"
        try:
            wait_until_listening(self.port, timeout=20, process=self.process)
        except RuntimeError:
            raise RuntimeError(f"pgbouncer exited: {stderr.read_text(errors='replace')}") from None

    def database_url(self, name: str | None = None) -> str:
        db = connection.settings_dict
        return f"postgres://{db['USER']}@127.0.0.1:{self.port}/{name or db['NAME']}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        shutil.rmtree(self.log.parent, ignore_errors=True)
