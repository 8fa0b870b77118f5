"""A relay that refuses the campaign's messages as too large refuses the campaign as it is, not
each recipient: it pauses with the reason, nobody failed and no attempt counted, and its page
says what to do. A mailbox's own refusal (full, or its own limit) stays the recipient's."""

from __future__ import annotations

import smtplib

import pytest
from django.urls import reverse

from growth.models import Campaign, Send
from growth.sending.transports.base import Outcome
from growth.sending.transports.errors import classify_failure
from growth.sending.worker import Worker
from tests.scenarios import rows_by_status, sending_campaign

RELAY_LIMIT = "552 5.3.4 Message size exceeds fixed maximum message size"


def one_batch() -> None:
    Worker(batch_size=10, tick=0.01, lease=30, once=True).run()


def attempts(campaign: Campaign) -> list[int]:
    return list(Send.objects.filter(campaign=campaign).values_list("attempts", flat=True))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_relay_refusing_the_size_at_the_end_of_data_pauses_the_campaign(smtp_settings, leases):
    campaign = sending_campaign(3, leases=leases)
    for row in Send.objects.filter(campaign=campaign):
        smtp_settings.handler.replies[row.email_lower] = [RELAY_LIMIT]
    one_batch()
    campaign.refresh_from_db()
    assert campaign.status == "paused"
    assert campaign.pause_reason == f"The transport refused us: {RELAY_LIMIT}"
    assert rows_by_status(campaign) == {"queued": 3} and attempts(campaign) == [0, 0, 0]


@pytest.mark.django_db(transaction=True)
def test_a_relay_announcing_its_size_limit_refuses_at_mail_from_and_the_campaign_pauses(
        smtp_settings):
    smtp_settings.stop()
    smtp_settings.options = {"data_size_limit": 300}  # aiosmtpd: "SIZE 300" in its EHLO
    smtp_settings.start()
    campaign = sending_campaign(2)
    one_batch()
    campaign.refresh_from_db()
    assert campaign.status == "paused" and "552" in campaign.pause_reason
    assert rows_by_status(campaign) == {"queued": 2} and attempts(campaign) == [0, 0]
    assert smtp_settings.handler.accepted == []


@pytest.mark.django_db(transaction=True)
def test_a_full_mailbox_fails_its_recipient_alone(smtp_settings):
    campaign = sending_campaign(3)
    full = Send.objects.filter(campaign=campaign).order_by("id").first()
    smtp_settings.handler.replies[full.email_lower] = [
        "552 5.2.2 The email account that you tried to reach is over quota"]
    one_batch()
    campaign.refresh_from_db()
    assert campaign.status == "sent"
    assert rows_by_status(campaign) == {"sent": 2, "failed": 1}


@pytest.mark.parametrize("reply, kind", [
    ("552-5.3.4 Your message exceeded Google's message size limits.", Outcome.REFUSED),
    ("552 Error: Too much mail data", Outcome.REFUSED),
    ("552 Message is too large", Outcome.REFUSED),
    ("552 5.2.3 Message length exceeds administrative limit", Outcome.PERMANENT),
    ("552 5.2.2 Mailbox full", Outcome.PERMANENT),
    ("552 5.2.2 <ana@example.com>: Recipient address rejected: Mailbox size limit exceeded",
     Outcome.PERMANENT),
    ("552 Message size exceeds the recipient's quota", Outcome.PERMANENT),
    ("452 4.3.4 Message size exceeds fixed limit, try later", Outcome.TRANSIENT),
])
def test_which_size_answers_are_the_campaigns(reply, kind):
    code, text = int(reply[:3]), reply[4:]
    assert classify_failure(smtplib.SMTPDataError(code, text)).kind == kind


@pytest.mark.django_db
def test_the_campaign_page_says_to_resend_a_smaller_message_to_the_rest(client, staff, tenant):
    campaign = sending_campaign(2, account=tenant)
    Campaign.objects.pause(campaign_id=campaign.id,
                           reason=f"The transport refused us: {RELAY_LIMIT}")
    page = client.get(reverse("admin:growth_campaign_change", args=[campaign.pk])).content.decode()
    assert "the mail server refuses its messages as too large" in page
    assert "for a follow-up with a smaller message" in page
    assert "Fix the transport" not in page
