"""The worker loop, in process, against a real SMTP server on loopback."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections
from django.utils import timezone
from prometheus_client import REGISTRY

from growth.models import Campaign, RateLimit, RateLimitChange, Send, Suppression
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests.factories import AccountFactory, SubscriberFactory
from tests.scenarios import approved_campaign, pausing_once, run_worker, statuses
from tests.smtp import RecordingHandler

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick_retries(settings):
    settings.SENDER_BACKOFF_BASE = 0.05  # seconds
    settings.SENDER_BACKOFF_MAX = 0.2


@pytest.fixture(params=["rows", "leases"])
def protocol(request, settings) -> str:
    """The send protocol of the campaigns the worker builds (tests/test_worker_leases.py: what
    is the lease protocol's own)."""
    settings.SENDER_PROTOCOL = request.param
    return request.param


def test_a_campaign_runs_to_completion_each_recipient_once(smtp_settings, protocol):
    campaign = approved_campaign(count=60)
    run_worker()
    campaign.refresh_from_db()
    assert campaign.status == "sent"
    assert statuses(campaign) == {"sent": 60}
    keys = smtp_settings.handler.keys()
    assert len(keys) == 60 and set(keys.values()) == {1}
    assert set(keys) == set(Send.objects.values_list("job_id", flat=True))


def test_once_runs_a_single_cycle(smtp_settings):
    campaign = approved_campaign(count=10)
    run_worker(once=True, until_idle=False)
    assert statuses(campaign) == {"sent": 7, "queued": 3}


def test_a_4xx_is_retried_later_with_the_same_message_id(smtp_settings, protocol):
    campaign = approved_campaign(count=3)
    smtp_settings.handler.replies = {"person1@example.com": ["451 4.3.0 local error in processing",
                                                             "450 4.2.0 mailbox unavailable"]}
    run_worker()
    assert statuses(campaign) == {"sent": 3}
    row = Send.objects.get(email_lower="person1@example.com")
    assert row.attempts == 3
    tries = [mid for mid in smtp_settings.handler.attempts if f".{row.subscriber_id}@" in mid]
    assert len(tries) == 3 and len(set(tries)) == 1


def test_a_throttle_is_retried_without_an_attempt_and_slows_that_provider_only(smtp_settings, protocol,
                                                                              settings):
    settings.SENDER_THROTTLE_EVERY, settings.SENDER_THROTTLE_FLOOR = 0.05, 20.0
    campaign = approved_campaign(count=3)
    slow_down = "421 4.7.28 Our system has detected an unusual rate of unsolicited mail"
    smtp_settings.handler.replies = {"person1@example.com": [slow_down, slow_down]}
    run_worker()
    assert statuses(campaign) == {"sent": 3}
    row = Send.objects.get(email_lower="person1@example.com")
    assert row.attempts == 1  # two deferrals, one attempt
    tries = [mid for mid in smtp_settings.handler.attempts if f".{row.subscriber_id}@" in mid]
    assert len(tries) == 3 and len(set(tries)) == 1  # the same Message-ID each time
    (bucket,) = RateLimit.objects.all()  # the provider's own bucket, made by the throttle
    assert bucket.destination.name == "example.com" and bucket.per_second is None
    assert RateLimitChange.objects.filter(rate_limit=bucket, reason=f"throttled: {slow_down}",
                                          per_second__gte=20.0).exists()


@pytest.mark.parametrize("connections", [1, 4])
def test_a_worker_keeps_one_chunk_on_each_of_its_connections(smtp_settings, settings, connections, protocol):
    settings.SENDER_HANDOFF_CHUNK = 2
    smtp_settings.handler.delay = 0.05  # a relay that takes its time to answer
    campaign = approved_campaign(count=24)
    run_worker(batch_size=12, connections=connections)
    assert statuses(campaign) == {"sent": 24}
    assert set(smtp_settings.handler.keys().values()) == {1}
    # the relay answered as many messages at once as the worker had connections, never more
    assert smtp_settings.handler.most_at_once == connections


def test_a_5xx_fails_the_row_with_the_error_and_the_campaign_still_finishes(smtp_settings, protocol):
    campaign = approved_campaign(count=3)
    smtp_settings.handler.replies = {"person2@example.com": ["550 5.1.1 mailbox unknown"]}
    run_worker()
    assert statuses(campaign) == {"sent": 2, "failed": 1}
    failed = Send.objects.get(status="failed")
    assert failed.email_lower == "person2@example.com" and "550" in failed.last_error
    campaign.refresh_from_db()
    assert campaign.status == "sent"


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_relay_that_refuses_our_login_pauses_the_campaign_and_loses_nothing(
        smtp_settings, settings, protocol, idempotent):
    """A wrong password is the operator's to mend: no recipient is failed or counted an
    attempt for it, however long it takes, and once mended and resumed each gets it once."""
    settings.SENDER_IDEMPOTENT_TRANSPORT = idempotent
    settings.SENDER_RETRY_FOR = 0.2  # a row's failures past this are final; a refusal is not one
    smtp_settings.require_login("growth", "right")
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "growth", "wrong"
    campaign = approved_campaign(count=20)
    run_worker(batch_size=10)  # until idle: a paused campaign is not work
    campaign.refresh_from_db()
    assert campaign.status == "paused"
    assert campaign.pause_reason == ("The transport refused us: "
                                     "535 5.7.8 Authentication credentials invalid")
    assert statuses(campaign) == {"queued": 20} and not smtp_settings.handler.accepted
    rows = Send.objects.filter(campaign=campaign)
    assert {(r.attempts, r.first_attempt_at, r.handed_over_at) for r in rows} == {(0, None, None)}
    time.sleep(0.3)  # past the retry horizon of any attempt: none was made
    settings.EMAIL_HOST_PASSWORD = "right"
    assert Campaign.objects.resume(campaign_id=campaign.id)
    run_worker(batch_size=10)
    assert statuses(campaign) == {"sent": 20}
    assert set(smtp_settings.handler.keys().values()) == {1}
    assert len(smtp_settings.handler.keys()) == 20


@pytest.mark.parametrize("connections", [1, 3])
def test_a_refused_login_is_tried_once_a_connection_not_once_a_chunk(smtp_settings, settings,
                                                                     protocol, connections):
    """Each failed login counts against us at the relay (fail2ban, a provider's lockout): a
    refusal stops the batch's connections taking more chunks, and what none took goes back."""
    settings.SENDER_HANDOFF_CHUNK = 5
    smtp_settings.require_login("growth", "right")
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "growth", "wrong"
    campaign = approved_campaign(count=40)
    run_worker(batch_size=20, connections=connections)
    campaign.refresh_from_db()
    assert campaign.status == "paused"
    assert statuses(campaign) == {"queued": 40}
    assert set(Send.objects.values_list("attempts", "handed_over_at")) == {(0, None)}
    # smtplib tries both mechanisms the relay offers on each login
    assert 2 <= len(smtp_settings.logins) <= 2 * connections


def test_a_sender_the_relay_refuses_pauses_that_tenants_campaign_alone(smtp_settings, settings,
                                                                       protocol):
    settings.SENDER_RETRY_FOR = 0.2  # a row's failures past this are final; a refusal is not one
    refused = approved_campaign(count=8, account=AccountFactory(from_email="news@unverified.example"))
    other = approved_campaign(count=8)

    class RefusesOneSender(RecordingHandler):
        async def handle_MAIL(self, server, session, envelope, address, mail_options):
            if address.endswith("@unverified.example"):
                return "553 5.7.1 <news@unverified.example>: Sender address rejected: not owned by user"
            envelope.mail_from = address
            return "250 OK"

    smtp_settings.stop()
    smtp_settings.handler = RefusesOneSender()
    smtp_settings.start()
    run_worker(batch_size=4)
    refused.refresh_from_db()
    assert refused.status == "paused" and refused.pause_reason.startswith(
        "The transport refused us: 553 5.7.1 <news@unverified.example>: Sender address rejected")
    assert statuses(refused) == {"queued": 8}
    assert statuses(other) == {"sent": 8}
    assert len(smtp_settings.handler.keys()) == 8


class RefusesAtRcpt(RecordingHandler):
    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply = reply

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        return self.reply.format(sender=envelope.mail_from, recipient=address)


class RefusesAtData(RecordingHandler):
    def __init__(self, reply: str) -> None:
        super().__init__()
        self.reply = reply

    async def handle_DATA(self, server, session, envelope):
        return self.reply


@pytest.mark.parametrize("relay", [
    # Postfix's smtpd_delay_reject (its default) answers sender and client checks at RCPT TO
    RefusesAtRcpt("553 5.7.1 <{sender}>: Sender address rejected: not owned by user growth"),
    RefusesAtRcpt("554 5.7.1 <unknown[192.0.2.7]>: Client host rejected: Access denied"),
    RefusesAtRcpt("554 5.7.1 <{recipient}>: Relay access denied"),
    RefusesAtData("554 Message rejected: Email address is not verified. The following identities "
                  "failed the check in region US-EAST-1: news@tenant.example"),  # Amazon SES
    RefusesAtData("554 5.2.0 STOREDRV.Submission.Exception:SendAsDeniedException.MapiException"
                  "SendAsDenied; Failed to process message due to a permanent exception"),  # M365
], ids=["postfix-sender", "postfix-client", "postfix-relay", "ses-unverified", "m365-send-as"])
def test_a_relay_that_refuses_us_after_mail_from_pauses_the_campaign_and_fails_nobody(
        smtp_settings, settings, protocol, relay):
    settings.SENDER_RETRY_FOR = 0.2  # a row's failures past this are final; a refusal is not one
    smtp_settings.stop()
    smtp_settings.handler = relay
    smtp_settings.start()
    campaign = approved_campaign(count=6)
    run_worker(batch_size=6)
    campaign.refresh_from_db()
    assert (campaign.status, statuses(campaign)) == ("paused", {"queued": 6})
    assert campaign.pause_reason.startswith("The transport refused us: 55")


def test_a_mail_server_down_at_start_is_waited_for(smtp_settings, settings):
    campaign = approved_campaign(count=5)
    smtp_settings.stop()
    threading.Timer(0.5, smtp_settings.start).start()
    settings.SENDER_MAX_ATTEMPTS = 50
    run_worker()
    assert statuses(campaign) == {"sent": 5}
    assert len(smtp_settings.handler.keys()) == 5


def test_an_opt_out_during_the_send_is_honoured(smtp_settings, protocol):
    campaign = approved_campaign(count=30)
    late = "person25@example.com"

    class OptOutAfterFirstBatch(DjangoMailTransport):
        def send_bulk(self, deliveries):
            if not Suppression.objects.exists():
                Suppression.objects.suppress(account_id=campaign.account_id, email_lower=late,
                                             reason="unsubscribed")
            return super().send_bulk(deliveries)

    run_worker(transport=OptOutAfterFirstBatch())
    assert Send.objects.get(email_lower=late).status == "suppressed"
    assert statuses(campaign) == {"sent": 29, "suppressed": 1}
    assert all(a.recipient != late for a in smtp_settings.handler.accepted)


def test_a_paused_campaign_waits_and_resumes(smtp_settings, protocol):
    campaign = approved_campaign(count=20)

    run_worker(transport=pausing_once(campaign))  # until-idle: a paused campaign is not work
    # what the worker had claimed when the pause landed finishes: the batch on the wires, and
    # the next one if it was claimed meanwhile (the loop claims while the wires finish a batch)
    sent = statuses(campaign)["sent"]
    assert sent in (7, 14) and statuses(campaign) == {"sent": sent, "queued": 20 - sent}
    Campaign.objects.resume(campaign_id=campaign.id)
    run_worker()
    assert statuses(campaign) == {"sent": 20}
    assert len(smtp_settings.handler.keys()) == 20


def test_a_lost_database_connection_is_survived_without_losing_a_settle(smtp_settings, protocol):
    campaign = approved_campaign(count=21)

    class KillMyConnection(DjangoMailTransport):
        kills = 0

        def send_bulk(self, deliveries):
            outcomes = super().send_bulk(deliveries)
            if self.kills < 2:  # the database connection dies between send and settle
                self.kills += 1
                pid = connection.connection.info.backend_pid
                killer = threading.Thread(target=_terminate, args=(pid,))
                killer.start()
                killer.join()
            return outcomes

    # one connection: the transport runs on the worker's thread, whose database connection dies
    run_worker(transport=KillMyConnection(), connections=1)
    assert statuses(campaign) == {"sent": 21}
    assert set(smtp_settings.handler.keys().values()) == {1}


def _terminate(pid: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    connections.close_all()


def test_until_idle_waits_for_a_backoff_but_not_for_a_future_campaign(smtp_settings):
    later = approved_campaign(count=2, scheduled_for=timezone.now() + timezone.timedelta(hours=1))
    now = approved_campaign(count=2)
    smtp_settings.handler.replies = {"person0@example.com": ["451 later"] * 2}
    run_worker()
    assert statuses(now) == {"sent": 2}
    later.refresh_from_db()
    assert later.status == "approved"


def test_stop_ends_the_loop_after_the_batch_in_hand(smtp_settings, protocol):
    campaign = approved_campaign(count=50)

    class StopAfterFirstBatch(DjangoMailTransport):
        def send_bulk(self, deliveries):
            worker.stop()
            return super().send_bulk(deliveries)

    worker = Worker(batch_size=7, tick=0.05, lease=30, transport=StopAfterFirstBatch())
    worker.run()
    # the batch on the wires, and the next if the loop claimed it before the stop (see the pause)
    sent = statuses(campaign)["sent"]
    assert sent in (7, 14) and statuses(campaign) == {"sent": sent, "queued": 50 - sent}


def messages_counted(outcome: str, transport: str) -> float:
    return REGISTRY.get_sample_value("growth_messages_total",
                                     {"outcome": outcome, "transport": transport}) or 0.0


def test_a_stop_lets_only_the_chunks_on_the_wires_go_out_and_gives_the_rest_back(
        smtp_settings, protocol, settings):
    """A plain receiver's batch goes out chunk by chunk: a stop (SIGTERM) waits for the chunk on
    each wire, not for the batch, which a relay slow to answer could make minutes."""
    settings.SENDER_HANDOFF_CHUNK = 3
    campaign = approved_campaign(count=30)

    class StopOnTheFirstChunk(DjangoMailTransport):
        def send_bulk(self, deliveries):
            worker.stop()
            return super().send_bulk(deliveries)

    worker = Worker(batch_size=30, tick=0.05, lease=30, transport=StopOnTheFirstChunk(),
                    connections=1)
    given_back = messages_counted("given back", worker.transport.label)
    worker.run()
    assert statuses(campaign) == {"sent": 3, "queued": 27}
    assert messages_counted("given back", worker.transport.label) - given_back == 27
    assert len(smtp_settings.handler.keys()) == 3
    assert set(Send.objects.filter(campaign=campaign, status="queued")
               .values_list("attempts", flat=True)) == {0}


def test_a_hard_bounce_suppresses_the_address_for_that_tenant_only(smtp_settings, other_tenant, protocol):
    campaign = approved_campaign(count=4)
    elsewhere = SubscriberFactory(segment__account=other_tenant, email="person1@example.com")
    smtp_settings.handler.replies = {"person1@example.com": ["550 5.1.1 No such user"],
                                     "person2@example.com": ["550 5.7.1 Rejected by policy"]}
    run_worker()
    assert statuses(campaign) == {"sent": 2, "failed": 2}
    errors = dict(Send.objects.filter(status="failed").values_list("email_lower", "last_error"))
    assert errors == {"person1@example.com": "550 5.1.1 No such user",
                      "person2@example.com": "550 5.7.1 Rejected by policy"}
    suppressed = Suppression.objects.values_list("account_id", "email_lower", "reason", "campaign_id")
    assert list(suppressed) == [(campaign.account_id, "person1@example.com", "bounced", campaign.id)]
    assert not Suppression.objects.filter(account=other_tenant).exists()
    elsewhere.refresh_from_db()
    assert elsewhere.status == "confirmed"


def test_an_address_already_suppressed_keeps_its_first_reason(smtp_settings):
    campaign = approved_campaign(count=2)
    smtp_settings.handler.replies = {"person0@example.com": ["550 5.2.1 Mailbox disabled"]}

    class OptOutOnTheWire(DjangoMailTransport):
        def send_bulk(self, deliveries):  # the recipient opts out while the message is on the wire
            Suppression.objects.suppress(account_id=campaign.account_id,
                                         email_lower="person0@example.com", reason="unsubscribed")
            return super().send_bulk(deliveries)

    run_worker(transport=OptOutOnTheWire())
    assert Send.objects.get(email_lower="person0@example.com").status == "failed"
    assert list(Suppression.objects.values_list("email_lower", "reason", "campaign_id")) == [
        ("person0@example.com", "unsubscribed", None)]


def test_a_failing_suppression_never_holds_up_the_settle(smtp_settings, monkeypatch, caplog):
    from django.db import OperationalError

    def database_gone(send_ids):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(Suppression.objects, "suppress_bounced", database_gone)
    campaign = approved_campaign(count=3)
    smtp_settings.handler.replies = {"person1@example.com": ["550 5.1.1 No such user"]}
    run_worker()
    assert statuses(campaign) == {"sent": 2, "failed": 1}
    campaign.refresh_from_db()
    assert campaign.status == "sent"
    assert not Suppression.objects.exists()
    assert "1 hard-bounced addresses not suppressed" in caplog.text


@pytest.mark.parametrize(("error", "hard"), [
    ("550 5.1.1 No such user", True),
    ("550 5.1.10 Recipient address has null MX", True),
    ("553 5.1.3 Bad recipient address syntax", True),
    ("550 5.2.1 Mailbox disabled", True),
    ("552 5.2.2 Mailbox full", False),
    ("550 5.7.1 Rejected by policy", False),
    ("553 5.1.8 Bad sender's system address", False),  # the sender's problem, not the address's
    ("450 4.1.1 Try again later", False),
    ("550 No such user", False),  # no enhanced status: nothing certain
    ("cannot render: TemplateSyntaxError: 550 5.1.1", False),
    ("provider refused: rejected", False),
])
def test_which_smtp_refusals_are_hard_bounces(error, hard):
    from growth.feedback.bounces import smtp_hard_bounce

    assert smtp_hard_bounce(error) is hard


@pytest.mark.parametrize(("transport", "lanes"), [
    (lambda: DjangoMailTransport(backend="django.core.mail.backends.smtp.EmailBackend"), 3),
    (lambda: DjangoMailTransport(backend="django.core.mail.backends.locmem.EmailBackend"), 1),
    (lambda: DjangoMailTransport(backend="django.core.mail.backends.console.EmailBackend"), 1),
    (NullTransport, 1),
])
def test_a_transport_that_waits_on_no_network_gets_one_connection(transport, lanes):
    # more lanes would only take turns on the GIL: with the null transport, 4 of them made a
    # worker 0.78-0.90x as fast as one (docs/one-write-per-recipient.md)
    worker = Worker(transport=transport(), connections=3)
    assert worker.connections == lanes and worker._wires.count == lanes


def test_a_worker_runs_again_after_a_run_on_its_connections(smtp_settings):
    campaign = approved_campaign(count=30)
    worker = Worker(batch_size=5, tick=0.05, lease=30, once=True, connections=3)
    for _ in range(10):  # one cycle a run; each run ends by closing the connections
        worker.run()
    assert statuses(campaign) == {"sent": 30}
    campaign.refresh_from_db()
    assert not campaign.pause_reason


def test_run_sender_puts_its_start_up_objects_out_of_the_collectors_sight(monkeypatch):
    """Django and the drivers, loaded at start-up, live as long as the process: frozen before
    the loop starts, they are not walked by every full collection the messages set off."""
    import gc

    from django.core.management import call_command

    frozen_when_the_loop_starts = []
    monkeypatch.setattr(Worker, "run",
                        lambda worker: frozen_when_the_loop_starts.append(gc.get_freeze_count()))
    gc.unfreeze()
    try:
        call_command("run_sender", "--once")
    finally:
        gc.unfreeze()  # the test process's own objects go back to the collector
    assert frozen_when_the_loop_starts and frozen_when_the_loop_starts[0] > 10_000


def test_a_wire_that_stalled_past_its_lease_does_not_send_rows_its_worker_claimed_again(
        smtp_settings, settings):
    """Plain receiver, row protocol, two connections. One wire stalls (rendering) past the lease
    before handing its chunk over; the worker's own housekeeping recovers those rows (never
    handed over: queued, their attempt given back) and its next claim takes them again, at the
    same attempt, and the other wire sends them. The stalled wire's hand-over must find them no
    longer its claim's: each message reaches the relay once."""
    settings.SENDER_PROTOCOL = "rows"
    settings.SENDER_IDEMPOTENT_TRANSPORT = False
    settings.SENDER_HANDOFF_CHUNK = 5
    settings.SENDER_BACKOFF_BASE, settings.SENDER_BACKOFF_MAX = 0.05, 0.2
    smtp_settings.handler.delay = 0.25  # a relay answering in a quarter of a second
    campaign = approved_campaign(count=10)
    stalled = threading.Event()
    last_chunk: list[int] = []

    class StallingWorker(Worker):
        def _render(self, renderer, rows):
            if not stalled.is_set() and sorted(row.id for row in rows) == last_chunk:
                stalled.set()
                time.sleep(2.5)  # past the lease (1 s): recovered, then claimed again
            return Worker._render(renderer, rows)

    worker = StallingWorker(batch_size=10, tick=0.05, lease=1, until_idle=True, connections=2)
    worker._start_due()
    worker._build()
    last_chunk.extend(sorted(Send.objects.filter(campaign=campaign)
                             .values_list("id", flat=True))[-5:])
    worker.run()
    assert stalled.is_set()
    assert set(smtp_settings.handler.keys().values()) == {1}
    assert len(smtp_settings.handler.keys()) == 10
    assert statuses(campaign) == {"sent": 10}


@pytest.mark.parametrize("protocol", ["rows", "leases"])
@pytest.mark.parametrize("idempotent", [False, True])
def test_a_message_whose_answer_was_lost_after_its_end_is_unknown_to_a_plain_receiver(
        smtp_settings, settings, protocol, idempotent):
    """The relay took person1's message whole and the connection dropped before its answer: it
    may have been accepted. To a plain relay it is not sent again: its row is 'unknown', for an
    operator. A relay that de-duplicates gets it again under the same key."""
    settings.SENDER_PROTOCOL = protocol
    settings.SENDER_IDEMPOTENT_TRANSPORT = idempotent
    settings.SENDER_BACKOFF_BASE, settings.SENDER_BACKOFF_MAX = 0.05, 0.2
    handler = smtp_settings.handler
    dropped: list[str] = []
    answer = type(handler).handle_DATA

    async def drop_once(server, session, envelope):
        if not dropped and "person1@example.com" in [r.lower() for r in envelope.rcpt_tos]:
            dropped.append(envelope.rcpt_tos[0])
            server.transport.abort()  # after the final dot, before the answer
            return "421 4.4.2 gone"
        return await answer(handler, server, session, envelope)

    handler.handle_DATA = drop_once
    campaign = approved_campaign(count=3)
    made_unknown = unknown_in_metrics()
    run_worker(connections=1)
    made_unknown = unknown_in_metrics() - made_unknown
    row = Send.objects.get(campaign=campaign, email_lower="person1@example.com")
    assert dropped
    if idempotent:
        assert (row.status, row.attempts) == ("sent", 2)
        assert statuses(campaign) == {"sent": 3}
        assert made_unknown == 0
    else:
        assert row.status == "unknown"
        assert "no reply after the message's end" in row.last_error
        assert statuses(campaign) == {"sent": 2, "unknown": 1}
        assert made_unknown == 1  # what an operator's alert on growth_messages_total counts
        assert handler.keys()[row.job_id] == 0  # this relay had not kept it: nobody can know


def unknown_in_metrics() -> float:
    """growth_messages_total{outcome="unknown"} summed over the transports."""
    from prometheus_client import REGISTRY

    return sum(sample.value for metric in REGISTRY.collect() if metric.name == "growth_messages"
               for sample in metric.samples
               if sample.name == "growth_messages_total" and sample.labels["outcome"] == "unknown")
