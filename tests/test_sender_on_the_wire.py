"""The sender rule where mail goes out, whoever saved the sender and whenever: approve, send now
and resume refuse a campaign whose account sends as another account's verified domain, and
their confirmation pages warn of a sender the rule refuses otherwise (which still goes out); the
worker pauses a campaign that took such a sender, with the reason, and sends none of it; and only
a verified key of a tenant's signs its mail."""

from __future__ import annotations

from datetime import timedelta
from email.utils import parseaddr

import pytest
from django.contrib.admin.models import LogEntry
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from growth.models import Account, Campaign, Send
from growth.operations.campaigns import approve_campaign, resume_campaign, send_now
from growth.sending import dkim
from growth.sending.worker import Worker
from tests.factories import AccountFactory, CampaignFactory
from tests.helpers import confirm, texts
from tests.scenarios import approved_campaign, sending_campaign, statuses
from tests.test_sender_domains import page_text, sending_domain

IMPERSONATES = "is on globex.example, a sending domain another account has verified"


def send_as(account: Account, address: str) -> None:
    """A sender saved past the form: before the rule, by a script, or before another account
    verified its domain."""
    Account.objects.filter(pk=account.pk).update(from_email=address)


def do_url(campaign: Campaign, name: str) -> str:
    return reverse("admin:growth_campaign_transition", args=[campaign.pk, name])


def status_of(campaign: Campaign) -> str:
    campaign.refresh_from_db()
    return campaign.status


# --- the operator's decisions ----------------------------------------------------------------


@pytest.mark.django_db
def test_approve_send_now_and_resume_refuse_a_sender_on_another_accounts_verified_domain(
        tenant, other_tenant):
    paused = sending_campaign(1, account=tenant)
    assert Campaign.objects.pause(campaign_id=paused.id)
    draft = CampaignFactory(account=tenant)
    approved = approved_campaign(1, account=tenant, scheduled_for=timezone.now() + timedelta(days=1))
    sending_domain(other_tenant, "globex.example")
    send_as(tenant, "ceo@globex.example")

    decisions = [lambda: approve_campaign(campaign_id=draft.id, send_now=True),
                 lambda: send_now(campaign_id=draft.id),
                 lambda: send_now(campaign_id=approved.id),
                 lambda: resume_campaign(campaign_id=paused.id)]
    for decide in decisions:
        with pytest.raises(ValidationError) as refused:
            decide()
        assert (f"It cannot go out: its sender ceo@globex.example {IMPERSONATES}"
                in " ".join(refused.value.messages))
        assert "Globex" not in " ".join(refused.value.messages)  # which account: not said

    assert (status_of(draft), status_of(approved), status_of(paused)) == (
        "draft", "approved", "paused")


@pytest.mark.django_db
def test_even_a_superuser_is_refused_it_in_the_admin_with_the_reason_and_no_history(
        admin_client, tenant, other_tenant):
    campaign = sending_campaign(2, account=tenant)
    assert Campaign.objects.pause(campaign_id=campaign.id)
    sending_domain(other_tenant, "globex.example")
    send_as(tenant, "ceo@globex.example")

    page = page_text(admin_client.get(do_url(campaign, "resume")))
    assert f"It cannot go out: its sender ceo@globex.example {IMPERSONATES}" in page
    response = confirm(admin_client, do_url(campaign, "resume"), follow=True)

    shown = " ".join(texts(response))
    assert "1 not resumed:" in shown
    assert f"It cannot go out: its sender ceo@globex.example {IMPERSONATES}" in shown
    assert status_of(campaign) == "paused"
    assert not LogEntry.objects.filter(object_id=str(campaign.pk)).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["approve", "send_now"])
def test_the_confirmation_warns_of_a_sender_the_rule_refuses_otherwise_and_it_goes_ahead(
        client, staff, tenant, name):
    send_as(tenant, "news@acme-by-contract.example")  # an outside domain, saved before the rule
    campaign = CampaignFactory(account=tenant, scheduled_for=timezone.now())

    page = client.get(do_url(campaign, name)).content.decode()

    assert 'class="growth-confirm__warning"' in page
    assert ("Its sender news@acme-by-contract.example is one the rule refuses to the account"
            "&#x27;s members; it goes out as that sender all the same. acme-by-contract.example "
            "is not one of this account&#x27;s verified sending domains.") in page
    confirm(client, do_url(campaign, name))
    assert status_of(campaign) == "approved"
    assert LogEntry.objects.get(object_id=str(campaign.pk)).user == staff

    sending_domain(tenant, "acme-by-contract.example")  # verified: nothing to warn of
    other = CampaignFactory(account=tenant)
    assert "growth-confirm__warning" not in client.get(do_url(other, name)).content.decode()


@pytest.mark.django_db
def test_the_resume_confirmation_warns_of_the_sender_it_will_take_and_pausing_does_not(
        client, staff, tenant):
    campaign = sending_campaign(2, account=tenant)  # tenant<n>.example: never verified

    assert "growth-confirm__warning" not in client.get(do_url(campaign, "pause")).content.decode()
    assert Campaign.objects.pause(campaign_id=campaign.id)
    page = client.get(do_url(campaign, "resume")).content.decode()

    assert f"Its sender {tenant.from_email} is one the rule refuses" in page
    confirm(client, do_url(campaign, "resume"))
    assert status_of(campaign) == "sending"


# --- the worker ------------------------------------------------------------------------------


def senders(smtp_server) -> list[str]:
    return [parseaddr(accepted.message["From"])[1] for accepted in smtp_server.handler.accepted]


def run_worker() -> None:
    Worker(batch_size=10, tick=0.05, lease=30, until_idle=True).run()


@pytest.mark.django_db(transaction=True)
def test_the_worker_pauses_a_campaign_that_starts_as_another_accounts_domain_and_sends_none(
        smtp_settings):
    globex = AccountFactory(name="Globex")
    impersonating = approved_campaign(4)  # approved before Globex verified its domain
    sending_domain(globex, "globex.example")
    send_as(impersonating.account, "ceo@globex.example")
    outside = approved_campaign(3)  # a sender the rule refuses otherwise still goes out
    send_as(outside.account, "news@acme-by-contract.example")

    run_worker()

    impersonating.refresh_from_db()
    assert impersonating.status == "paused"
    assert f"ImpersonatingSender: its sender ceo@globex.example {IMPERSONATES}" in \
        impersonating.pause_reason
    rows = Send.objects.filter(campaign=impersonating)
    assert {(row.status, row.attempts) for row in rows} == {("queued", 0)}
    assert statuses(outside) == {"sent": 3}
    assert senders(smtp_settings) == ["news@acme-by-contract.example"] * 3


@pytest.mark.django_db(transaction=True)
def test_a_campaign_resumed_past_the_admin_as_another_accounts_domain_is_paused_again(
        smtp_settings):
    globex = AccountFactory(name="Globex")
    campaign = sending_campaign(4, account__from_email="news@acme.example")
    worker = Worker(batch_size=2, tick=0.01, lease=30, once=True)
    worker.run()  # two sent as news@acme.example
    assert Campaign.objects.pause(campaign_id=campaign.id)
    sending_domain(globex, "globex.example")
    send_as(campaign.account, "ceo@globex.example")
    assert Campaign.objects.resume(campaign_id=campaign.id)  # a script: not the operator's check

    worker.run()  # the same worker: its renderer was built for the old sender

    campaign.refresh_from_db()
    assert campaign.status == "paused" and IMPERSONATES in campaign.pause_reason
    assert statuses(campaign) == {"sent": 2, "queued": 2}
    assert senders(smtp_settings) == ["news@acme.example"] * 2


# --- DKIM: a tenant's key signs once verified ------------------------------------------------


@pytest.mark.django_db
def test_a_tenants_key_signs_only_once_verified_else_as_if_it_were_not_there(settings, tenant):
    settings.DKIM_DOMAIN, settings.DKIM_PRIVATE_KEY_FILE = "growth.example", ""
    send_as(tenant, "news@mail.acme.example")
    own = sending_domain(tenant, "mail.acme.example", verified=False, selector="own")
    parent = sending_domain(tenant, "acme.example", verified=False, selector="parent")
    sending_domain(None, "growth.example", verified=False, selector="platform")

    def signing() -> tuple[str, str] | None:
        signer = dkim.signer_for(account_id=tenant.id, from_email="news@mail.acme.example")
        return signer and (signer.domain, signer.selector)

    # none verified: the platform's key (a platform row signs verified or not)
    assert signing() == ("growth.example", "platform")
    parent.verified_at = timezone.now()
    parent.save()
    assert signing() == ("acme.example", "parent")
    own.verified_at = timezone.now()
    own.save()
    assert signing() == ("mail.acme.example", "own")


@pytest.mark.django_db
def test_an_unverified_key_and_no_platform_key_send_unsigned(tenant):
    send_as(tenant, "news@acme.example")
    row = sending_domain(tenant, "acme.example", verified=False)

    assert dkim.signer_for(account_id=tenant.id, from_email="news@acme.example") is None
    row.verified_at = timezone.now()
    row.save()
    assert dkim.signer_for(account_id=tenant.id, from_email="news@acme.example").domain == \
        "acme.example"


@pytest.mark.django_db
def test_a_test_message_is_not_sent_in_another_accounts_name_either(
        smtp_settings, tenant, other_tenant):
    from growth.operations.previews import send_test_message

    campaign = CampaignFactory(account=tenant)
    sending_domain(other_tenant, "globex.example")
    send_as(tenant, "ceo@globex.example")

    with pytest.raises(ValidationError) as refused:
        send_test_message(campaign_id=campaign.id, to="operator@example.com")

    assert f"No test was sent: its sender ceo@globex.example {IMPERSONATES}" in " ".join(
        refused.value.messages)
    assert smtp_settings.handler.accepted == []


@pytest.mark.django_db(transaction=True)
def test_a_running_campaign_stops_once_another_account_verifies_its_senders_domain(
        smtp_settings, monkeypatch):
    """A worker that built the campaign's renderer before Globex verified globex.example does
    not go on sending the rest as Globex: a kept renderer is built anew, its sender checked, at
    least every RENDERER_FRESH_FOR seconds (here at once)."""
    monkeypatch.setattr("growth.sending.worker.RENDERER_FRESH_FOR", 0.0)
    globex = AccountFactory(name="Globex")
    campaign = sending_campaign(4, account__from_email="ceo@globex.example")  # nobody's yet
    worker = Worker(batch_size=2, tick=0.01, lease=30, once=True)
    worker.run()  # two sent as ceo@globex.example: no account had verified the domain
    assert statuses(campaign) == {"sent": 2, "queued": 2}

    sending_domain(globex, "globex.example")  # Globex proves the domain is its own
    worker.run()  # the same worker, its renderer cached

    campaign.refresh_from_db()
    assert senders(smtp_settings) == ["ceo@globex.example"] * 2, senders(smtp_settings)
    assert campaign.status == "paused" and IMPERSONATES in campaign.pause_reason
    assert statuses(campaign) == {"sent": 2, "queued": 2}
