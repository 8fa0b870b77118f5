"""Real ``run_sender`` processes, killed and restarted, against a real SMTP server on loopback."""

from __future__ import annotations

import signal
import subprocess
from collections import Counter

import pytest

from growth.models import Campaign, Send, SendCursor, SendLease
from tests.helpers import manage, subprocess_env, wait_for
from tests.scenarios import approved_campaign, statuses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

BATCH = 10
LEASE = 2  # seconds: recovery of a killed worker's rows comes quickly
HANDOFF_CHUNK = 5  # the default SENDER_HANDOFF_CHUNK


@pytest.fixture
def sender(smtp_server, tmp_path):
    processes = []

    def start(*args: str, idempotent: bool = False, name: str = "w",
              protocol: str = "rows") -> subprocess.Popen:
        env = subprocess_env(EMAIL_URL=smtp_server.url,
                             SENDER_IDEMPOTENT_TRANSPORT="true" if idempotent else "false",
                             SENDER_BACKOFF_BASE="0.1", SENDER_PROTOCOL=protocol)
        log = open(tmp_path / f"{name}-{len(processes)}.log", "w")  # noqa: SIM115 - closed below
        process = subprocess.Popen(
            manage("run_sender", "--batch-size", str(BATCH), "--tick", "0.1", "--lease",
                   str(LEASE), "--worker-id", f"{name}-{len(processes)}", *args),
            env=env, stdout=log, stderr=subprocess.STDOUT)
        processes.append((process, log))
        return process

    yield start
    for process, log in processes:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()



def job_ids(campaign: Campaign) -> set[str]:
    return set(Send.objects.filter(campaign=campaign).values_list("job_id", flat=True))


def by_status(campaign: Campaign, status: str) -> set[str]:
    return set(Send.objects.filter(campaign=campaign, status=status)
               .values_list("job_id", flat=True))


@pytest.mark.parametrize("protocol", ["rows", "leases"])
@pytest.mark.parametrize("connections", [1, 2])
def test_sigkill_mid_campaign_then_restart_plain_receiver(sender, smtp_server, connections,
                                                          protocol):
    campaign = approved_campaign(count=300)
    smtp_server.handler.delay = 0.005  # seconds per message: the kill lands mid-batch
    first = sender("--connections", str(connections), protocol=protocol)
    wait_for(lambda: len(smtp_server.handler.keys()) >= 80)
    first.kill()
    first.wait()

    assert sender("--until-idle", protocol=protocol).wait(timeout=120) == 0
    assert not SendLease.objects.exists()

    keys = smtp_server.handler.keys()
    sent, unknown = by_status(campaign, "sent"), by_status(campaign, "unknown")
    assert [key for key, n in keys.items() if n > 1] == []  # nobody got it twice
    assert sent | unknown == job_ids(campaign)  # lost: none
    assert sent <= set(keys)  # what we call sent, the server has
    assert set(keys) <= sent | unknown
    # only the chunks on the wires at the kill are in doubt, not the rest of their batch
    assert len(unknown) <= connections * HANDOFF_CHUNK
    campaign.refresh_from_db()
    assert campaign.status == "sent"


@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_sigkill_mid_campaign_then_restart_idempotent_receiver(sender, smtp_server, protocol):
    campaign = approved_campaign(count=300)
    smtp_server.handler.delay = 0.005
    first = sender(idempotent=True, protocol=protocol)
    wait_for(lambda: len(smtp_server.handler.keys()) >= 80)
    first.kill()
    first.wait()

    assert sender("--until-idle", idempotent=True, protocol=protocol).wait(timeout=120) == 0
    assert SendLease.objects.exists() is False
    assert SendCursor.objects.filter(campaign=campaign).exists() is (protocol == "leases")

    keys = smtp_server.handler.keys()
    assert statuses(campaign) == {"sent": 300}
    assert set(keys) == job_ids(campaign)  # a de-duplicating receiver has each key once
    resent = [key for key, n in keys.items() if n > 1]
    # only the batch in flight, and the one before it if its settle had not committed (the
    # settler records a batch while the next goes out), went out twice on the wire
    assert len(resent) <= 2 * BATCH


@pytest.mark.parametrize(("protocol", "idempotent"),
                         [("rows", False), ("leases", False), ("leases", True)])
def test_replicas_racing_on_one_campaign_send_each_recipient_once(sender, smtp_server, protocol,
                                                                  idempotent):
    campaign = approved_campaign(count=400)
    # Nobody dies here, so no lease may run out either: with the fixture's 2 s lease a slow
    # machine let one expire mid-batch, and a receiver that de-duplicates is sent its rows again,
    # as designed (a plain receiver's would end 'unknown')
    replicas = [sender("--until-idle", "--lease", "60", name=f"r{i}", protocol=protocol,
                       idempotent=idempotent) for i in range(3)]
    assert [p.wait(timeout=120) for p in replicas] == [0, 0, 0]
    keys = smtp_server.handler.keys()
    assert set(keys) == job_ids(campaign) and set(keys.values()) == {1}
    workers = Counter(Send.objects.values_list("claimed_by", flat=True))
    assert len(workers) >= 2  # the replicas really shared the work
    assert statuses(campaign) == {"sent": 400}


def test_sigterm_finishes_the_batch_in_hand_and_exits_cleanly(sender, smtp_server):
    campaign = approved_campaign(count=300)
    smtp_server.handler.delay = 0.01
    worker = sender()
    wait_for(lambda: len(smtp_server.handler.keys()) >= 25)
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    counts = statuses(campaign)
    assert "sending" not in counts  # the batch in hand was settled, not abandoned
    assert counts["sent"] == len(smtp_server.handler.keys()) < 300
