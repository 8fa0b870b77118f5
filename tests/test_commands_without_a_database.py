"""An operator's command run while the database is down (or DATABASE_URL names the wrong place)
says so in one line and exits 3, never with a traceback; exit 1 stays "the answer is no"
(check_sender: not ready) and 2 a mistake in what was asked (no such account, a bad argument)."""

from __future__ import annotations

import socket
import subprocess

import pytest

from tests.helpers import manage, subprocess_env

COMMANDS = {
    "campaign_report": ["campaign_report"],
    "check_sender": ["check_sender", "--account", "acme"],
    "check_tallies": ["check_tallies"],
    "export_sends": ["export_sends", "--campaign", "1"],
    "reconcile_unknown": ["reconcile_unknown", "--campaign", "1", "--message-ids", "/dev/null"],
    "seed_demo": ["seed_demo", "--subscribers", "1"],
}


@pytest.fixture(scope="module")
def nothing_listening() -> str:
    """A database URL whose port nobody listens on (bound, never listening: refused at once)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    yield f"postgres://postgres@127.0.0.1:{sock.getsockname()[1]}/nowhere"
    sock.close()


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_says_the_database_cannot_be_reached_and_exits_3(name, nothing_listening):
    result = subprocess.run(manage(*COMMANDS[name]), capture_output=True, text=True, timeout=60,
                            env=subprocess_env(DATABASE_URL=nothing_listening))
    assert result.returncode == 3, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("CommandError: The database cannot be reached")
    assert "DATABASE_URL" in lines[0]


@pytest.mark.django_db(transaction=True)
def test_check_sender_tells_an_unknown_account_from_a_sender_not_ready():
    result = subprocess.run(manage("check_sender", "--account", "nobody-has-this-slug"),
                            capture_output=True, text=True, timeout=60, env=subprocess_env())
    assert result.returncode == 2, result.stderr
    assert "There is no account 'nobody-has-this-slug'" in result.stderr
