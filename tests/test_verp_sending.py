"""VERP on the sending side: with BOUNCE_DOMAIN set, each campaign message's envelope sender
(MAIL FROM, the Return-Path a bounce goes back to) names its own send, signed; the From header
stays the tenant's. Without it, the envelope sender is the From address, as before."""

from __future__ import annotations

from email.utils import parseaddr

import pytest

from growth.job_ids import JobKey
from growth.models import Send
from growth.sending import verp
from growth.sending.worker import Worker
from tests.scenarios import approved_campaign, statuses

pytestmark = pytest.mark.django_db(transaction=True)


def run_worker() -> None:
    Worker(batch_size=4, tick=0.05, lease=30, until_idle=True).run()


def test_each_message_bounces_back_to_an_address_naming_its_own_send(smtp_settings, settings):
    settings.BOUNCE_DOMAIN = "bounces.growth.example"
    campaign = approved_campaign(count=6)

    run_worker()

    assert statuses(campaign) == {"sent": 6}
    accepted = smtp_settings.handler.accepted
    assert len(accepted) == 6
    rows = {row.email_lower: row for row in Send.objects.filter(campaign=campaign)}
    for message in accepted:
        row = rows[message.recipient.lower()]
        assert message.envelope_from == verp.return_path(row.job_id)
        assert message.envelope_from.startswith("bounces+")
        assert message.envelope_from.endswith("@bounces.growth.example")
        assert verp.job_of(message.envelope_from) == JobKey(campaign.id, row.subscriber_id)
        assert parseaddr(message.message["From"])[1] == campaign.account.from_email
    assert len({m.envelope_from for m in accepted}) == 6


def test_without_a_bounce_domain_the_envelope_sender_is_the_from_address(smtp_settings, settings):
    settings.BOUNCE_DOMAIN = ""
    campaign = approved_campaign(count=3)

    run_worker()

    assert statuses(campaign) == {"sent": 3}
    assert {m.envelope_from for m in smtp_settings.handler.accepted} == {campaign.account.from_email}


def test_a_test_message_names_no_send(smtp_settings, settings):
    from growth.operations.previews import send_test_message

    settings.BOUNCE_DOMAIN = "bounces.growth.example"
    campaign = approved_campaign(count=1)
    send_test_message(campaign_id=campaign.id, to="operator@example.com")
    (message,) = smtp_settings.handler.accepted
    assert message.envelope_from == campaign.account.from_email


@pytest.mark.parametrize("secret", ["django-insecure-a-key", "a key with ü in it", "short"])
def test_the_signature_is_still_djangos_salted_hmac(settings, secret):
    """The key is derived once per secret now: addresses already out keep verifying."""
    from django.utils.crypto import salted_hmac

    settings.BOUNCE_DOMAIN = "bounces.growth.example"
    settings.SECRET_KEY = secret
    signature = salted_hmac(verp.SALT, "12.34", secret=secret, algorithm="sha256").hexdigest()
    assert verp.return_path("campaign:12:34") == (
        f"{settings.BOUNCE_LOCAL_PART}+12.34.{signature[:verp.SIGNATURE_LENGTH]}"
        "@bounces.growth.example")
