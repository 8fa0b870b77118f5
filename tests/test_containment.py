"""One tenant's bad input never stops anyone else: a campaign that cannot be sent as it is
pauses with its reason, its rows untouched, while the worker goes on with every other one."""

from __future__ import annotations

import subprocess

import pytest
from django.core import mail
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.core.mail.backends import locmem

from growth.models import Account, Campaign, Send, Subscriber, Suppression
from growth.sending.sender import from_header, sender_address
from growth.sending.transports.base import BaseTransport, Delivery, Outcome
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.transports.errors import TransportBroke
from growth.sending.worker import Worker
from tests.factories import AccountFactory, SegmentFactory, SubscriberFactory
from tests.helpers import manage, subprocess_env
from tests.scenarios import approved_campaign, run_worker, statuses

# Saved past the forms (an older row, a script, the shell): the engine must hold on its own.
POISONS = {
    "a line break in the sender's name": {"account": {"from_name": "Acme\r\nBcc: all@example.com"}},
    "a control character in the sender's name": {"account": {"from_name": "Ac\x1bme"}},
    "a non-ASCII local part": {"account": {"from_email": "nëws@acme.example"}},
    "not an address at all": {"account": {"from_email": "news at acme"}},
    "a template that fails for everyone": {"campaign": {"body_text": "{{ email|wordwrap:0 }}"}},
    "a template that does not compile": {"campaign": {"subject": "Hi {% if %}"}},
    # Django's full language renders this 16**7 times: the worker never came back to anyone
    "a template that would render for ever": {"campaign": {
        "body_text": '{% for a in "0123456789abcdef" %}' * 7 + "x" + "{% endfor %}" * 7}},
}


def poison(campaign: Campaign, how: dict) -> None:
    Account.objects.filter(id=campaign.account_id).update(**how.get("account", {}))
    Campaign.objects.filter(id=campaign.id).update(**how.get("campaign", {}))


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_poison_campaigns_pause_alone_and_run_sender_finishes_the_rest_and_exits_0(smtp_server):
    healthy = approved_campaign(count=40)
    poisoned = {}
    for name, how in POISONS.items():
        campaign = approved_campaign(count=5)
        poison(campaign, how)
        poisoned[name] = campaign

    result = subprocess.run(manage("run_sender", "--until-idle", "--batch-size", "10", "--tick",
                                   "0.1"),
                            env=subprocess_env(EMAIL_URL=smtp_server.url), capture_output=True,
                            timeout=120)

    assert result.returncode == 0, result.stderr.decode()[-3000:]
    healthy.refresh_from_db()
    assert healthy.status == "sent" and statuses(healthy) == {"sent": 40}
    assert len(smtp_server.handler.accepted) == 40
    for name, campaign in poisoned.items():
        campaign.refresh_from_db()
        assert campaign.status == "paused", name
        assert campaign.pause_reason, name
        rows = Send.objects.filter(campaign=campaign)
        assert {(r.status, r.attempts, r.claimed_by) for r in rows} <= {("queued", 0, "")}, name
        assert rows.count() == 5, name


@pytest.mark.django_db(transaction=True)
def test_a_paused_poison_campaign_resumed_after_the_fix_is_sent(smtp_settings):
    campaign = approved_campaign(count=6)
    poison(campaign, POISONS["a line break in the sender's name"])
    Worker(batch_size=10, tick=0.05, until_idle=True).run()
    campaign.refresh_from_db()
    assert (campaign.status, statuses(campaign)) == ("paused", {"queued": 6})
    assert "BadHeaderError" in campaign.pause_reason or "line" in campaign.pause_reason

    Account.objects.filter(id=campaign.account_id).update(from_name="Acme")
    assert Campaign.objects.resume(campaign_id=campaign.id)
    Worker(batch_size=10, tick=0.05, until_idle=True).run()

    campaign.refresh_from_db()
    assert (campaign.status, campaign.pause_reason, statuses(campaign)) == ("sent", "", {"sent": 6})


class ExplodingTransport(BaseTransport):
    """A transport with a bug: it raises instead of returning outcomes, quoting what it was
    answered (a NUL, which PostgreSQL refuses in text, and a line break among it)."""

    idempotent = False

    def send_bulk(self, deliveries):
        raise RuntimeError("the provider's client library broke on\r\n'\x00'")


@pytest.mark.django_db(transaction=True)
def test_a_transport_that_raises_pauses_the_campaign_and_leaves_the_wire_chunk_in_doubt(settings):
    """The row protocol's; the lease protocol's is in tests/test_worker_leases.py."""
    settings.SENDER_PROTOCOL = "rows"
    settings.SENDER_HANDOFF_CHUNK = 5
    campaign = approved_campaign(count=12)

    Worker(batch_size=12, tick=0.05, until_idle=True, transport=ExplodingTransport(),
           connections=2).run()

    campaign.refresh_from_db()
    assert campaign.status == "paused"
    assert campaign.pause_reason == "RuntimeError: the provider's client library broke on ''"
    # the chunks handed over to the two wires may have gone out: they stay to lease expiry
    # (then 'unknown'); the rest never left and is queued again, its attempt not counted
    assert statuses(campaign) == {"sending": 10, "queued": 2}
    assert set(Send.objects.filter(status="queued").values_list("attempts", flat=True)) == {0}


class BreaksOnTheSecondMessage(locmem.EmailBackend):
    """Django's in-memory backend with a defect: its second message raises a TypeError (as
    anymail's Amazon SES backend did on bytes it could not rewrite), until it is mended."""

    calls = 0
    mended = False
    second = ""  # the address of the message it broke on

    def send_messages(self, messages):
        type(self).calls += 1
        if type(self).calls == 2 and not type(self).mended:
            type(self).second = messages[0].to[0]
            raise TypeError("a bytes-like object is required, not 'str'")
        return super().send_messages(messages)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_a_backend_that_breaks_pauses_the_campaign_at_once_not_after_two_days_of_retries(
        settings, protocol):
    """A defect is no answer of the receiver: the chunk stops there and the campaign pauses
    with it. What went before is sent, what came after was never tried (queued again, no
    attempt counted), and the message it broke on may have gone out: a plain receiver's is
    'unknown', never sent again. Mended and resumed, everyone else gets the campaign once."""
    settings.SENDER_PROTOCOL = protocol
    settings.SENDER_HANDOFF_CHUNK = 5
    BreaksOnTheSecondMessage.calls, BreaksOnTheSecondMessage.mended = 0, False
    campaign = approved_campaign(count=8)
    transport = DjangoMailTransport(backend=f"{__name__}.BreaksOnTheSecondMessage")

    Worker(batch_size=8, tick=0.05, lease=2, until_idle=True, transport=transport,
           connections=1).run()

    campaign.refresh_from_db()
    assert campaign.status == "paused"
    assert campaign.pause_reason == "TypeError: a bytes-like object is required, not 'str'"
    assert len(mail.outbox) == 1
    broken_on = Send.objects.get(campaign=campaign, email=BreaksOnTheSecondMessage.second)
    # on leases, its lease's settle judges it at once; on rows, it waits for its lease's expiry
    assert broken_on.status == ("unknown" if protocol == "leases" else "sending")
    assert statuses(campaign)["queued"] == 6
    assert set(Send.objects.filter(campaign=campaign, status="queued")
               .values_list("attempts", flat=True)) == {0}

    BreaksOnTheSecondMessage.mended = True
    assert Campaign.objects.resume(campaign_id=campaign.id)
    run_worker(transport=DjangoMailTransport(backend=f"{__name__}.BreaksOnTheSecondMessage"),
               lease=2, connections=1)

    assert statuses(campaign) == {"sent": 7, "unknown": 1}
    mailed = [address for message in mail.outbox for address in message.to]
    assert len(mailed) == len(set(mailed)) == 7
    assert broken_on.email not in mailed


class BreaksOnOpening(locmem.EmailBackend):
    def open(self):
        raise AttributeError("'NoneType' object has no attribute 'client'")


def test_a_backend_that_breaks_on_opening_tried_nothing_and_says_so():
    transport = DjangoMailTransport(backend=f"{__name__}.BreaksOnOpening")
    deliveries = [Delivery(i, f"campaign:1:{i}", EmailMessage("s", "b", "news@acme.example",
                                                              [f"r{i}@example.com"]))
                  for i in (1, 2)]
    with pytest.raises(TransportBroke) as broke:
        transport.send_bulk(deliveries)
    assert [(o.send_id, o.kind) for o in broke.value.outcomes] == [(1, Outcome.REFUSED),
                                                                  (2, Outcome.REFUSED)]
    assert broke.value.outcomes[0].error.startswith("not tried: the transport broke")
    assert "AttributeError" in broke.value.outcomes[0].error


@pytest.mark.django_db(transaction=True)
def test_an_internationalised_sender_domain_is_sent_in_idna_form(smtp_settings):
    campaign = approved_campaign(count=2)
    Account.objects.filter(id=campaign.account_id).update(from_email="news@bücher.example",
                                                          from_name="Bücher & Co")
    Worker(batch_size=10, tick=0.05, until_idle=True).run()

    assert statuses(campaign) == {"sent": 2}
    accepted = smtp_settings.handler.accepted
    assert {a.envelope_from for a in accepted} == {"news@xn--bcher-kva.example"}
    assert all("<news@xn--bcher-kva.example>" in a.message["From"] for a in accepted)


@pytest.mark.django_db(transaction=True)
def test_a_recipient_whose_local_part_is_not_ascii_fails_alone_and_nothing_goes_to_another_mailbox(
        smtp_settings):
    """Saved past the forms: Django's client wrote RCPT TO:<=?utf-8?b?am9zw6k=?=@example.com>,
    another mailbox, and the row was recorded sent."""
    campaign = approved_campaign(count=2)
    subscriber = SubscriberFactory(segment=Subscriber.objects.filter(account=campaign.account_id)
                                   .first().segment, email="josé@example.com", status="confirmed")
    Worker(batch_size=10, tick=0.05, until_idle=True).run()

    assert statuses(campaign) == {"sent": 2, "failed": 1}
    failed = Send.objects.get(campaign=campaign, subscriber=subscriber)
    assert "josé@example.com cannot be mailed: its part before the @ is not ASCII" in failed.last_error
    assert sorted(a.recipient for a in smtp_settings.handler.accepted) == [
        "person0@example.com", "person1@example.com"]


@pytest.mark.django_db(transaction=True)
def test_a_recipient_domain_goes_on_the_wire_as_its_dedup_key_reads_it(smtp_settings):
    """IDNA 2008 (the dedup key, the registries) keeps ß and the joiners; Python's codec, which
    Django would use, reads straße.de as strasse.de: two keys, one mailbox, mailed twice, and
    a suppression of strasse.de did not stop the straße.de row."""
    campaign = approved_campaign(count=0)
    segment = SegmentFactory(account=campaign.account)
    for email in ("john@strasse.de", "john@straße.de", "ana@straße.de"):
        SubscriberFactory(segment=segment, email=email, status="confirmed")
    Suppression.objects.suppress(account_id=campaign.account_id, email_lower="john@strasse.de",
                                 reason="complained")
    Worker(batch_size=10, tick=0.05, until_idle=True).run()

    assert statuses(campaign) == {"sent": 2}  # john@strasse.de: suppressed, not built
    accepted = smtp_settings.handler.accepted
    assert sorted(a.recipient for a in accepted) == ["ana@xn--strae-oqa.de",
                                                     "john@xn--strae-oqa.de"]
    assert all(a.message["To"] == a.recipient for a in accepted)


@pytest.mark.parametrize(("name", "address", "error"), [
    ("Acme\r\nBcc: x@example.com", "news@acme.example", "line break"),
    ("Ac\x00me", "news@acme.example", "control character"),
    ("Acme", "nëws@acme.example", "must be ASCII"),
    ("A" * 201, "news@acme.example", "longer than 200"),
])
def test_a_sender_that_cannot_stand_in_a_header_is_refused_with_the_reason(name, address, error):
    with pytest.raises(ValidationError, match=error):
        from_header(name=name, address=address)


def test_an_idn_sender_is_accepted_and_encoded():
    assert sender_address("news@bücher.example") == "news@xn--bcher-kva.example"
    assert from_header(name="Bücher", address="news@bücher.example").endswith(
        "<news@xn--bcher-kva.example>")


@pytest.mark.django_db
def test_the_account_form_refuses_such_a_sender_with_a_clear_message(client, admin_client):
    account = AccountFactory()
    url = f"/admin/growth/account/{account.id}/change/"
    data = {"name": "Acme", "slug": account.slug, "from_email": "nëws@acme.example",
            "from_name": "Acme\r\nBcc: x@example.com", "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0"}

    response = admin_client.post(url, data)

    assert response.status_code == 200
    body = response.content.decode()
    assert "must be ASCII" in body and "line break" in body
    account.refresh_from_db()
    assert account.from_email != "nëws@acme.example"


@pytest.mark.django_db
def test_the_campaign_page_of_a_poisoned_account_shows_the_reason_not_a_500(admin_client):
    campaign = approved_campaign(count=1)
    poison(campaign, POISONS["a line break in the sender's name"])
    Campaign.objects.filter(id=campaign.id).update(status="paused",
                                                   pause_reason="BadHeaderError: a line break")

    response = admin_client.get(f"/admin/growth/campaign/{campaign.id}/change/")

    assert response.status_code == 200
    body = response.content.decode()
    assert "The campaign cannot be rendered" in body and "line break" in body
    assert "cannot be sent as it is" in body
    listing = admin_client.get("/admin/growth/campaign/").content.decode()
    assert "cannot be sent: BadHeaderError" in listing


@pytest.mark.django_db(transaction=True)
def test_a_settle_with_an_over_long_provider_id_is_recorded_not_fatal(smtp_settings):
    campaign = approved_campaign(count=2)

    class LongIds(DjangoMailTransport):
        def send_bulk(self, deliveries):
            return [o.__class__(o.send_id, o.kind, provider_message_id="x" * 400, error=o.error)
                    for o in super().send_bulk(deliveries)]

    Worker(batch_size=10, tick=0.05, until_idle=True, transport=LongIds()).run()

    assert statuses(campaign) == {"sent": 2}
    assert {len(p) for p in Send.objects.values_list("provider_message_id", flat=True)} == {255}


class BreaksOnTheFifthMessage(locmem.EmailBackend):
    calls = 0

    def send_messages(self, messages):
        type(self).calls += 1
        if type(self).calls == 5:
            raise TypeError("a bytes-like object is required, not 'str'")
        return super().send_messages(messages)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_an_idempotent_wire_stops_at_a_defect_that_ends_a_chunk(settings, protocol):
    """An idempotent receiver's share goes out a chunk at a time: a defect on the last message of
    a chunk leaves no untried outcome in it, and the wire must still send nothing more through
    the transport that broke, for a campaign already paused."""
    settings.SENDER_PROTOCOL = protocol
    settings.SENDER_HANDOFF_CHUNK = 5
    BreaksOnTheFifthMessage.calls = 0
    campaign = approved_campaign(count=15)
    transport = DjangoMailTransport(backend=f"{__name__}.BreaksOnTheFifthMessage",
                                    idempotent=True)
    Worker(batch_size=15, tick=0.05, lease=60, once=True, transport=transport,
           connections=1).run()
    campaign.refresh_from_db()
    assert campaign.status == "paused"
    assert len(mail.outbox) == 4, (len(mail.outbox), statuses(campaign))
    # the one it broke on may have gone out: it goes again under its key; the rest never left
    assert statuses(campaign) == {"sent": 4, "queued": 11}
