"""A fleet of real ``run_sender`` processes that can be killed, terminated and restarted."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from django.conf import settings

MANAGE_PY = Path(settings.BASE_DIR) / "manage.py"


def database_url(settings_dict: dict) -> str:
    """The DATABASE_URL of a Django connection's settings (host may be a socket directory)."""
    host = quote(settings_dict["HOST"] or "", safe="")
    port = f":{settings_dict['PORT']}" if settings_dict["PORT"] else ""
    password = f":{quote(settings_dict['PASSWORD'])}" if settings_dict["PASSWORD"] else ""
    return f"postgres://{settings_dict['USER']}{password}@{host}{port}/{settings_dict['NAME']}"


@dataclass(frozen=True, slots=True)
class Event:
    at: float  # time.time()
    kind: str  # start | kill | sigterm | db-restart
    detail: str = ""


class Fleet:
    def __init__(self, count: int, *, env: dict[str, str], args: list[str], log_dir: Path,
                 seed: int = 0) -> None:
        self.count = count
        self.env = env
        self.args = args
        self.log_dir = log_dir
        self.events: list[Event] = []
        self.clean_exits: list[int] = []  # exit codes after SIGTERM
        self._processes: dict[str, subprocess.Popen] = {}
        self._log_paths: dict[str, Path] = {}
        self._started = 0
        self._rng = random.Random(seed)

    def start(self) -> None:
        for n in range(self.count):
            self._spawn(f"w{n}")

    def kill_random(self) -> str | None:
        """SIGKILL one running worker at random and start a new one in its place.

        Only a worker that has said "started" is chosen: on a busy machine, killing workers
        faster than they can start would test nothing but Python's start-up time.
        """
        running = [name for name in sorted(self._processes) if "started" in self._log(name)]
        if not running:
            return None
        name = self._rng.choice(running)
        process = self._processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.events.append(Event(time.time(), "kill", name))
        self._spawn(name)
        return name

    def terminate_one(self, timeout: float = 60.0) -> int | None:
        """SIGTERM one running worker, wait for its exit, start a new one; return its exit code.

        Only a worker that has said "started" is chosen (before that, Python's default SIGTERM
        handling applies, not ours); None if none has yet.
        """
        running = [name for name in sorted(self._processes) if "started" in self._log(name)]
        if not running:
            return None
        name = self._rng.choice(running)
        process = self._processes.pop(name)
        process.send_signal(signal.SIGTERM)
        self.events.append(Event(time.time(), "sigterm", name))
        code = process.wait(timeout=timeout)
        self.clean_exits.append(code)
        self._spawn(name)
        return code

    def stop(self, timeout: float = 60.0) -> None:
        for process in self._processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self._processes.values():
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._processes.clear()

    def alive(self) -> int:
        return sum(1 for p in self._processes.values() if p.poll() is None)

    def names(self) -> list[str]:
        return sorted(self._log_paths)

    def last_lines(self, name: str, count: int = 5) -> list[str]:
        """The last lines its current worker wrote, for a report of a run that went wrong."""
        return self._log(name).splitlines()[-count:]

    def _log(self, name: str) -> str:
        return self._log_paths[name].read_text(errors="replace")

    def _spawn(self, name: str) -> None:
        self._started += 1
        worker_id = f"{name}.{self._started}"
        self._log_paths[name] = self.log_dir / f"{worker_id}.log"
        log = self._log_paths[name].open("w")
        self._processes[name] = subprocess.Popen(
            [sys.executable, str(MANAGE_PY), "run_sender", "--worker-id", worker_id, *self.args],
            env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child has its own descriptor
        self.events.append(Event(time.time(), "start", worker_id))
