"""Real servers the tests start on loopback: gunicorn serving the project, and a TCP proxy in
front of PostgreSQL that a test can cut. (PgBouncer: growth.chaos.pgbouncer, which the chaos
harness uses too.)"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import requests
from django.db import connection

from growth.chaos.pgbouncer import wait_until_listening
from tests.helpers import ROOT, subprocess_env
from tests.smtp import free_port


class Gunicorn:
    """``gunicorn zylior.wsgi`` in production mode (DEBUG off) on a free loopback port."""

    def __init__(self, log: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "zylior.wsgi:application", "--bind",
             f"127.0.0.1:{self.port}", "--workers", "1", "--config", "python:zylior.gunicorn_conf"],
            cwd=ROOT, env=subprocess_env(DEBUG="false", **env), stdout=self._log,
            stderr=subprocess.STDOUT)
        wait_until_listening(self.port, process=self.process)

    def get(self, path: str, **kwargs) -> requests.Response:
        return requests.get(self.url + path, timeout=30, allow_redirects=False, **kwargs)

    def post(self, path: str, **kwargs) -> requests.Response:
        return requests.post(self.url + path, timeout=30, allow_redirects=False, **kwargs)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


class TcpProxy:
    """Forwards a loopback port to PostgreSQL (its TCP port or its Unix socket); ``cut()`` closes
    every connection and refuses new ones, as a database that went away; ``mend()`` undoes it."""

    def __init__(self) -> None:
        db = connection.settings_dict
        host = db["HOST"] or "/var/run/postgresql"
        if host.startswith("/"):
            self._target = (socket.AF_UNIX, os.path.join(host, f".s.PGSQL.{db['PORT'] or 5432}"))
        else:
            self._target = (socket.AF_INET, (host, int(db["PORT"] or 5432)))
        self.port = free_port()
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = []
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._server.settimeout(0.2)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._running = True
        self._thread.start()

    @property
    def database_url(self) -> str:
        db = connection.settings_dict
        return f"postgres://{db['USER']}@127.0.0.1:{self.port}/{db['NAME']}"

    def cut(self) -> None:
        self._cut.set()
        for sock in list(self._sockets):
            _hang_up(sock)
        self._sockets.clear()

    def mend(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._running = False
        self.cut()
        self._server.close()

    def _accept(self) -> None:
        while self._running:
            try:
                client, _ = self._server.accept()
            except (TimeoutError, OSError):
                continue
            if self._cut.is_set():
                client.close()
                continue
            family, address = self._target
            upstream = socket.socket(family, socket.SOCK_STREAM)
            try:
                upstream.connect(address)
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                _hang_up(sock)


def _hang_up(sock: socket.socket) -> None:
    """End the connection for both peers. A close() alone would not: the other direction's
    thread is blocked in recv() on one of these sockets, and on Linux that holds the socket
    open, unsignalled, for as long as the peer stays silent (PostgreSQL's session and the
    thread then outlived the test); shutdown() wakes it and sends the peer its end."""
    with contextlib.suppress(OSError):  # already hung up, from the other side or by cut()
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
