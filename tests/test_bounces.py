"""Bounces by mail (VERP): parsing DSNs, ARF reports and auto-replies from the fixtures in
tests/fixtures/dsn/ (see its README), recording them through the ESP feedback path, the LMTP/SMTP
server, the IMAP reader against a fake imap-tools MailBox, and end to end: a campaign sent
through a real SMTP server on loopback, its bounces handed to ``run_bounces --lmtp`` in a
subprocess.
"""

from __future__ import annotations

import base64
import email
import logging
import re
import signal
import smtplib
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from email.message import Message
from io import StringIO
from pathlib import Path
from string import Template
from types import SimpleNamespace

import pytest
from anymail.signals import AnymailTrackingEvent, EventType
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connections
from django.utils import timezone

from growth.bounces import arf, autoreply, dsn, mailbox, mime
from growth.bounces.lmtp import MAX_RECIPIENTS, BounceServer
from growth.bounces.record import Outcome, process
from growth.feedback.bounces import dsn_hard_bounce, dsn_status
from growth.feedback.events import Handled, handle_event
from growth.job_ids import job_id
from growth.models import Account, Campaign, FeedbackEvent, Send, SendVerdict, Subscriber, Suppression
from growth.sending import verp
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import concurrently, manage, subprocess_env
from tests.scenarios import audience, finished_campaign_with_unknown_rows
from tests.smtp import free_port

FIXTURES = Path(__file__).parent / "fixtures" / "dsn"
BOUNCE_DOMAIN = "bounces.zylior.example"
FBL_TO = f"fbl@{BOUNCE_DOMAIN}"
ADDRESS = "Some.One@Example.NET"
EMAIL_LOWER = "some.one@example.net"

HARD = ["postfix-hard", "exim-hard", "gmail-hard", "outlook-hard", "yahoo-hard"]


@pytest.fixture(autouse=True)
def bounce_settings(settings):
    settings.BOUNCE_DOMAIN = BOUNCE_DOMAIN
    settings.BOUNCE_LOCAL_PART = "bounces"
    settings.BOUNCE_SOFT_LIMIT = 3
    settings.BOUNCE_SOFT_WINDOW_DAYS = 7


@pytest.fixture(autouse=True)
def no_unexpected_errors(caplog):
    """A recording that hides a programming error behind an outcome would pass other checks."""
    caplog.set_level(logging.INFO, logger="growth")
    yield
    errors = [r for r in caplog.get_records("call")
              if r.name.startswith("growth.") and r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


_counter = iter(range(10**6))


def bounce(name: str, **values: str) -> bytes:
    """A fixture with its placeholders filled; each call a new DSN_ID (a new report)."""
    defaults = {"BOUNCE_TO": f"bounces@{BOUNCE_DOMAIN}", "RECIPIENT": ADDRESS,
                "MESSAGE_ID": "<campaign.1.1@growth.zylior.example>", "SUBJECT": "Hello",
                "DSN_ID": f"dsn{next(_counter)}", "FBL_TO": FBL_TO, "BOUNCE_DOMAIN": BOUNCE_DOMAIN}
    text = Template((FIXTURES / f"{name}.eml").read_text()).safe_substitute({**defaults, **values})
    return text.encode()


def parsed(name: str, **values: str) -> email.message.Message:
    return mime.read(bounce(name, **values))


# --- parsing, without the database ------------------------------------------------------------


@pytest.mark.parametrize(("name", "structured", "action", "status", "hard"), [
    ("postfix-hard", True, "failed", "5.1.1", True),
    ("postfix-soft", True, "failed", "5.2.2", False),
    ("postfix-delayed", True, "delayed", "4.7.1", False),
    ("exim-hard", True, "failed", "5.1.1", True),  # Status 5.0.0; the reply says 5.1.1
    ("gmail-hard", True, "failed", "5.1.1", True),
    ("outlook-hard", True, "failed", "5.1.10", True),
    ("yahoo-hard", False, "failed", "5.1.1", True),  # a plain-text notice, no DSN
    ("wrong-recipient", True, "failed", "5.1.1", True),
])
def test_each_mta_s_report_is_read(name, structured, action, status, hard):
    message = parsed(name)
    report = dsn.parse(message) or dsn.parse_text(message)

    assert report is not None and report.structured is structured
    [recipient] = report.recipients
    expected = "someone-else@example.org" if name == "wrong-recipient" else ADDRESS
    assert recipient.recipient == expected
    assert recipient.action == action
    assert dsn_status(recipient.status, recipient.diagnostic_code) == status
    assert dsn_hard_bounce(recipient.status, recipient.diagnostic_code) is hard
    assert arf.parse(message) is None


def test_the_dsn_fields_are_read_whole():
    report = dsn.parse(parsed("gmail-hard"))
    [recipient] = report.recipients
    assert report.reporting_mta == "dns; googlemail.com"
    assert report.arrival_date is not None and recipient.last_attempt is not None
    # a folded Diagnostic-Code comes back as one line
    assert recipient.diagnostic_code.startswith("smtp; The email account that you tried to reach")
    assert recipient.diagnostic_code.endswith("- gsmtp") and "\n" not in recipient.diagnostic_code

    exim = dsn.parse(parsed("exim-hard")).recipients[0]
    assert (exim.status, exim.original_recipient) == ("5.0.0", None)
    postfix = dsn.parse(parsed("postfix-hard"))
    assert postfix.recipients[0].original_recipient == ADDRESS
    assert postfix.recipients[0].remote_mta == "dns; mx1.example.net"


@pytest.mark.parametrize(("status", "diagnostic", "effective", "hard"), [
    ("5.1.1", "", "5.1.1", True),
    ("5.0.0", "smtp; 550 5.1.1 <x@example.com>: User unknown", "5.1.1", True),
    ("5.0.0", "smtp; 550 5.7.1 Message rejected as spam", "5.7.1", False),
    ("5.0.0", "smtp; 554 delivery error: dd This user doesn't have an account", "5.0.0", False),
    ("", "smtp; 550-5.1.1 The email account that you tried to reach does not exist", "5.1.1", True),
    ("", "smtp; 5.1.1 <x@example.com>... User unknown", "5.1.1", True),
    ("4.0.0", "smtp; 550 5.1.1 unknown", "4.0.0", False),  # a class the reply contradicts
    ("5.1.10", "", "5.1.10", True),  # Exchange Online's RESOLVER.ADR.RecipientNotFound
    ("5.2.1", "", "5.2.1", True),  # mailbox disabled
    ("5.2.2", "", "5.2.2", False),  # mailbox full
    ("5.1.7", "", "5.1.7", False),  # the sender's address, not the recipient's
    ("5.5.0", "smtp; 550 5.5.0 Requested action not taken: mailbox unavailable", "5.5.0", False),
    ("4.4.7", "", "4.4.7", False),
    ("2.0.0", "", "2.0.0", False),
])
def test_which_status_is_a_hard_bounce(status, diagnostic, effective, hard):
    assert dsn_status(status, diagnostic) == effective
    assert dsn_hard_bounce(status, diagnostic) is hard


def test_a_global_delivery_status_part_and_a_transfer_encoded_one_are_read():
    """RFC 6533's message/global-delivery-status (SMTPUTF8 mail), and a delivery-status part
    sent base64-encoded: neither is parsed into blocks by the email package."""
    fields = ("Reporting-MTA: dns; mx.example\n\nFinal-Recipient: utf-8; josé@example.com\n"
              "Action: failed\nStatus: 5.1.1\n")
    for content_type, encoding, body in [
            ("message/global-delivery-status", "8bit", fields),
            ("message/delivery-status", "base64", base64.encodebytes(fields.encode()).decode())]:
        raw = (f"From: MAILER-DAEMON@mx.example\nContent-Type: multipart/report; "
               f"report-type=delivery-status; boundary=b\nMIME-Version: 1.0\n\n--b\n"
               f"Content-Type: text/plain\n\nFailed.\n--b\nContent-Type: {content_type}\n"
               f"Content-Transfer-Encoding: {encoding}\n\n{body}\n--b--\n").encode()
        report = dsn.parse(mime.read(raw))
        assert report is not None, content_type
        assert report.recipients[0].final_recipient == "josé@example.com"
        assert report.reporting_mta == "dns; mx.example"


def test_the_feedback_reports_are_read():
    yahoo = arf.parse(parsed("arf-yahoo", BOUNCE_TO="bounces+1.2.abc@" + BOUNCE_DOMAIN))
    assert yahoo.complaint and yahoo.feedback_type == "abuse"
    assert yahoo.original_rcpt_to == (ADDRESS,)
    assert yahoo.original_mail_from == "bounces+1.2.abc@" + BOUNCE_DOMAIN
    assert yahoo.user_agent == "Yahoo!-Mail-Feedback/2.0"
    assert yahoo.arrival_date is not None

    redacted = arf.parse(parsed("arf-redacted", BOUNCE_TO="bounces+1.2.abc@" + BOUNCE_DOMAIN))
    assert redacted.complaint and redacted.original_rcpt_to == ()
    assert redacted.original_mail_from is None
    assert redacted.original_return_path == "bounces+1.2.abc@" + BOUNCE_DOMAIN
    assert redacted.source_ip == "203.0.113.4"
    assert dsn.parse(parsed("arf-yahoo")) is None


@pytest.mark.parametrize("name", ["autoreply-outlook", "autoreply-vacation"])
def test_auto_replies_are_recognized(name):
    assert autoreply.auto_reply(parsed(name))


@pytest.mark.parametrize(("header", "value", "is_auto"), [
    ("Auto-Submitted", "auto-replied (vacation)", True),
    ("Auto-Submitted", "no", False),
    ("X-Autoreply", "yes", True),
    ("Precedence", "auto_reply", True),
    ("Subject", "Out of Office: Hello", True),
    ("Subject", "Automatic reply: Hello", True),
    ("Subject", "Réponse automatique : Hello", True),
    ("Subject", "AUTO: Jane Doe is out of the office", True),
    ("Subject", "Re: Hello", False),
])
def test_auto_reply_signs(header, value, is_auto):
    message = mime.read(f"From: a@example.com\n{header}: {value}\n\nHi\n".encode())
    assert bool(autoreply.auto_reply(message)) is is_auto


def test_a_dsn_is_no_auto_reply_though_it_says_auto_submitted():
    message = parsed("postfix-hard")
    assert mime.field(message, "Auto-Submitted") == "auto-replied"
    assert dsn.parse(message) is not None  # read as a DSN first, never as an auto-reply


def test_a_person_s_reply_quoting_an_smtp_code_is_no_bounce_notice():
    assert dsn.parse_text(parsed("not-a-bounce")) is None
    assert autoreply.auto_reply(parsed("not-a-bounce")) is None


# --- recording ----------------------------------------------------------------------------


@dataclass
class World:
    """Tenant A mailed the address (in campaign ``campaign``; two subscriber rows of it); tenant
    B has the same address, mailed too, and must never be touched by A's bounces."""

    account: Account
    campaign: Campaign
    send: Send
    subscribers: list[Subscriber]
    other_account: Account
    other_send: Send

    def bounce_to(self, send: Send | None = None) -> str:
        return verp.return_path((send or self.send).job_id)

    def bounce(self, name: str, send: Send | None = None, **values: str) -> bytes:
        send = send or self.send
        values = {"BOUNCE_TO": self.bounce_to(send),
                  "MESSAGE_ID": f"<campaign.{send.campaign_id}.{send.subscriber_id}@growth.zylior.example>",
                  **values}
        return bounce(name, **values)


def make_send(campaign: Campaign, subscriber: Subscriber, status: str = "sent") -> Send:
    send = Send.objects.create(campaign=campaign, account=campaign.account, subscriber=subscriber,
                               email=subscriber.email, email_lower=subscriber.email_lower,
                               status=status)
    send.refresh_from_db()
    assert send.job_id == job_id(campaign.id, subscriber.id)
    return send


@pytest.fixture
def world() -> World:
    account = AccountFactory()
    campaign = CampaignFactory(account=account)
    first = SubscriberFactory(segment=SegmentFactory(account=account), email=ADDRESS)
    second = SubscriberFactory(segment=SegmentFactory(account=account), email=EMAIL_LOWER)
    send = make_send(campaign, first)
    other_account = AccountFactory()
    elsewhere = SubscriberFactory(segment=SegmentFactory(account=other_account), email=ADDRESS)
    other_send = make_send(CampaignFactory(account=other_account), elsewhere)
    return World(account, campaign, send, [first, second], other_account, other_send)


def statuses(world: World) -> list[str]:
    return [Subscriber.objects.get(id=s.id).status for s in world.subscribers]


def suppressions() -> list[tuple]:
    return sorted((s.account_id, s.email_lower, s.reason)
                  for s in Suppression.objects.all())


def assert_other_tenant_untouched(world: World) -> None:
    assert not Suppression.objects.filter(account=world.other_account).exists()
    assert not FeedbackEvent.objects.filter(account=world.other_account).exists()
    assert Subscriber.objects.get(id=world.other_send.subscriber_id).status == "confirmed"


def assert_nothing_written(world: World) -> None:
    assert not FeedbackEvent.objects.exists()
    assert not Suppression.objects.exists()
    assert statuses(world) == ["confirmed", "confirmed"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", HARD)
def test_a_hard_bounce_suppresses_the_address_in_its_tenant_only(world, name):
    processed = process(world.bounce(name))

    assert processed.outcome is Outcome.ATTRIBUTED, processed
    assert processed.handled == (Handled.SUPPRESSED,)
    assert processed.job_id == world.send.job_id
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]
    [event] = FeedbackEvent.objects.all()
    assert (event.esp, event.event_type, event.email_lower, event.suppressed) == (
        "mailbox", "bounced", EMAIL_LOWER, True)
    assert (event.account, event.campaign, event.send) == (world.account, world.campaign, world.send)
    assert event.event_id.startswith(f"{world.send.job_id}/mid:<") and event.occurred_at is not None
    assert event.description.startswith("failed 5.") and event.mta_response.startswith("smtp;")
    assert statuses(world) == ["confirmed", "confirmed"]  # a bounce is no opt-out
    assert_other_tenant_untouched(world)


@pytest.mark.django_db
@pytest.mark.parametrize("name", [*HARD, "postfix-soft", "postfix-delayed", "arf-yahoo"])
def test_the_same_report_delivered_again_changes_nothing(world, name):
    raw = world.bounce(name)
    first = process(raw)
    before = (suppressions(), list(FeedbackEvent.objects.values_list("id", "suppressed")),
              statuses(world))

    again = process(raw)

    assert first.outcome is again.outcome is Outcome.ATTRIBUTED
    assert again.handled == (Handled.DUPLICATE,)
    assert (suppressions(), list(FeedbackEvent.objects.values_list("id", "suppressed")),
            statuses(world)) == before


@pytest.mark.django_db
def test_a_delay_is_recorded_and_suppresses_nothing(world):
    processed = process(world.bounce("postfix-delayed"))

    assert processed.handled == (Handled.RECORDED,)
    [event] = FeedbackEvent.objects.all()
    assert (event.event_type, event.suppressed, event.account) == ("deferred", False, world.account)
    assert not Suppression.objects.exists()


def _dated(raw: bytes, date: str) -> bytes:
    return b"\n".join(
        line.split(b":", 1)[0] + b": " + date.encode()
        if line.startswith((b"Arrival-Date:", b"Last-Attempt-Date:", b"Date:")) else line
        for line in raw.split(b"\n"))


@pytest.mark.django_db
@pytest.mark.parametrize("date", ["Fri, 31 Dec 9999 23:00:00 -0500", "Mon, 1 Jan 1900 00:00:00 +0000"])
def test_a_bounce_dated_where_no_mail_could_be_is_recorded_undated_and_reads_back(world, date):
    """9999-12-31 23:00 -0500 is the year 10,000 in UTC: PostgreSQL stored it, and every read
    of the event (the admin's list, the ledger and its export, the address history) failed."""
    assert process(_dated(world.bounce("postfix-delayed"), date)).handled == (Handled.RECORDED,)
    [event] = FeedbackEvent.objects.all()
    assert event.occurred_at is None  # as a report without a date
    assert Send.ledger.page(campaign_id=world.campaign.id)


@pytest.mark.django_db
@pytest.mark.parametrize("reply", [b"450 5.1.1", b"421 5.1.1"])
def test_a_plain_notice_quoting_a_transient_reply_suppresses_nothing(world, reply):
    """The reply's class governs its detail, as a DSN's Diagnostic-Code is read: 5.1.1 after a
    450 suppressed the address for good."""
    processed = process(world.bounce("yahoo-hard").replace(b"550 5.1.1", reply))
    assert processed.handled == (Handled.RECORDED,)
    assert not Suppression.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("old", "new"), [
    (b"\nFrom: MAILER-DAEMON", b"\nEnvelope-To: =?utf-8?b?A?=\nFrom: MAILER-DAEMON"),
    (b"Date: Tue, 6 May 2025 09:51:21 +0000 (UTC)", b"Date: =?utf-8?b?A?="),
], ids=["a broken encoded word in the envelope", "a broken encoded word as the date"])
def test_a_broken_header_is_read_as_it_came_and_the_bounce_recorded(world, old, new):
    raw = world.bounce("yahoo-hard")
    assert old in raw
    assert process(raw.replace(old, new)).handled == (Handled.SUPPRESSED,)


@pytest.mark.django_db
def test_a_nul_in_a_bounces_headers_or_text_is_dropped_not_a_database_error(world):
    raw = world.bounce("postfix-hard").replace(b"Message-Id: <", b"Message-Id: <\x00")
    assert b"\x00" in raw
    assert process(raw).handled == (Handled.SUPPRESSED,)
    assert "\x00" not in FeedbackEvent.objects.get().event_id


@pytest.mark.django_db
def test_a_report_that_lists_the_address_delayed_then_failed_records_the_failure(world):
    """One event per recipient a report: the delay's block was recorded and the failure after
    it dropped as a repeat, so the address was never suppressed."""
    raw = world.bounce("postfix-hard")
    block = raw[raw.index(b"Final-Recipient:"):raw.index(b"\n\n--", raw.index(b"Final-Recipient:"))]
    delayed = (block.replace(b"Action: failed", b"Action: delayed")
               .replace(b"Status: 5.1.1", b"Status: 4.4.1"))
    raw = raw.replace(block, delayed + b"\n\n" + block)

    assert process(raw).handled == (Handled.SUPPRESSED,)
    [event] = FeedbackEvent.objects.all()
    assert event.event_type == "bounced"


@pytest.mark.django_db
def test_soft_bounces_of_different_sends_suppress_at_the_limit(world):
    sends = [world.send] + [make_send(CampaignFactory(account=world.account), world.subscribers[0])
                            for _ in range(2)]

    results = [process(world.bounce("postfix-soft", send)).handled for send in sends[:2]]
    assert results == [(Handled.RECORDED,), (Handled.RECORDED,)]
    assert not Suppression.objects.exists()

    assert process(world.bounce("postfix-soft", sends[2])).handled == (Handled.SUPPRESSED,)
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]
    rows = FeedbackEvent.objects.order_by("id")
    assert [(e.event_type, e.suppressed) for e in rows] == [("bounced", False), ("bounced", False),
                                                            ("bounced", True)]
    assert_other_tenant_untouched(world)


@pytest.mark.django_db
def test_soft_bounces_count_sends_not_reports_nor_other_tenants(world, settings):
    settings.BOUNCE_SOFT_LIMIT = 2
    # two reports about one send are one soft bounce
    process(world.bounce("postfix-soft"))
    process(world.bounce("postfix-soft"))
    # the other tenant's soft bounce of the same address counts only there
    process(world.bounce("postfix-soft", world.other_send))
    assert FeedbackEvent.objects.count() == 3
    assert not Suppression.objects.exists()

    second = make_send(CampaignFactory(account=world.account), world.subscribers[0])
    assert process(world.bounce("postfix-soft", second)).handled == (Handled.SUPPRESSED,)
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]


@pytest.mark.django_db(transaction=True)
def test_two_soft_bounces_recorded_at_once_both_count(world, settings):
    settings.BOUNCE_SOFT_LIMIT = 2
    second = make_send(CampaignFactory(account=world.account), world.subscribers[0])
    reports = [world.bounce("postfix-soft", send) for send in (world.send, second)]

    results = concurrently(2, lambda i: process(reports[i]).handled)

    assert sorted(results) == [(Handled.RECORDED,), (Handled.SUPPRESSED,)]
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]


@pytest.mark.django_db
def test_soft_bounces_older_than_the_window_do_not_count(world, settings):
    settings.BOUNCE_SOFT_LIMIT = 2
    process(world.bounce("postfix-soft"))
    FeedbackEvent.objects.update(received_at=timezone.now() - timezone.timedelta(days=8))

    second = make_send(CampaignFactory(account=world.account), world.subscribers[0])
    assert process(world.bounce("postfix-soft", second)).handled == (Handled.RECORDED,)
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_a_limit_of_zero_never_suppresses_on_soft_bounces(world, settings):
    settings.BOUNCE_SOFT_LIMIT = 0
    for _ in range(3):
        send = make_send(CampaignFactory(account=world.account), world.subscribers[0])
        process(world.bounce("postfix-soft", send))
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_an_esp_s_soft_bounces_are_still_only_recorded(world):
    for n in range(4):
        send = make_send(CampaignFactory(account=world.account), world.subscribers[0])
        event = AnymailTrackingEvent(
            event_type=EventType.BOUNCED, event_id=f"pm-{n}", recipient=ADDRESS,
            metadata={"job_id": send.job_id}, esp_event={"RecordType": "Bounce", "Type": "SoftBounce"})
        assert handle_event(esp_name="Postmark", event=event) == Handled.RECORDED
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_a_feedback_loop_complaint_suppresses_and_unsubscribes(world):
    processed = process(world.bounce("arf-yahoo"))  # to the loop's address; Original-Mail-From

    assert processed.outcome is Outcome.ATTRIBUTED and processed.kind == "arf"
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "complained")]
    [event] = FeedbackEvent.objects.all()
    assert (event.event_type, event.send, event.suppressed) == ("complained", world.send, True)
    assert statuses(world) == ["unsubscribed", "unsubscribed"]
    assert_other_tenant_untouched(world)


@pytest.mark.django_db
def test_a_redacted_complaint_is_matched_by_the_reported_message_s_return_path(world):
    processed = process(world.bounce("arf-redacted"))

    assert processed.outcome is Outcome.ATTRIBUTED
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "complained")]
    assert FeedbackEvent.objects.get().email_lower == EMAIL_LOWER


@pytest.mark.django_db
def test_a_feedback_report_that_is_no_complaint_changes_nothing(world):
    raw = world.bounce("arf-yahoo").replace(b"Feedback-Type: abuse", b"Feedback-Type: not-spam")
    assert process(raw).outcome is Outcome.IGNORED
    assert_nothing_written(world)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["autoreply-outlook", "autoreply-vacation"])
def test_an_auto_reply_is_ignored(world, name):
    processed = process(world.bounce(name, RECIPIENT=ADDRESS))
    assert processed.outcome is Outcome.AUTO_REPLY
    assert_nothing_written(world)


@pytest.mark.django_db
def test_a_forged_token_changes_nothing(world):
    processed = process(bounce("forged-token"))
    assert processed.outcome is Outcome.FORGED
    assert_nothing_written(world)


def changed_last_signature_character(address: str) -> str:
    """The address with its signature's last character changed (always: a fixed replacement
    character was the one already there one time in 32 or so)."""
    local = address[:-len(BOUNCE_DOMAIN) - 1]
    return local[:-1] + ("1" if local[-1] == "0" else "0") + "@" + BOUNCE_DOMAIN


@pytest.mark.django_db
@pytest.mark.parametrize("tamper", [
    lambda address: address.replace("bounces+", "bounces+9"),  # another campaign, same signature
    lambda address: changed_last_signature_character(address),
])
def test_a_tampered_token_of_a_real_send_changes_nothing(world, tamper):
    processed = process(world.bounce("postfix-hard", BOUNCE_TO=tamper(world.bounce_to())))
    assert processed.outcome is Outcome.FORGED
    assert_nothing_written(world)


@pytest.mark.django_db
def test_a_report_that_came_to_no_bounce_address_changes_nothing(world):
    processed = process(world.bounce("postfix-hard", BOUNCE_TO="news@acme.example"))
    assert processed.outcome is Outcome.NO_TOKEN
    assert_nothing_written(world)


@pytest.mark.django_db
def test_a_dsn_about_another_address_is_recorded_unattributed(world):
    processed = process(world.bounce("wrong-recipient"))

    assert processed.outcome is Outcome.UNATTRIBUTED
    [event] = FeedbackEvent.objects.all()
    assert (event.account, event.send, event.suppressed) == (None, None, False)
    assert event.email_lower == "someone-else@example.org"
    assert "not the send's address" in event.unattributed_because
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_what_the_bounced_message_says_is_not_trusted(world):
    """The returned original names tenant B's send (its Message-ID): only the address the
    bounce came to counts."""
    other = world.other_send
    raw = world.bounce("postfix-hard",
                       MESSAGE_ID=f"<campaign.{other.campaign_id}.{other.subscriber_id}@x>")
    assert process(raw).outcome is Outcome.ATTRIBUTED
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]
    assert_other_tenant_untouched(world)


@pytest.mark.django_db
def test_the_envelope_recipient_is_trusted_before_the_headers(world):
    raw = world.bounce("postfix-hard", BOUNCE_TO=f"bounces@{BOUNCE_DOMAIN}")
    assert process(raw).outcome is Outcome.NO_TOKEN
    assert process(raw, envelope_recipients=[world.bounce_to()]).outcome is Outcome.ATTRIBUTED
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]


@pytest.mark.django_db
@pytest.mark.parametrize("raw", [
    b"",
    b"\xff\xfe\x00garbage",
    b"Content-Type: multipart/report; report-type=delivery-status; boundary=x\n\n--x\n"
    b"Content-Type: message/delivery-status\n\n\n--x--\n",
])
def test_an_unreadable_message_is_unparsed_not_an_error(world, raw):
    assert process(raw, envelope_recipients=[world.bounce_to()]).outcome is Outcome.UNPARSED
    assert_nothing_written(world)


@pytest.mark.django_db
def test_a_person_s_reply_is_unparsed(world):
    assert process(world.bounce("not-a-bounce")).outcome is Outcome.UNPARSED
    assert_nothing_written(world)


@pytest.mark.django_db
def test_a_dsn_with_an_unreadable_recipient_suppresses_nothing(world):
    raw = world.bounce("postfix-hard").replace(
        f"Final-Recipient: rfc822; {ADDRESS}\nOriginal-Recipient: rfc822;{ADDRESS}".encode(),
        b"Final-Recipient: x-local; someone")
    processed = process(raw)
    assert processed.outcome is Outcome.UNATTRIBUTED
    assert_nothing_written(world)


@pytest.mark.django_db
def test_a_hard_bounce_settles_a_send_in_doubt_as_not_delivered(settings):
    settings.BOUNCE_DOMAIN = BOUNCE_DOMAIN
    _, lost = finished_campaign_with_unknown_rows(count=4, unknown=2)
    send = Send.objects.get(id=lost[0])
    raw = bounce("postfix-hard", BOUNCE_TO=verp.return_path(send.job_id), RECIPIENT=send.email)

    assert process(raw).handled == (Handled.SUPPRESSED,)
    send.refresh_from_db()
    assert send.status == "failed"
    verdict = SendVerdict.objects.get(send=send)
    assert verdict.decided_by == "esp:mailbox" and "mailbox bounced event" in verdict.evidence
    assert Send.objects.get(id=lost[1]).status == "unknown"


@pytest.mark.django_db
def test_one_line_is_logged_per_message(world, caplog):
    process(world.bounce("postfix-hard"))
    process(world.bounce("autoreply-outlook"))
    process(bounce("forged-token"))
    lines = [r.getMessage() for r in caplog.records if r.name == "growth.bounces"]
    assert [line.split(":")[0] for line in lines] == [
        "bounce attributed", "bounce auto-reply ignored", "bounce forged token"]


# --- the LMTP / SMTP server ----------------------------------------------------------------


@pytest.fixture
def server(tmp_path):
    servers = []

    def start(**kwargs) -> BounceServer:
        started = BounceServer("127.0.0.1", free_port(), unparsed_dir=tmp_path / "unparsed",
                               **kwargs).start()
        servers.append(started)
        return started

    yield start
    for started in servers:
        started.stop()


def on_the_wire(raw: bytes) -> bytes:
    """Lines end in CRLF in SMTP and LMTP (smtplib leaves bytes as they are)."""
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


def lmtp_send(port: int, recipients: list[str], raw: bytes) -> dict:
    with smtplib.LMTP("127.0.0.1", port) as client:
        return client.sendmail("", recipients, on_the_wire(raw))


@pytest.mark.django_db(transaction=True)
def test_over_lmtp_a_bounce_is_recorded_before_the_answer(world, server):
    bounces = server()
    refused = lmtp_send(bounces.port, [world.bounce_to()], world.bounce("gmail-hard"))

    assert refused == {}
    # the answer came after the commit: this connection sees the suppression at once
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]
    assert bounces.handler.outcomes == {Outcome.ATTRIBUTED: 1}


@pytest.mark.django_db(transaction=True)
def test_over_lmtp_only_the_bounce_domain_is_accepted(world, server):
    bounces = server()
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        lmtp_send(bounces.port, ["someone@elsewhere.example"], world.bounce("postfix-hard"))
    assert_nothing_written(world)


@pytest.mark.django_db(transaction=True)
def test_over_lmtp_a_message_is_parsed_once_for_all_its_recipients_and_they_are_capped(world, server):
    """One message to many bounce addresses would have been parsed and classified once each."""
    got = []

    def recorder(raw, **kwargs):
        got.append(raw)
        return process(raw, **kwargs)

    bounces = server(recorder=recorder)
    domain = world.bounce_to().rpartition("@")[2]
    recipients = [world.bounce_to()] + [f"x{n}@{domain}" for n in range(MAX_RECIPIENTS)]
    with smtplib.LMTP("127.0.0.1", bounces.port) as client:  # its sendmail reads one DATA reply
        client.ehlo_or_helo_if_needed()
        client.mail("")
        assert [client.rcpt(r)[0] for r in recipients] == [250] * MAX_RECIPIENTS + [452]
        assert client.data(on_the_wire(world.bounce("postfix-hard")))[0] == 250
        later = [client.getreply()[0] for _ in range(MAX_RECIPIENTS - 1)]  # one a recipient
    assert later == [250] * (MAX_RECIPIENTS - 1)
    assert len(got) == MAX_RECIPIENTS
    assert isinstance(got[0], Message) and all(raw is got[0] for raw in got)
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]


@pytest.mark.django_db(transaction=True)
def test_over_lmtp_an_unparsed_message_is_kept_for_a_person(world, server, tmp_path):
    bounces = server()
    raw = world.bounce("not-a-bounce")
    assert lmtp_send(bounces.port, [world.bounce_to()], raw) == {}
    [kept] = (tmp_path / "unparsed").iterdir()
    assert email.message_from_bytes(kept.read_bytes())["Subject"] == "Re: Hello"
    assert_nothing_written(world)


@pytest.mark.django_db(transaction=True)
def test_over_lmtp_what_is_kept_for_a_person_is_bounded_and_past_it_the_mail_server_keeps_it(
        world, server, tmp_path, settings, caplog):
    settings.BOUNCE_UNPARSED_MAX_MB = 1
    bounces = server()
    raw = world.bounce("not-a-bounce")
    kept = tmp_path / "unparsed"
    kept.mkdir()
    (kept / "earlier.eml").write_bytes(b"x" * (1024 * 1024 - len(raw) + 1))
    with pytest.raises(smtplib.SMTPDataError) as refused:
        lmtp_send(bounces.port, [world.bounce_to()], raw)
    assert refused.value.smtp_code == 452
    assert [path.name for path in kept.iterdir()] == ["earlier.eml"]
    assert "fill BOUNCE_UNPARSED_MAX_MB" in caplog.text
    caplog.clear()  # that error is the operator's cue, expected here
    (kept / "earlier.eml").unlink()  # a person looked
    assert lmtp_send(bounces.port, [world.bounce_to()], raw) == {}
    assert len(list(kept.iterdir())) == 1


@pytest.mark.django_db(transaction=True)
def test_over_lmtp_the_database_away_is_a_451_and_the_message_comes_again(world, server):
    calls = []

    def away(raw, **kwargs):
        calls.append(raw)
        raise OperationalError("the database is restarting")

    bounces = server(recorder=away)
    with pytest.raises(smtplib.SMTPDataError) as refused:
        lmtp_send(bounces.port, [world.bounce_to()], world.bounce("postfix-hard"))
    assert refused.value.smtp_code == 451
    assert len(calls) == 1
    assert_nothing_written(world)


@pytest.mark.django_db(transaction=True)
def test_over_smtp_too(world, server):
    bounces = server(lmtp=False)
    with smtplib.SMTP("127.0.0.1", bounces.port) as client:
        assert client.sendmail("", [world.bounce_to()], on_the_wire(world.bounce("exim-hard"))) == {}
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]


# --- the IMAP reader, against a fake imap-tools MailBox ------------------------------------


class FakeFolders:
    def __init__(self, box: FakeMailBox) -> None:
        self.box = box

    def exists(self, name: str) -> bool:
        return name in self.box.folders

    def create(self, name: str) -> None:
        self.box.folders[name] = {}


class FakeMailBox:
    """What MailboxReader uses of imap-tools' MailBox: fetch (unseen, not marking them), move,
    flag, folder.exists/create. Each move or flag notes whether the message's report was
    committed at that moment, as another database connection sees it."""

    def __init__(self, messages: list[bytes]) -> None:
        self.folders: dict[str, dict[str, bytes]] = {
            "INBOX": {str(uid): raw for uid, raw in enumerate(messages, start=1)}}
        self.seen: set[str] = set()
        self.actions: list[tuple] = []
        self.folder = FakeFolders(self)

    def uids(self, criteria) -> list[str]:
        assert "UNSEEN" in str(criteria)
        return [uid for uid in self.folders["INBOX"] if uid not in self.seen]

    def fetch(self, criteria, *, mark_seen=True, limit=None, **kwargs):
        """As imap-tools' fetch, which parses each message as it fetches it."""
        assert mark_seen is False, "fetching must not mark a message seen before it is recorded"
        assert "UNSEEN" in str(criteria)
        wanted = re.search(r"UID (\d+)", str(criteria))
        for uid, raw in list(self.folders["INBOX"].items())[:limit]:
            if uid not in self.seen and (wanted is None or wanted[1] == uid):
                yield SimpleNamespace(uid=uid, obj=email.message_from_bytes(raw))

    def move(self, uid: str, folder: str) -> None:
        self.actions.append(("move", uid, folder, committed_rows()))
        self.folders[folder][uid] = self.folders["INBOX"].pop(uid)

    def flag(self, uid: str, flag: str, value: bool) -> None:
        assert (flag, value) == ("\\Seen", True)
        self.actions.append(("seen", uid, committed_rows()))
        self.seen.add(uid)

    def everything(self) -> int:
        return sum(len(messages) for messages in self.folders.values())

    def __enter__(self) -> FakeMailBox:
        return self

    def __exit__(self, *exc_info) -> None:
        self.logged_out = True


def committed_rows() -> int:
    """FeedbackEvent rows as a second connection sees them: only what was committed."""
    seen = []

    def count() -> None:
        try:
            seen.append(FeedbackEvent.objects.count())
        finally:
            connections.close_all()

    thread = threading.Thread(target=count)
    thread.start()
    thread.join()
    return seen[0]


@pytest.mark.django_db(transaction=True)
def test_imap_messages_leave_the_inbox_only_after_their_report_is_committed(world):
    box = FakeMailBox([world.bounce("postfix-hard"), world.bounce("autoreply-outlook"),
                       world.bounce("not-a-bounce"), b"\xff\xfegarbage", world.bounce("arf-yahoo")])

    counts = mailbox.MailboxReader(box).run_once()

    assert counts == {Outcome.ATTRIBUTED: 2, Outcome.AUTO_REPLY: 1, Outcome.UNPARSED: 2}
    assert box.actions == [("move", "1", "processed", 1), ("move", "2", "processed", 1),
                           ("move", "3", "unparsed", 1), ("move", "4", "unparsed", 1),
                           ("move", "5", "processed", 2)]
    assert set(box.folders["unparsed"]) == {"3", "4"} and box.folders["INBOX"] == {}
    assert box.everything() == 5  # nothing deleted, nothing lost
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]  # the first reason stays


@pytest.mark.django_db(transaction=True)
def test_imap_without_a_processed_folder_marks_messages_seen(world):
    box = FakeMailBox([world.bounce("postfix-hard")])
    assert mailbox.MailboxReader(box, processed_folder="").run_once() == {Outcome.ATTRIBUTED: 1}
    assert box.actions == [("seen", "1", 1)]
    assert "processed" not in box.folders and set(box.folders["INBOX"]) == {"1"}
    assert mailbox.MailboxReader(box, processed_folder="").run_once() == {}  # not fetched again


@pytest.mark.django_db(transaction=True)
def test_imap_with_the_database_away_leaves_the_message_unseen_for_the_next_pass(world):
    box = FakeMailBox([world.bounce("postfix-hard"), world.bounce("postfix-soft")])

    def away(raw, **kwargs):
        raise OperationalError("the database is restarting")

    with pytest.raises(OperationalError):
        mailbox.MailboxReader(box, recorder=away).run_once()
    assert box.actions == [] and set(box.folders["INBOX"]) == {"1", "2"}

    assert mailbox.MailboxReader(box).run_once() == {Outcome.ATTRIBUTED: 2}
    assert set(box.folders["processed"]) == {"1", "2"}


@pytest.mark.django_db(transaction=True)
def test_imap_a_message_the_recording_fails_on_goes_to_unparsed(world, caplog):
    box = FakeMailBox([world.bounce("postfix-hard")])

    def bug(raw, **kwargs):
        raise KeyError("a bug")

    assert mailbox.MailboxReader(box, recorder=bug).run_once() == {Outcome.UNPARSED: 1}
    assert set(box.folders["unparsed"]) == {"1"}
    caplog.clear()  # the bug's logged error is expected here


LONG = 200_000  # one line once decoded: quadratic matching of it takes many minutes, linear ms


def _base64_part(text: str) -> bytes:  # no long line on the wire: base64 decodes into one
    return b"Content-Transfer-Encoding: base64\n\n" + base64.encodebytes(text.encode())


HOSTILE_LINES = {
    "a mailer-daemon notice with a long line of dashes": (
        b"From: MAILER-DAEMON@elsewhere.example\nTo: bounces@" + BOUNCE_DOMAIN.encode()
        + b"\nSubject: x\nMIME-Version: 1.0\nContent-Type: text/plain\n"
        + _base64_part("Sorry.\n<x@example.com>: 550 5.1.1 no\n" + "-" * LONG + "x\n")),
    "a notice's address line of at signs": (
        b"From: MAILER-DAEMON@elsewhere.example\nTo: bounces@" + BOUNCE_DOMAIN.encode()
        + b"\nSubject: x\nMIME-Version: 1.0\nContent-Type: text/plain\n"
        + _base64_part("Sorry.\n<" + "@" * LONG + "\n550 5.1.1 no\n")),
    "a feedback report's address without a plus": (
        b"From: fbl@elsewhere.example\nTo: " + FBL_TO.encode() + b"\nMIME-Version: 1.0\n"
        b"Content-Type: multipart/report; report-type=feedback-report; boundary=b\n\n--b\n"
        b"Content-Type: text/plain\n\nspam\n--b\nContent-Type: message/feedback-report\n"
        + _base64_part("Feedback-Type: abuse\nUser-Agent: x\nVersion: 1\nOriginal-Mail-From: "
                       + "a" * LONG + "\n") + b"--b--\n"),
    "a From of encoded words that decode into one token": (
        b"From: " + "\n ".join(["=?us-ascii?q?" + "a" * 60 + "?="] * (LONG // 60)).encode()
        + b"\nTo: bounces@" + BOUNCE_DOMAIN.encode() + b"\nSubject: hello\n\nhi\n"),
}


@pytest.mark.django_db
@pytest.mark.parametrize("raw", HOSTILE_LINES.values(), ids=HOSTILE_LINES)
def test_one_long_line_from_anyone_does_not_hold_up_the_intake(raw):
    """Not a speed target: a hang. Backtracking patterns took time in the square of a line's
    length (5.6 s for 16 kB), holding the GIL, before any signature was checked; this line,
    twelve times as long, would take about fifteen minutes."""
    started = time.monotonic()
    process(raw)
    assert time.monotonic() - started < 20


def deeply_nested(depth: int = 1200) -> bytes:
    """About 30 kB from anyone: deeper than Python's parser can recurse."""
    head = b"".join(b"Content-Type: multipart/mixed; boundary=b%d\n\n--b%d\n" % (i, i)
                    for i in range(depth))
    tail = b"".join(b"\n--b%d--\n" % i for i in reversed(range(depth)))
    return (b"From: someone@internet.example\nSubject: hi\nMIME-Version: 1.0\n" + head
            + b"Content-Type: text/plain\n\nx\n" + tail)


@pytest.mark.django_db(transaction=True)
def test_imap_a_message_the_parser_cannot_read_goes_to_unparsed_and_the_rest_are_read(
        world, caplog):
    """imap-tools parses while it fetches: the RecursionError escaped the pass, the message
    stayed unseen, and every later pass (and run_bounces) died on it before the real bounces."""
    box = FakeMailBox([deeply_nested(), world.bounce("postfix-hard")])

    assert mailbox.MailboxReader(box).run_once() == {Outcome.UNPARSED: 1, Outcome.ATTRIBUTED: 1}

    assert set(box.folders["unparsed"]) == {"1"} and set(box.folders["processed"]) == {"2"}
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]
    caplog.clear()  # its logged error is expected here


@pytest.mark.parametrize(("url", "expected"), [
    ("imaps://bounces:s%40cret@imap.example:993/INBOX",
     ("imaps", "imap.example", 993, "bounces", "s@cret", "INBOX")),
    ("imap://me@imap.example", ("imap", "imap.example", 143, "me", "", "INBOX")),
    ("imap+plain://me:pw@127.0.0.1:1143/Bounces/VERP",
     ("imap+plain", "127.0.0.1", 1143, "me", "pw", "Bounces/VERP")),
])
def test_imap_urls(url, expected):
    address = mailbox.parse_url(url)
    assert (address.scheme, address.host, address.port, address.user, address.password,
            address.folder) == expected
    assert "cret" not in str(address) and "pw" not in str(address)


@pytest.mark.parametrize("url", ["http://x@imap.example", "imaps://imap.example/INBOX",
                                 "imaps://me@:993"])
def test_bad_imap_urls_are_refused(url):
    with pytest.raises(ValueError):
        mailbox.parse_url(url)


@pytest.mark.django_db(transaction=True)
def test_the_command_reads_an_imap_mailbox_once(world, monkeypatch, settings):
    box = FakeMailBox([world.bounce("postfix-hard"), world.bounce("not-a-bounce")])
    opened = []
    monkeypatch.setattr(mailbox, "connect", lambda address: opened.append(address) or box)
    settings.BOUNCE_IMAP_URL = "imaps://bounces:secret@imap.example/INBOX"
    out = StringIO()

    call_command("run_bounces", "--once", stdout=out)

    assert [str(address) for address in opened] == ["imaps://bounces@imap.example:993/INBOX"]
    assert "Pass done: 1 attributed, 1 unparsed." in out.getvalue()
    assert "secret" not in out.getvalue() and box.logged_out
    assert set(box.folders["processed"]) == {"1"} and set(box.folders["unparsed"]) == {"2"}
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]


@pytest.mark.django_db(transaction=True)
def test_the_command_over_lmtp_once_stops_after_the_first_message(world, tmp_path):
    port, out = free_port(), StringIO()
    runner = threading.Thread(target=call_command, args=(
        "run_bounces", "--lmtp", f"127.0.0.1:{port}", "--once", "--unparsed-dir", str(tmp_path)),
        kwargs={"stdout": out})
    runner.start()
    deadline = time.monotonic() + 10
    while "Accepting bounces" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lmtp_send(port, [world.bounce_to()], world.bounce("outlook-hard")) == {}
    runner.join(timeout=10)
    assert not runner.is_alive()
    assert "Stopped: 1 messages received, 1 attributed." in out.getvalue()
    assert suppressions() == [(world.account.id, EMAIL_LOWER, "bounced")]


def test_the_command_needs_a_bounce_domain_and_a_source(settings):
    settings.BOUNCE_DOMAIN = ""
    with pytest.raises(CommandError, match="BOUNCE_DOMAIN"):
        call_command("run_bounces", "--once")
    settings.BOUNCE_DOMAIN = BOUNCE_DOMAIN
    settings.BOUNCE_IMAP_URL = ""
    with pytest.raises(CommandError, match="--imap"):
        call_command("run_bounces", "--once")
    with pytest.raises(CommandError, match="--smtp goes with --lmtp"):
        call_command("run_bounces", "--smtp", "--imap", "imaps://u@h/INBOX")


# --- end to end ----------------------------------------------------------------------------


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "run_bounces exited early"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"run_bounces did not listen on {port} within {timeout} s")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_end_to_end_a_campaign_s_bounces_come_back_over_lmtp(smtp_settings, settings, tmp_path):
    """Two tenants mail the same address; tenant A sends two campaigns through a real SMTP
    server. The receiver's answers come back as DSNs, an ARF complaint and an auto-reply,
    handed to ``run_bounces --lmtp`` (a subprocess) as the bounce domain's mail server would."""
    from growth.operations.campaigns import approve_campaign
    from growth.sending.worker import Worker

    settings.SENDER_BACKOFF_BASE = 0.05
    acme, globex = AccountFactory(name="Acme"), AccountFactory(name="Globex")
    people = audience(acme, 5, prefix="p")  # p0 hard, p1 soft, p2 complains, p3 away, p4 forged
    audience(globex, 1, prefix="p")  # p0@example.com, in the other tenant too
    campaigns = [CampaignFactory(account=acme), CampaignFactory(account=acme),
                 CampaignFactory(account=globex)]
    for campaign in campaigns:
        approve_campaign(campaign_id=campaign.id)
    Worker(worker_id="w", batch_size=20, tick=0.05, lease=30, until_idle=True).run()
    accepted = smtp_settings.handler.accepted
    assert len(accepted) == 11

    def sent(campaign: Campaign, person: str):
        [message] = [a for a in accepted if a.recipient == person
                     and a.idempotency_key.startswith(f"campaign:{campaign.id}:")]
        # the envelope sender, once the transport sends with the VERP return path
        bounce_to = (message.envelope_from if verp.job_of(message.envelope_from)
                     else verp.return_path(message.idempotency_key))
        return {"BOUNCE_TO": bounce_to, "RECIPIENT": person, "MESSAGE_ID": message.message_id,
                "SUBJECT": str(message.message["Subject"])}

    a1, a2, _ = campaigns
    hard = bounce("postfix-hard", **sent(a1, "p0@example.com"))
    deliveries = [
        ("hard", hard),
        ("soft, first send", bounce("postfix-soft", **sent(a1, "p1@example.com"))),
        ("soft, second send", bounce("postfix-soft", **sent(a2, "p1@example.com"))),
        ("complaint", bounce("arf-yahoo", **sent(a1, "p2@example.com"))),
        ("auto-reply", bounce("autoreply-outlook", **sent(a1, "p3@example.com"))),
        ("forged", bounce("forged-token", RECIPIENT="p4@example.com")),
        ("hard, again", hard),
    ]
    port = free_port()
    log = (tmp_path / "run_bounces.log").open("w+")
    runner = subprocess.Popen(
        manage("run_bounces", "--lmtp", f"127.0.0.1:{port}", "--unparsed-dir", str(tmp_path)),
        env=subprocess_env(BOUNCE_DOMAIN=BOUNCE_DOMAIN, BOUNCE_SOFT_LIMIT="2",
                           BOUNCE_SOFT_WINDOW_DAYS="7"),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, runner)
        for what, raw in deliveries:
            message = email.message_from_bytes(raw)
            to = message["X-Original-To"] or message["Delivered-To"]
            assert lmtp_send(port, [to], raw) == {}, what
    finally:
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=30) == 0
    log.seek(0)
    output = log.read()

    assert suppressions() == sorted([(acme.id, "p0@example.com", "bounced"),
                                     (acme.id, "p1@example.com", "bounced"),
                                     (acme.id, "p2@example.com", "complained")])
    assert Subscriber.objects.get(account=acme, email_lower="p2@example.com").status == "unsubscribed"
    assert not Suppression.objects.filter(account=globex).exists()
    assert FeedbackEvent.objects.filter(account=acme).count() == 4  # hard, soft twice, complaint
    assert not FeedbackEvent.objects.exclude(account=acme).exists()
    assert output.count("bounce attributed") == 5  # the hard bounce twice: once recorded
    assert output.count("failed 5.1.1: already recorded") == 1
    assert output.count("bounce auto-reply ignored") == 1
    assert output.count("bounce forged token") == 1
    assert ("Stopped: 7 messages received, 5 attributed, 1 auto-reply ignored, 1 forged token."
            in output)
    # the next campaign of tenant A skips the suppressed addresses; tenant B still mails p0
    follow = CampaignFactory(account=acme)
    approve_campaign(campaign_id=follow.id)
    Worker(worker_id="w", batch_size=20, tick=0.05, lease=30, until_idle=True).run()
    mailed = {a.recipient for a in smtp_settings.handler.accepted
              if a.idempotency_key.startswith(f"campaign:{follow.id}:")}
    assert mailed == {"p3@example.com", "p4@example.com"}
    assert len(people) == 5


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_end_to_end_complaints_over_lmtp_pause_their_tenant_mid_campaign_and_no_other(
        smtp_settings, settings, server):
    """Two tenants' campaigns go out through a real SMTP server; part-way, a feedback loop's
    complaint about one of tenant A's messages arrives over LMTP: the reputation guard pauses
    A's campaign at once, B's goes on to the end, and A's rest waits, unsent."""
    from growth.operations.campaigns import approve_campaign
    from growth.reputation.guard import REASON_PREFIX
    from growth.sending.worker import Worker

    settings.REPUTATION_MIN_SENDS = 20  # 1 complaint in 20 sends is far above 0.3 %
    acme, globex = AccountFactory(name="Acme"), AccountFactory(name="Globex")
    audience(acme, 60, prefix="a")
    audience(globex, 60, prefix="g")
    ours, theirs = CampaignFactory(account=acme), CampaignFactory(account=globex)
    for campaign in (ours, theirs):
        approve_campaign(campaign_id=campaign.id)
    worker = Worker(worker_id="w", batch_size=20, tick=0.05, lease=30, once=True)
    while Send.objects.filter(campaign=ours, status="sent").count() < 20:
        worker.run()  # one cycle a run: the campaigns in turn, a batch each
    assert Send.objects.filter(campaign=ours, status="queued").exists()

    [message] = [a for a in smtp_settings.handler.accepted if a.recipient == "a0@example.com"]
    assert verp.job_of(message.envelope_from) is not None  # the transport sends with VERP
    complaint = bounce("arf-yahoo", BOUNCE_TO=message.envelope_from, RECIPIENT="a0@example.com",
                       MESSAGE_ID=message.message_id, SUBJECT=str(message.message["Subject"]))
    bounces = server()
    to = email.message_from_bytes(complaint)["X-Original-To"] or message.envelope_from
    assert lmtp_send(bounces.port, [to], complaint) == {}

    ours.refresh_from_db()
    assert ours.status == "paused" and ours.pause_reason.startswith(REASON_PREFIX)
    Worker(worker_id="w", batch_size=20, tick=0.05, lease=30, until_idle=True).run()
    theirs.refresh_from_db()
    assert theirs.status == "sent"
    assert Send.objects.filter(campaign=theirs, status="sent").count() == 60
    left = Send.objects.filter(campaign=ours, status="queued").count()
    assert left > 0 and Send.objects.filter(campaign=ours, status="sent").count() == 60 - left
    assert Suppression.objects.filter(account=acme, email_lower="a0@example.com").exists()
    assert not Suppression.objects.filter(account=globex).exists()
