"""ESP feedback webhooks -> per-tenant suppressions, through anymail's real views at their URLs.

Each ESP's documented payload (tests/webhook_payloads.py) is posted with the ESP's own
authentication: basic auth with the webhook secret everywhere, plus Mailgun's HMAC signature and
Resend's svix signature computed here.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.db import OperationalError
from django.test import Client

from growth.models import Account, Campaign, FeedbackEvent, Send, Subscriber, Suppression, WebhookToken
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import concurrently
from tests.webhook_payloads import (
    ALL,
    ANYMAIL_SETTINGS,
    MAILGUN_SIGNING_KEY,
    WEBHOOK_SECRET,
    AmazonSES,
    Mailgun,
    Postmark,
    Resend,
    SendGrid,
)

pytestmark = [
    pytest.mark.django_db,
    # anymail 15 still ships SendGrid's webhook, but warns that it no longer supports it
    pytest.mark.filterwarnings("ignore::anymail.exceptions.AnymailNotSupportedWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
ADDRESS = "Bounce.Me@Example.COM"  # as the ESP reports it
EMAIL_LOWER = "bounce.me@example.com"
RACERS = 6
ESPS = pytest.mark.parametrize("esp", ALL, ids=lambda esp: esp.__name__)


@dataclass
class World:
    """Tenant A mailed the address (one send, two subscriber rows in two segments); tenant B has
    the same address and must never be touched."""

    account: Account
    campaign: Campaign
    send: Send
    subscribers: list[Subscriber]
    other_account: Account
    elsewhere: Subscriber

    def metadata(self, **overrides) -> dict[str, str]:
        """What the sending side attaches to every message (ESPs hand it back as strings)."""
        return {"account_id": str(self.account.id), "campaign_id": str(self.campaign.id),
                "job_id": self.send.job_id, **overrides}


@pytest.fixture(autouse=True)
def webhook_settings(settings):
    settings.ANYMAIL = dict(ANYMAIL_SETTINGS)


@pytest.fixture(autouse=True)
def no_unexpected_errors(caplog):
    """A receiver that hides a programming error behind a 200 would pass every other assertion."""
    caplog.set_level(logging.INFO, logger="growth.feedback")
    yield
    errors = [r for r in caplog.get_records("call")
              if r.name == "growth.feedback" and r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


@pytest.fixture
def client() -> Client:
    # an unhandled exception must come back as the 500 the ESP would see
    return Client(raise_request_exception=False)


@pytest.fixture
def world() -> World:
    account = AccountFactory()
    campaign = CampaignFactory(account=account)
    first = SubscriberFactory(segment=SegmentFactory(account=account), email=ADDRESS)
    second = SubscriberFactory(segment=SegmentFactory(account=account), email="bounce.me@example.com")
    send = Send.objects.create(campaign=campaign, account=account, subscriber=first,
                               email=first.email, email_lower=first.email_lower,
                               job_id=f"campaign:{campaign.id}:{first.id}", status="sent",
                               provider_message_id="provider-id-of-another-esp")
    other_account = AccountFactory()
    elsewhere = SubscriberFactory(segment=SegmentFactory(account=other_account), email=ADDRESS)
    CampaignFactory(account=other_account)
    return World(account, campaign, send, [first, second], other_account, elsewhere)


def statuses(world: World) -> list[str]:
    return [Subscriber.objects.get(id=s.id).status for s in world.subscribers]


def assert_other_tenant_untouched(world: World) -> None:
    assert not Suppression.objects.filter(account=world.other_account).exists()
    assert Subscriber.objects.get(id=world.elsewhere.id).status == "confirmed"
    assert not FeedbackEvent.objects.filter(account=world.other_account).exists()


def assert_nothing_suppressed(world: World) -> None:
    assert not Suppression.objects.exists()
    assert statuses(world) == ["confirmed", "confirmed"]
    assert Subscriber.objects.get(id=world.elsewhere.id).status == "confirmed"


def assert_recorded_unattributed(world: World, because: str) -> None:
    event = only_event()
    assert (event.account, event.campaign, event.send, event.suppressed) == (None, None, None, False)
    assert because in event.unattributed_because
    assert_nothing_suppressed(world)


def assert_nothing_written(world: World) -> None:
    assert not FeedbackEvent.objects.exists()
    assert not Suppression.objects.exists()
    assert statuses(world) == ["confirmed", "confirmed"]
    assert Subscriber.objects.get(id=world.elsewhere.id).status == "confirmed"


def reasons() -> list[str]:
    """The reasons of every suppression, of any tenant."""
    return list(Suppression.objects.values_list("reason", flat=True))


def only_suppression() -> tuple:
    [suppression] = Suppression.objects.all()
    return (suppression.account, suppression.email_lower, suppression.reason,
            suppression.campaign)


def only_event() -> FeedbackEvent:
    [event] = FeedbackEvent.objects.all()
    return event


# --- what each kind of feedback does ---------------------------------------------------------


@ESPS
def test_a_hard_bounce_suppresses_the_address_for_its_tenant(client, world, esp):
    response = esp.post(client, esp.hard_bounce(ADDRESS, world.metadata()))

    assert response.status_code == 200
    assert only_suppression() == (world.account, EMAIL_LOWER, "bounced", world.campaign)
    event = only_event()
    assert (event.esp, event.event_type, event.email_lower) == (esp.name, "bounced", EMAIL_LOWER)
    assert event.suppressed
    assert (event.account, event.campaign, event.send) == (world.account, world.campaign, world.send)
    assert event.event_id and event.occurred_at is not None
    assert statuses(world) == ["confirmed", "confirmed"]  # a bounce is not an opt-out
    assert_other_tenant_untouched(world)


SOFT = [(esp, kind) for esp in ALL for kind in esp.soft_bounces(ADDRESS, {})]


@pytest.mark.parametrize(("esp", "kind"), SOFT, ids=[f"{e.__name__}-{k}" for e, k in SOFT])
def test_a_soft_bounce_or_delay_is_recorded_without_suppressing(client, world, esp, kind):
    response = esp.post(client, esp.soft_bounces(ADDRESS, world.metadata())[kind])

    assert response.status_code == 200
    event = only_event()
    assert event.event_type in ("bounced", "deferred")
    assert not event.suppressed
    assert (event.account, event.campaign, event.send) == (world.account, world.campaign, world.send)
    assert not Suppression.objects.exists()
    assert statuses(world) == ["confirmed", "confirmed"]


@ESPS
def test_a_complaint_suppresses_and_unsubscribes_every_row_of_the_address(client, world, esp):
    response = esp.post(client, esp.complaint(ADDRESS, world.metadata()))

    assert response.status_code == 200
    assert only_suppression() == (world.account, EMAIL_LOWER, "complained", world.campaign)
    assert only_event().event_type == "complained"
    assert statuses(world) == ["unsubscribed", "unsubscribed"]
    assert_other_tenant_untouched(world)


OPT_OUTS = [esp for esp in ALL if esp.unsubscribe is not None]


@pytest.mark.parametrize("esp", OPT_OUTS, ids=lambda esp: esp.__name__)
def test_an_opt_out_at_the_esp_suppresses_and_unsubscribes(client, world, esp):
    response = esp.post(client, esp.unsubscribe(ADDRESS, world.metadata()))

    assert response.status_code == 200
    assert only_suppression() == (world.account, EMAIL_LOWER, "unsubscribed", world.campaign)
    assert only_event().event_type == "unsubscribed"
    assert statuses(world) == ["unsubscribed", "unsubscribed"]
    assert_other_tenant_untouched(world)


def test_a_sendgrid_group_unsubscribe_is_an_opt_out(client, world):
    batch = SendGrid.event(ADDRESS, world.metadata(), "group_unsubscribe", "sg-group-1",
                           asm_group_id=10, useragent="Mozilla/5.0", ip="255.255.255.255")
    assert SendGrid.post(client, batch).status_code == 200
    assert Suppression.objects.get().reason == "unsubscribed"


@pytest.mark.parametrize(("reason", "suppressed_as"), [
    ("Bounced Address", "bounced"),
    ("Unsubscribed Address", "unsubscribed"),
    ("Spam Reporting Address", "complained"),
    ("Invalid", None),
])
def test_a_sendgrid_drop_suppresses_only_for_the_addresss_history(client, world, reason,
                                                                   suppressed_as):
    batch = SendGrid.dropped(ADDRESS, world.metadata(), reason, "sg-dropped-1")
    assert SendGrid.post(client, batch).status_code == 200

    event = only_event()
    assert event.event_type == "rejected"
    assert event.suppressed is (suppressed_as is not None)
    assert reasons() == ([suppressed_as] if suppressed_as else [])


@pytest.mark.parametrize(("reason", "code", "suppressed_as"), [
    ("suppress-bounce", 605, "bounced"),
    ("suppress-complaint", 607, "complained"),
    ("suppress-unsubscribe", 606, "unsubscribed"),
    ("generic", 550, None),
    ("old", 498, None),
])
def test_a_mailgun_permanent_failure_suppresses_only_bounces_and_the_addresss_history(
        client, world, reason, code, suppressed_as):
    payload = Mailgun.failed(ADDRESS, world.metadata(), "mg-token-" + reason, severity="permanent",
                             reason=reason, code=code, message="",
                             description="Not delivering to previously bounced address")
    assert Mailgun.post(client, payload).status_code == 200

    assert only_event().suppressed is (suppressed_as is not None)
    assert reasons() == ([suppressed_as] if suppressed_as else [])


@pytest.mark.parametrize(("payload", "event_type", "suppressed_as"), [
    (Postmark.bounce(ADDRESS, {}, kind="BadEmailAddress", type_code=100000), "rejected", None),
    (Postmark.subscription_change(ADDRESS, {}, reason="HardBounce"), "bounced", "bounced"),
    (Postmark.subscription_change(ADDRESS, {}, reason="SpamComplaint"), "complained",
     "complained"),
    (Postmark.bounce(ADDRESS, {}, kind="SpamNotification", type_code=512), "complained", None),
], ids=["BadEmailAddress", "deactivated-after-HardBounce", "deactivated-after-SpamComplaint",
        "SpamNotification-is-a-filter-not-a-complaint"])
def test_postmark_record_types(client, world, payload, event_type, suppressed_as):
    payload = {**payload, "Metadata": world.metadata()}
    assert Postmark.post(client, payload).status_code == 200

    event = only_event()
    assert (event.event_type, event.suppressed) == (event_type, suppressed_as is not None)
    assert reasons() == ([suppressed_as] if suppressed_as else [])


@ESPS
def test_deliveries_are_not_kept(client, world, esp):
    deliveries = {
        Postmark: {"RecordType": "Delivery", "ServerID": 23, "MessageStream": "outbound",
                   "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483", "Recipient": ADDRESS,
                   "Tag": "welcome-email", "DeliveredAt": "2019-11-05T16:33:54.9070259Z",
                   "Details": "Test delivery webhook details", "Metadata": world.metadata()},
        SendGrid: SendGrid.event(ADDRESS, world.metadata(), "delivered", "sg-delivered-1",
                                 response="250 OK"),
        Mailgun: Mailgun.signed(Mailgun.event_data(ADDRESS, world.metadata(), "delivered"),
                                "mg-delivered-1"),
        Resend: Resend.event(ADDRESS, world.metadata(), "email.delivered"),
        AmazonSES: AmazonSES.notification({
            "eventType": "Delivery", "mail": AmazonSES.mail(ADDRESS, world.metadata()),
            "delivery": {"timestamp": "2016-10-19T23:21:04.133Z", "processingTimeMillis": 11893,
                         "recipients": [ADDRESS], "smtpResponse": "250 2.6.0 Message received",
                         "reportingMTA": "mta.example.com"}}, "sns-delivery-1"),
    }
    assert esp.post(client, deliveries[esp]).status_code == 200
    assert_nothing_written(world)


# --- once, and only for the right tenant --------------------------------------------------------


@ESPS
def test_the_same_event_twice_changes_nothing(client, world, esp):
    payload = esp.hard_bounce(ADDRESS, world.metadata())
    assert esp.post(client, payload).status_code == 200
    first = only_event()
    # an operator lifts the suppression: a late retry of the old event must not bring it back
    Suppression.objects.all().delete()

    assert esp.post(client, payload).status_code == 200

    assert only_event() == first
    assert not Suppression.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_same_event_posted_by_racing_retries_acts_once(world):
    payload = AmazonSES.complaint(ADDRESS, world.metadata())

    answers = concurrently(RACERS, lambda i: AmazonSES.post(Client(), payload).status_code)

    assert answers == [200] * RACERS
    assert FeedbackEvent.objects.count() == 1
    assert only_suppression() == (world.account, EMAIL_LOWER, "complained", world.campaign)
    assert statuses(world) == ["unsubscribed", "unsubscribed"]


def test_an_event_without_an_id_gets_a_stable_derived_one(client, world):
    payload = Postmark.unsubscribe(ADDRESS, world.metadata())
    assert "ID" not in payload
    Postmark.post(client, payload)
    Postmark.post(client, payload)

    assert only_event().event_id.startswith("derived:")
    assert Suppression.objects.count() == 1


def test_two_different_events_for_one_address_are_both_kept_and_the_first_reason_stays(client, world):
    Postmark.post(client, Postmark.hard_bounce(ADDRESS, world.metadata()))
    Postmark.post(client, Postmark.complaint(ADDRESS, world.metadata()))

    assert FeedbackEvent.objects.count() == 2
    assert Suppression.objects.get().reason == "bounced"
    assert statuses(world) == ["unsubscribed", "unsubscribed"]  # the complaint still opts out


@ESPS
def test_an_event_naming_no_send_of_ours_is_recorded_unattributed_and_suppresses_nothing(
        client, world, esp, caplog):
    metadata = {"account_id": "987654321", "campaign_id": "1", "job_id": "campaign:0:0"}

    response = esp.post(client, esp.hard_bounce(ADDRESS, metadata))

    assert response.status_code == 200
    assert_recorded_unattributed(world, "names no send of ours")
    [warning] = [r for r in caplog.records if r.name == "growth.feedback"
                 and r.levelno == logging.WARNING]
    assert warning.esp == esp.name and "not attributed" in warning.getMessage()


@pytest.mark.parametrize("metadata", [{}, {"account_id": "not-a-number"},
                                      {"account_id": "99999999999999999999999"},
                                      {"account_id": None, "job_id": 17}])
def test_metadata_that_names_nobody_attributes_nothing(client, world, metadata):
    assert SendGrid.post(client, SendGrid.hard_bounce(ADDRESS, metadata)).status_code == 200
    assert_recorded_unattributed(world, "names no send of ours")


def test_the_account_in_the_metadata_alone_attributes_nothing(client, world):
    metadata = world.metadata()
    del metadata["job_id"]
    Postmark.post(client, Postmark.hard_bounce(ADDRESS, metadata))

    assert_recorded_unattributed(world, "names no send of ours")


def test_a_campaign_of_another_tenant_in_the_metadata_is_not_attributed(client, world):
    foreign = Campaign.objects.filter(account=world.other_account).get()
    metadata = {"account_id": str(world.account.id), "campaign_id": str(foreign.id)}
    Postmark.post(client, Postmark.hard_bounce(ADDRESS, metadata))

    assert_recorded_unattributed(world, "names no send of ours")
    assert_other_tenant_untouched(world)


def test_the_providers_message_id_finds_the_send_without_metadata(client, world):
    world.send.provider_message_id = "883953f4-6105-42a2-a16a-77a8eac79483"
    world.send.save(update_fields=["provider_message_id"])

    Postmark.post(client, Postmark.hard_bounce(ADDRESS, {}))

    event = only_event()
    assert (event.account, event.campaign, event.send) == (world.account, world.campaign, world.send)


def test_our_own_message_id_finds_the_send(client, world):
    # relayed with the Message-ID the engine sets: <campaign.<cid>.<sid>@domain>
    payload = Mailgun.hard_bounce(ADDRESS, {})
    our_id = f"campaign.{world.campaign.id}.{world.subscribers[0].id}@growth.example.com"
    payload["event-data"]["message"]["headers"]["message-id"] = our_id
    Mailgun.post(client, Mailgun.signed(payload["event-data"], "mg-own-id-1"))

    assert only_event().send == world.send


def test_an_unusable_recipient_is_not_taken_for_the_sends_address(client, world):
    """It cannot be shown to agree with the send: falling back to the send's own address let
    another mailbox's bounce suppress ours."""
    payload = Postmark.hard_bounce("not an address", world.metadata())
    assert Postmark.post(client, payload).status_code == 200
    assert not Suppression.objects.exists()


def test_an_unusable_recipient_without_a_send_is_dropped(client, world, caplog):
    metadata = {"account_id": str(world.account.id)}
    assert Postmark.post(client, Postmark.hard_bounce("not an address", metadata)).status_code == 200
    assert_nothing_written(world)
    assert any("usable recipient" in r.getMessage() for r in caplog.records)


def test_a_sendgrid_batch_is_handled_event_by_event(client, world):
    batch = (SendGrid.soft_bounces(ADDRESS, world.metadata())["deferred"]
             + SendGrid.hard_bounce(ADDRESS, {"account_id": "987654321"})
             + SendGrid.hard_bounce(ADDRESS, world.metadata(), event_id="sg-bounce-2"))
    assert SendGrid.post(client, batch).status_code == 200

    kept = set(FeedbackEvent.objects.values_list("event_type", "account"))
    assert kept == {("bounced", None), ("bounced", world.account.id), ("deferred", world.account.id)}
    assert Suppression.objects.get().reason == "bounced"


# --- bad posts -----------------------------------------------------------------------------------


@ESPS
def test_malformed_json_gets_a_400_and_writes_nothing(client, world, esp):
    response = esp.post_raw(client, b'{"RecordType": "Bounce", "Email": ')

    assert response.status_code == 400
    assert_nothing_written(world)


@ESPS
@pytest.mark.parametrize("credentials", [None, "zylior:wrong-secret"], ids=["missing", "wrong"])
def test_missing_or_wrong_webhook_secret_is_refused_with_401(client, world, esp, credentials):
    response = esp.post(client, esp.hard_bounce(ADDRESS, world.metadata()), credentials=credentials)

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Basic ")
    assert_nothing_written(world)


def test_a_wrong_mailgun_signature_is_refused(client, world):
    payload = Mailgun.hard_bounce(ADDRESS, world.metadata())
    forged = Mailgun.signed(payload["event-data"], "mg-forged-1", key=MAILGUN_SIGNING_KEY + "x")

    assert Mailgun.post(client, forged).status_code == 400
    assert_nothing_written(world)


def test_a_wrong_resend_signature_is_refused(client, world):
    wrong = "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="
    response = Resend.post(client, Resend.hard_bounce(ADDRESS, world.metadata()), secret=wrong)

    assert response.status_code == 400
    assert_nothing_written(world)


def test_the_secret_can_be_rotated(client, world, settings):
    settings.ANYMAIL = {**ANYMAIL_SETTINGS, "WEBHOOK_SECRET": ["zylior:new-secret", WEBHOOK_SECRET]}
    assert Postmark.post(client, Postmark.hard_bounce(ADDRESS, world.metadata())).status_code == 200
    assert Suppression.objects.exists()


# --- failures inside the receiver -----------------------------------------------------------------


def test_an_error_in_the_receiver_is_logged_and_answered_200_with_nothing_written(
        client, world, monkeypatch, caplog):
    def broken(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(Suppression.objects, "suppress", broken)

    response = Postmark.post(client, Postmark.hard_bounce(ADDRESS, world.metadata()))

    assert response.status_code == 200
    assert_nothing_written(world)  # the event row went with the failed suppression
    [error] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert error.exc_info and error.esp == "Postmark"
    caplog.clear()  # expected: see no_unexpected_errors


def test_a_database_outage_is_a_500_so_the_esp_retries(client, world, monkeypatch):
    def unavailable(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(FeedbackEvent.objects, "record", unavailable)

    response = Postmark.post(client, Postmark.hard_bounce(ADDRESS, world.metadata()))

    assert response.status_code == 500
    assert_nothing_written(world)


# --- the surface: what is routed, and to whom ----------------------------------------------------


def _anymail_urls(kind: str) -> list[str]:
    import anymail.urls

    return sorted({"/anymail/" + str(p.pattern).strip("^$").replace("(_mime)?", "")
                   for p in anymail.urls.urlpatterns if kind in p.name})


@pytest.mark.parametrize("path", [*_anymail_urls("tracking"), "/anymail/mandrill/"])
def test_an_anonymous_post_to_any_tracking_webhook_is_a_4xx_never_a_500(path):
    """anymail builds the view of an ESP without its settings (Mandrill's or Postal's webhook
    key, say) by raising ImproperlyConfigured: that was a 500, and an ERROR, at anyone's will."""
    response = Client().post(path, b"{}", content_type="application/json")
    assert 400 <= response.status_code < 500, response.status_code


@pytest.mark.parametrize("path", _anymail_urls("inbound"))
def test_inbound_webhooks_are_not_routed(path):
    """Nothing here receives an ESP's inbound mail."""
    assert Client().post(path, b"{}", content_type="application/json").status_code == 404


def test_an_esp_in_use_that_lacks_its_webhook_setting_is_a_500_so_the_operator_sees_it(
        settings, caplog):
    settings.EMAIL_BACKEND = "anymail.backends.mandrill.EmailBackend"  # no MANDRILL_WEBHOOK_KEY
    response = Client(raise_request_exception=False).post(
        "/anymail/mandrill/", b"{}", content_type="application/json")
    assert response.status_code == 500
    caplog.clear()  # expected: see no_unexpected_errors


# --- settings -------------------------------------------------------------------------------------


def test_webhook_secrets_can_come_from_their_own_variables():
    env = {"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none", "ANYMAIL": "WEBHOOK_SECRET=a:b",
           "ANYMAIL_WEBHOOK_SECRET": "new:one,old:one", "ANYMAIL_RESEND_SIGNING_SECRET": "whsec_x",
           "ANYMAIL_AMAZON_SES_AUTO_CONFIRM_SNS_SUBSCRIPTIONS": "false", "PATH": "/usr/bin:/bin"}
    code = "from zylior import settings; print(sorted(settings.ANYMAIL.items()))"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == str(sorted({"WEBHOOK_SECRET": ["new:one", "old:one"],
                                      "RESEND_SIGNING_SECRET": "whsec_x",
                                      "AMAZON_SES_AUTO_CONFIRM_SNS_SUBSCRIPTIONS": False}.items()))


# --- admin ----------------------------------------------------------------------------------------


def test_the_admin_lists_events_read_only(client, world, admin_client):
    Postmark.post(client, Postmark.hard_bounce(ADDRESS, world.metadata()))
    event = only_event()

    listing = admin_client.get("/admin/growth/feedbackevent/",
                               {"esp": "Postmark", "suppressed__exact": "1", "q": "bounce.me"})
    assert listing.status_code == 200
    assert EMAIL_LOWER in listing.content.decode()
    assert admin_client.get("/admin/growth/feedbackevent/add/").status_code == 403
    detail = admin_client.get(f"/admin/growth/feedbackevent/{event.id}/change/")
    assert detail.status_code == 200 and b'name="_save"' not in detail.content


# --- attribution from our own ledger ---------------------------------------------------------------


@ESPS
def test_metadata_naming_another_tenant_than_the_send_attributes_nothing(client, world, esp):
    # the job id is tenant A's send; the account and campaign are tenant B's (ESPs echo back
    # whatever metadata a message carried, and anyone may post a payload)
    foreign = Campaign.objects.get(account=world.other_account)
    forged = world.metadata(account_id=str(world.other_account.id), campaign_id=str(foreign.id))

    assert esp.post(client, esp.hard_bounce(ADDRESS, forged)).status_code == 200

    assert_recorded_unattributed(world, "metadata's account_id is not the send's")
    assert_other_tenant_untouched(world)


@ESPS
def test_a_recipient_other_than_the_sends_address_attributes_nothing(client, world, esp):
    SubscriberFactory(segment=SegmentFactory(account=world.account), email="someone.else@example.com")

    response = esp.post(client, esp.hard_bounce("someone.else@example.com", world.metadata()))

    assert response.status_code == 200
    event = only_event()
    assert (event.account, event.send, event.email_lower) == (None, None, "someone.else@example.com")
    assert "recipient is not the send's address" in event.unattributed_because
    assert_nothing_suppressed(world)


def test_the_providers_message_id_wins_over_a_job_id_in_the_metadata_naming_another_send(client, world):
    other_subscriber = SubscriberFactory(segment=SegmentFactory(account=world.account))
    other = Send.objects.create(campaign=world.campaign, account=world.account,
                                subscriber=other_subscriber, email=other_subscriber.email,
                                email_lower=other_subscriber.email_lower, status="sent")
    world.send.provider_message_id = "883953f4-6105-42a2-a16a-77a8eac79483"  # Postmark's MessageID
    world.send.save(update_fields=["provider_message_id"])

    Postmark.post(client, Postmark.hard_bounce(ADDRESS, world.metadata(job_id=other.job_id)))

    assert_recorded_unattributed(world, "name different sends")


# --- Mailgun's one-time tokens (its documentation: a token used twice is a replay) -----------------


def test_a_mailgun_signature_replayed_on_another_event_is_refused(client, world):
    first = Mailgun.hard_bounce(ADDRESS, world.metadata(), event_id="mg-token-once")
    assert Mailgun.post(client, first).status_code == 200
    assert Suppression.objects.count() == 1

    # the captured signature block (timestamp, token, signature), re-attached to a new event
    other_event = Mailgun.event_data("Other.Person@Example.COM", world.metadata(), "complained",
                                     id="a-new-event-id")
    replay = {"signature": first["signature"], "event-data": other_event}
    response = Mailgun.post(client, replay)

    assert response.status_code == 400
    assert FeedbackEvent.objects.count() == 1 and Suppression.objects.count() == 1


def test_mailgun_posting_the_same_signed_body_again_is_answered_200_and_acts_once(client, world):
    payload = Mailgun.hard_bounce(ADDRESS, world.metadata(), event_id="mg-token-retry")
    assert Mailgun.post(client, payload).status_code == 200
    assert Mailgun.post(client, payload).status_code == 200
    assert FeedbackEvent.objects.count() == 1 and Suppression.objects.count() == 1


def test_a_refused_replay_leaves_the_token_usable_by_nobody_else(client, world):
    # a post that fails (here: the database refuses the event) records no token either
    payload = Mailgun.hard_bounce(ADDRESS, world.metadata(), event_id="mg-token-rolled-back")
    Mailgun.post(client, payload)
    assert WebhookToken.objects.filter(token="mg-token-rolled-back").count() == 1
    assert Mailgun.post(client, payload).status_code == 200


# --- malformed bodies: 4xx, nothing written, from every ESP's endpoint -----------------------------

MALFORMED = {
    "truncated JSON": b'{"RecordType": "Bounce", "Email": ',
    "a JSON array": b'[{"event": "bounce"}, 17, null]',
    "a JSON string": b'"bounce"',
    "a JSON number": b"42",
    "JSON null": b"null",
    "not UTF-8": b'{"RecordType": "Bounce", "Email": "\xff\xfe@example.com"}',
    "XML": b'<?xml version="1.0"?><bounce><email>a@example.com</email></bounce>',
    "empty": b"",
}


@ESPS
@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_body_gets_a_4xx_and_writes_nothing(client, world, esp, body):
    response = esp.post_raw(client, body)

    assert 400 <= response.status_code < 500, response.content[:200]
    assert_nothing_written(world)


@ESPS
def test_an_object_without_the_fields_of_an_event_writes_nothing_and_is_no_5xx(client, world, esp):
    assert esp.post_raw(client, b"{}").status_code < 500
    assert_nothing_written(world)


@ESPS
def test_fields_of_the_wrong_type_get_a_4xx_or_are_ignored_never_a_500(client, world, esp):
    payload = esp.hard_bounce(ADDRESS, world.metadata())
    mangled = _mangle(payload)

    response = esp.post(client, mangled)

    assert response.status_code < 500
    assert_nothing_suppressed(world)


def _mangle(value):
    """Every string in a payload replaced by a list, every number by an object: the shape of the
    ESP's documented payload, with nothing of the right type in it."""
    if isinstance(value, dict):
        return {k: _mangle(v) if k not in ("signature", "Type", "MessageId") else v
                for k, v in value.items()}
    if isinstance(value, list):
        return [_mangle(v) for v in value]
    if isinstance(value, str):
        return [value]
    if isinstance(value, int | float):
        return {"n": value}
    return value
