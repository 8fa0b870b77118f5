"""What the numbers were measured on."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import psutil
from django.db import connection

PACKAGES = ["Django", "psycopg", "procrastinate", "pgqueuer", "asyncpg", "aiosmtpd"]
PG_SETTINGS = ["shared_buffers", "synchronous_commit", "fsync", "max_wal_size", "autovacuum"]


def describe() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        pg_version = cursor.fetchone()[0]
        cursor.execute("SELECT name, current_setting(name) FROM unnest(%s::text[]) AS name",
                       [PG_SETTINGS])
        pg_settings = ", ".join(f"{name}={value}" for name, value in cursor.fetchall())
    versions = []
    for package in PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": f"{os.cpu_count()} logical, {psutil.cpu_count(logical=False)} physical",
        "ram": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "os": platform.platform(),
        "postgresql": f"{pg_version} ({'embedded' if _embedded() else 'DATABASE_URL'}; {pg_settings})",
        "python": sys.version.split()[0],
        "packages": ", ".join(versions),
        "commit": _git("describe", "--always", "--dirty"),
        "load": load(),
    }


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.2f} / {five:.2f} (1 / 5 min) on {os.cpu_count()} cores"


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _embedded() -> bool:
    from django.conf import settings

    return settings.EMBEDDED_DATABASE


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True,
                              cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
