"""SIGKILL at each point of the cycle (the crash table of the design), then a clean restart."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from growth.models import Campaign, Send, SendCursor, SendLease
from tests.helpers import concurrently, manage, subprocess_env
from tests.scenarios import approved_campaign, rows_by_status, statuses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CRASHING = str(Path(__file__).with_name("crashing_sender.py"))
OPTIONS = ["--batch-size", "10", "--lease", "1", "--tick", "0.1"]
CHUNK = 5  # SENDER_HANDOFF_CHUNK's default


def env(smtp_server, idempotent: bool, protocol: str = "rows") -> dict[str, str]:
    return subprocess_env(EMAIL_URL=smtp_server.url, SENDER_BACKOFF_BASE="0.1",
                          SENDER_IDEMPOTENT_TRANSPORT="true" if idempotent else "false",
                          SENDER_PROTOCOL=protocol)


def crash_at(point: str, smtp_server, idempotent: bool = False, *options: str,
             protocol: str = "rows") -> None:
    result = subprocess.run([sys.executable, CRASHING, point, *OPTIONS, "--once", *options],
                            env=env(smtp_server, idempotent, protocol), capture_output=True,
                            timeout=60)
    assert result.returncode == -signal.SIGKILL, result.stdout.decode() + result.stderr.decode()


def restart(smtp_server, idempotent: bool = False, protocol: str = "rows") -> None:
    result = subprocess.run(manage("run_sender", *OPTIONS, "--until-idle"),
                            env=env(smtp_server, idempotent, protocol), capture_output=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr.decode()


def test_killed_during_the_build_then_rebuilt_once(smtp_server):
    campaign = approved_campaign(count=40)
    crash_at("during-build", smtp_server)
    campaign.refresh_from_db()
    assert campaign.status == "sending" and campaign.recipients_built_at is None
    assert Send.objects.count() == 0  # the insert died with its transaction
    restart(smtp_server)
    assert statuses(campaign) == {"sent": 40}
    assert set(smtp_server.handler.keys().values()) == {1}


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_killed_between_claim_and_send_nothing_is_in_doubt(smtp_server, idempotent):
    campaign = approved_campaign(count=25)
    crash_at("after-claim", smtp_server, idempotent)
    assert statuses(campaign) == {"sending": 10, "queued": 15}
    restart(smtp_server, idempotent)
    # never handed over, so queued again even with a plain receiver: no 'unknown'
    assert statuses(campaign) == {"sent": 25}
    keys = smtp_server.handler.keys()
    assert len(keys) == 25 and set(keys.values()) == {1}
    # plain: the rows were never handed over, so that attempt does not count; idempotent: they
    # were handed over with the claim (a resend is absorbed), so it does
    expected = {1, 2} if idempotent else {1}
    assert set(Send.objects.values_list("attempts", flat=True)) == expected


@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_killed_between_send_and_settle_plain_receiver_holds_the_chunk_as_unknown(smtp_server,
                                                                                  protocol):
    campaign = approved_campaign(count=25)
    crash_at("after-send", smtp_server, False, "--connections", "1", protocol=protocol)
    restart(smtp_server, protocol=protocol)
    counts = statuses(campaign)
    assert counts == {"unknown": CHUNK, "sent": 25 - CHUNK}
    keys = smtp_server.handler.keys()
    assert len(keys) == 25 and set(keys.values()) == {1}  # the unknown ones did arrive, once
    unknown = set(Send.objects.filter(status="unknown").values_list("job_id", flat=True))
    assert unknown <= set(keys)
    assert not SendLease.objects.exists()


def test_killed_between_send_and_settle_on_many_connections_leaves_one_chunk_each_in_doubt(
        smtp_server):
    """Three connections, a batch of six chunks: at the first settle, at most the three chunks
    handed over to the wires can have gone out. They are in doubt; the rest never left."""
    campaign = approved_campaign(count=40)
    crash_at("after-send", smtp_server, False, "--connections", "3", "--batch-size", "30")
    in_doubt = Send.objects.filter(status="sending", handed_over_at__isnull=False).count()
    assert CHUNK <= in_doubt <= 3 * CHUNK
    # the batch, and what is left (or the next batch too: the loop claims it once the wires
    # have taken every chunk of this one; none of it is handed over then)
    assert statuses(campaign) in ({"sending": 30, "queued": 10}, {"sending": 40})
    restart(smtp_server)
    counts = statuses(campaign)
    assert counts == {"unknown": in_doubt, "sent": 40 - in_doubt}
    keys = smtp_server.handler.keys()
    assert set(keys.values()) == {1}  # none twice
    unknown = set(Send.objects.filter(status="unknown").values_list("job_id", flat=True))
    sent = set(Send.objects.filter(status="sent").values_list("job_id", flat=True))
    assert sent <= set(keys) <= sent | unknown  # in doubt: arrived or not, never resent


def test_killed_between_send_and_settle_on_leases_on_many_connections_leaves_one_lease_each_in_doubt(
        smtp_server):
    """The lease protocol, a plain receiver on three connections: each wire's chunk is a lease
    of its own, handed over before it goes out. At the first settle at most the three leases on
    the wires can have gone out: their rows end 'unknown', the rest are sent once."""
    campaign = approved_campaign(count=40)
    crash_at("after-send", smtp_server, False, "--connections", "3", "--batch-size", "30",
             protocol="leases")
    handed = list(SendLease.objects.filter(handed_over_at__isnull=False))
    in_doubt = sum(len(lease.send_ids) for lease in handed)
    assert 1 <= len(handed) <= 3 and in_doubt == CHUNK * len(handed)
    assert rows_by_status(campaign) == {"queued": 40}  # the claims wrote no send row
    live = sum(len(lease.send_ids) for lease in SendLease.objects.filter(worker_id__isnull=False))
    assert statuses(campaign) == {"queued": 40 - live, "sending": live}  # as an operator sees it
    restart(smtp_server, protocol="leases")
    assert statuses(campaign) == {"unknown": in_doubt, "sent": 40 - in_doubt}
    keys = smtp_server.handler.keys()
    assert set(keys.values()) == {1}  # none twice
    unknown = set(Send.objects.filter(status="unknown").values_list("job_id", flat=True))
    sent = set(Send.objects.filter(status="sent").values_list("job_id", flat=True))
    assert sent <= set(keys) <= sent | unknown  # in doubt: arrived or not, never resent
    assert not SendLease.objects.exists()


@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_killed_between_send_and_settle_idempotent_receiver_absorbs_the_resend(smtp_server,
                                                                               protocol):
    campaign = approved_campaign(count=25)
    crash_at("after-send", smtp_server, True, "--connections", "1", protocol=protocol)
    restart(smtp_server, idempotent=True, protocol=protocol)
    assert statuses(campaign) == {"sent": 25}
    keys = smtp_server.handler.keys()
    assert set(keys) == set(Send.objects.values_list("job_id", flat=True))
    resent = [key for key, n in keys.items() if n > 1]
    assert len(resent) == 10  # the whole unsettled batch went out again, with the same keys
    assert all(n <= 2 for n in keys.values())


def test_two_workers_started_at_the_same_instant_start_and_build_once(smtp_settings, caplog):
    from growth.sending.transports.null import NullTransport
    from growth.sending.worker import Worker

    campaign = approved_campaign(count=300)
    caplog.set_level("INFO", logger="growth.sending.worker")
    concurrently(2, lambda i: Worker(worker_id=f"w{i}", batch_size=50,
                                     transport=NullTransport()).cycle())
    messages = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("campaign") and m.endswith(" started") for m in messages) == 1
    assert sum("recipients built" in m for m in messages) == 1
    assert Send.objects.filter(campaign=campaign).count() == 300
    campaign.refresh_from_db()
    assert campaign.status == Campaign.Status.SENDING


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_killed_between_claim_and_send_on_leases_the_lease_is_taken_over_whole(smtp_server,
                                                                               idempotent):
    """The lease protocol: the claim wrote no send row, so the crash leaves them queued in its
    leases (one, or a plain receiver's chunks), never handed over; on expiry each is freed and
    taken over whole, and each row is written once, by the settle of the claim that sent it."""
    campaign = approved_campaign(count=25)
    crash_at("after-claim", smtp_server, idempotent, protocol="leases")
    assert rows_by_status(campaign) == {"queued": 25}
    assert statuses(campaign) == {"queued": 15, "sending": 10}  # the dead worker's leases
    leases = list(SendLease.objects.all())
    assert len(leases) == (1 if idempotent else 10 // CHUNK)
    assert {lease.takeovers for lease in leases} == {0}
    assert sum(len(lease.send_ids) for lease in leases) == 10
    assert SendCursor.objects.get().claimed_to > 0
    restart(smtp_server, idempotent, protocol="leases")
    assert statuses(campaign) == {"sent": 25} and not SendLease.objects.exists()
    keys = smtp_server.handler.keys()
    assert len(keys) == 25 and set(keys.values()) == {1}
    assert set(Send.objects.values_list("attempts", flat=True)) == {1}
