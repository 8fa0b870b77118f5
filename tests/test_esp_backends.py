"""Providers that de-duplicate on a key: the job id reaches them, and the engine knows it."""

from __future__ import annotations

import json
from email import message_from_bytes

import pytest
from django.utils import timezone

from growth.models import Account, Campaign, Send
from growth.sending.backends.brevo import brevo_key
from growth.sending.rendering import CampaignContent, CampaignRenderer
from growth.sending.transports import Delivery, Outcome, receiver_deduplicates
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.unsubscribe import LinkMaker
from growth.sending.worker import Worker
from tests.esp_server import FakeESP
from tests.scenarios import rows_by_status, sending_campaign

RESEND = "growth.sending.backends.resend.EmailBackend"
BREVO = "growth.sending.backends.brevo.EmailBackend"


@pytest.fixture
def esp(settings):
    server = FakeESP().start()
    settings.ANYMAIL = {"RESEND_API_KEY": "re_test", "RESEND_API_URL": server.url,
                        "BREVO_API_KEY": "xkeysib-test", "BREVO_API_URL": server.url}
    settings.SENDER_IDEMPOTENT_TRANSPORT = None
    yield server
    server.stop()


def delivery(job_id: str = "campaign:7:42", email: str = "ana@example.com") -> Delivery:
    content = CampaignContent(7, 3, "Hi {{ email }}", "Hello\n", "<p>Hello</p>",
                              "news@acme.example", "Acme")
    renderer = CampaignRenderer(content, links=LinkMaker("https://growth.example"))
    send_id = int(job_id.rsplit(":", 1)[1])
    return Delivery(send_id, job_id, renderer.render(job_id=job_id, email=email,
                                                     subscriber_id=send_id))


def send(backend: str, *deliveries: Delivery) -> list[Outcome]:
    with DjangoMailTransport(backend=backend) as transport:
        return transport.send_bulk(list(deliveries))


def test_resend_gets_the_job_id_as_its_idempotency_key_and_our_ids_as_metadata(esp):
    (outcome,) = send(RESEND, delivery())
    (request,) = esp.requests
    assert request.headers["Idempotency-Key"] == "campaign:7:42"
    metadata = json.loads(request.body["headers"]["X-Metadata"])
    assert metadata == {"account_id": "3", "campaign_id": "7", "job_id": "campaign:7:42"}
    assert outcome.kind == Outcome.SENT and outcome.provider_message_id


def test_a_retry_through_resend_is_absorbed_and_returns_the_same_message(esp):
    first = send(RESEND, delivery())[0]
    again = send(RESEND, delivery())[0]  # a new render, as after a lease expiry
    assert again.provider_message_id == first.provider_message_id
    assert {r.headers["Idempotency-Key"] for r in esp.requests} == {"campaign:7:42"}


@pytest.mark.parametrize(("status", "kind"), [(500, "transient"), (429, "throttled"),
                                              (422, "permanent"), (401, "refused"),
                                              (403, "refused")])
def test_provider_errors_map_onto_retry_or_failure(esp, status, kind):
    esp.statuses = [status]
    assert send(RESEND, delivery())[0].kind == kind


@pytest.mark.parametrize(("status", "text"), [
    (404, "Domain not found: mg.acme.example"),  # Mailgun: a sending domain it does not know
    (422, "The 'From' address you supplied (news@acme.example) is not a Sender Signature on "
          "your account. Please add and confirm this address in order to be able to use it in "
          "the 'From' field of your messages."),  # Postmark, ErrorCode 400
    (422, "Your account is pending approval."),  # Postmark, ErrorCode 412
    (422, "invalid_from_address: Invalid `from` field. The email address needs to follow the "
          "`email@example.com` or `Name <email@example.com>` format."),  # Resend
])
def test_a_provider_refusing_our_sender_or_domain_refuses_us_not_the_recipient(esp, status, text):
    """Failed as the recipients' (a 4xx is final), every recipient of the campaign would fail
    within minutes of a typo in the sending domain; refused, the campaign waits for the fix."""
    esp.statuses, esp.error_codes = [status], [("", text)]
    (outcome,) = send(RESEND, delivery())
    assert outcome.kind == Outcome.REFUSED, outcome.error


def test_a_provider_refusing_one_recipient_fails_that_recipient_alone(esp):
    esp.statuses, esp.error_codes = [422], [("", "Invalid `to` field. The email address needs to "
                                                 "follow the `email@example.com` format.")]
    (outcome,) = send(RESEND, delivery())
    assert outcome.kind == Outcome.PERMANENT, outcome.error


def test_a_key_the_provider_does_not_take_refuses_us_once_for_the_whole_chunk(esp):
    esp.statuses = [401]
    outcomes = send(RESEND, delivery("campaign:7:1"), delivery("campaign:7:2"),
                    delivery("campaign:7:3"))
    assert [(o.send_id, o.kind) for o in outcomes] == [(1, "refused"), (2, "refused"),
                                                       (3, "refused")]
    assert outcomes[0].error.startswith("AnymailRequestsAPIError: Resend API response 401")
    assert len(esp.requests) == 1


SES = "anymail.backends.amazon_ses.EmailBackend"


@pytest.fixture
def ses(settings, esp):
    """Amazon SES's v2 API on the fake, through anymail and boto3, as the settings configure it
    (one attempt a request: boto3 must not send a request again by itself)."""
    from botocore.config import Config

    settings.ANYMAIL = {"AMAZON_SES_CLIENT_PARAMS": {
        "endpoint_url": esp.url.rstrip("/"), "region_name": "us-east-1",
        "aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "secret",
        "config": Config(retries={"total_max_attempts": 1}, read_timeout=0.5)}}
    return esp


def test_a_rendered_message_goes_out_through_amazon_ses(ses):
    """anymail's SES backend rewrites Django's MIME message: it got our prebuilt bytes instead,
    and every send failed with a TypeError (retried for 48 hours, then failed)."""
    import base64

    (outcome,) = DjangoMailTransport(backend=SES).send_bulk([delivery()])
    assert outcome.kind == Outcome.SENT, outcome.error
    (request,) = ses.requests
    raw = base64.b64decode(request.body["Content"]["Raw"]["Data"])
    message = message_from_bytes(raw)
    assert message["To"] == "ana@example.com" and message["Idempotency-Key"] == "campaign:7:42"


@pytest.mark.parametrize(("status", "code", "text", "kind"), [
    (403, "InvalidClientTokenId", "The security token included in the request is invalid.",
     "refused"),
    (403, "AccessDeniedException", "User: arn:aws:iam::1:user/growth is not authorized to "
                                   "perform: ses:SendEmail", "refused"),
    (400, "MessageRejected", "Email address is not verified. The following identities failed "
                             "the check in region US-EAST-1: news@acme.example", "refused"),
    (400, "SendingPausedException", "Sending is paused for this account.", "refused"),
    (429, "TooManyRequestsException", "Maximum sending rate exceeded.", "throttled"),
    (400, "BadRequestException", "Illegal address", "permanent"),
    (500, "InternalFailure", "Internal failure", "transient"),
])
def test_amazon_ses_answers_are_read_by_their_status_and_code(ses, status, code, text, kind):
    ses.statuses, ses.error_codes = [status], [(code, text)]
    outcomes = DjangoMailTransport(backend=SES).send_bulk([delivery("campaign:7:1")])
    assert [o.kind for o in outcomes] == [kind], outcomes[0].error
    assert len(ses.requests) == 1


def test_an_amazon_ses_request_whose_answer_is_lost_is_in_doubt_and_sent_once(ses):
    """SES keeps no idempotency key: a request whose answer never came may have been sent."""
    ses.misbehaviour, ses.stall_for = ["stall"], 1.5
    (outcome,) = DjangoMailTransport(backend=SES).send_bulk([delivery("campaign:7:1")])
    assert outcome.kind == Outcome.IN_DOUBT, outcome.error
    assert len(ses.requests) == 1


def test_amazon_ses_is_configured_to_send_each_request_once():
    """boto3's default sends a request again when its answer is late or a 5xx: SES, which keeps
    no key, would deliver the message twice."""
    import subprocess

    from tests.helpers import manage, subprocess_env

    shown = subprocess.run(
        manage("shell", "-c", "from django.conf import settings; "
               "print(settings.ANYMAIL['AMAZON_SES_CLIENT_PARAMS']['config'].retries)"),
        env=subprocess_env(EMAIL_BACKEND=SES), capture_output=True, text=True, timeout=120)
    assert shown.stdout.strip().splitlines()[-1] == "{'total_max_attempts': 1}", shown.stderr


def test_a_provider_without_its_settings_refuses_us(settings):
    settings.ANYMAIL = {}
    # as a worker's wire: its backend is made by the first send
    (outcome,) = DjangoMailTransport(backend=RESEND).send_bulk([delivery()])
    assert outcome.kind == "refused"
    assert outcome.error.startswith("AnymailConfigurationError: You must set ANYMAIL = "
                                    "{'RESEND_API_KEY': ...}")


@pytest.mark.parametrize("misbehaviour", ["stall", "garbled"])
def test_an_answer_lost_after_the_provider_took_the_request_leaves_the_message_in_doubt(
        esp, settings, misbehaviour):
    """The request went out whole and its answer timed out, or came as a success that cannot be
    read: the provider may have taken the message. A plain receiver must not get it again."""
    settings.ANYMAIL = {**settings.ANYMAIL, "REQUESTS_TIMEOUT": 0.5}
    esp.misbehaviour, esp.stall_for = [misbehaviour], 1.5
    (outcome,) = send(RESEND, delivery())
    assert outcome.kind == Outcome.IN_DOUBT
    assert len(esp.requests) == 1


def test_a_provider_that_cannot_be_reached_is_a_transient_failure(settings):
    settings.ANYMAIL = {"RESEND_API_KEY": "re_test", "RESEND_API_URL": "http://127.0.0.1:9/"}
    (outcome,) = send(RESEND, delivery())
    assert outcome.kind == Outcome.TRANSIENT


def test_an_esps_429_slows_the_whole_transport_after_its_retry_after(esp):
    esp.statuses = [429]
    (outcome,) = send(RESEND, delivery())
    assert (outcome.kind, outcome.throttle_scope, outcome.retry_after) == (
        "throttled", "transport", 7.0)


def test_brevo_gets_a_stable_uuid_derived_from_the_job_id(esp):
    send(BREVO, delivery())
    send(BREVO, delivery())
    keys = [r.body["headers"]["idempotencyKey"] for r in esp.requests]
    assert keys == [brevo_key("campaign:7:42")] * 2
    assert brevo_key("campaign:7:42") != brevo_key("campaign:7:43")
    custom = json.loads(esp.requests[0].body["headers"]["X-Mailin-custom"])
    assert custom["job_id"] == "campaign:7:42"


@pytest.mark.django_db  # a renderer for Django's SMTP path looks its DKIM key up
def test_resend_over_smtp_carries_its_key_header(smtp_settings):
    send("growth.sending.backends.resend.SMTPBackend", delivery())
    (accepted,) = smtp_settings.handler.accepted
    assert accepted.message["Resend-Idempotency-Key"] == "campaign:7:42"
    assert accepted.message["Message-ID"] == "<campaign.7.42@localhost>"
    assert message_from_bytes(accepted.message.as_bytes())["Idempotency-Key"] == "campaign:7:42"


def test_the_engine_treats_these_providers_as_idempotent_unless_told_otherwise(esp, settings):
    def deduplicates(backend: str) -> bool:
        return receiver_deduplicates(DjangoMailTransport(backend=backend), lease=60)

    assert deduplicates(RESEND) is True
    assert deduplicates(BREVO) is True
    assert deduplicates("anymail.backends.postmark.EmailBackend") is False
    settings.SENDER_IDEMPOTENT_TRANSPORT = False
    assert deduplicates(RESEND) is False


def test_a_lease_longer_than_the_providers_memory_is_not_trusted(esp):
    short = Worker(lease=60, transport=DjangoMailTransport(backend=BREVO))
    long = Worker(lease=3600, transport=DjangoMailTransport(backend=BREVO))
    assert short.idempotent is True
    assert long.idempotent is False  # Brevo forgets keys after 15 minutes


def test_recipients_the_provider_refused_in_a_success_answer_fail_for_good():
    """An ESP's 200 that rejects every recipient is the provider's answer, not a lost one."""
    import requests
    from anymail.exceptions import AnymailRecipientsRefused

    from growth.sending.transports.errors import classify_failure

    answer = requests.Response()
    answer.status_code, answer.reason, answer._content = 200, "OK", b'{"status": "rejected"}'
    refused = AnymailRecipientsRefused(response=answer, status_code=200)
    assert classify_failure(refused).kind == Outcome.PERMANENT


# --- a key reused with another body ------------------------------------------------------------

def test_a_key_resend_holds_for_another_body_is_in_doubt_for_good(esp):
    """Resend binds a key to the body it first came with: a retry whose body changed (the
    campaign resumed after its account's sender was renamed) is refused, every time, and a
    resend under another key could be a second message."""
    send(RESEND, delivery())
    renamed = CampaignContent(7, 3, "Hi {{ email }}", "Hello\n", "<p>Hello</p>",
                              "news@acme.example", "Acme Newsroom")
    message = CampaignRenderer(renamed, links=LinkMaker("https://growth.example")).render(
        job_id="campaign:7:42", email="ana@example.com", subscriber_id=42)
    (outcome,) = send(RESEND, Delivery(42, "campaign:7:42", message))
    assert outcome.kind == Outcome.KEY_TAKEN
    assert "invalid_idempotent_request" in outcome.error


def _try_once() -> None:
    Worker(transport=DjangoMailTransport(backend=RESEND), lease=60, batch_size=10,
           once=True).run()


def _lose_the_first_answer(esp, settings, campaign) -> None:
    """The campaign's one message is taken by Resend and its answer lost: in doubt, due again
    under its key."""
    settings.ANYMAIL = {**settings.ANYMAIL, "REQUESTS_TIMEOUT": 0.5}
    esp.misbehaviour, esp.stall_for = ["stall"], 1.5
    _try_once()
    assert rows_by_status(campaign) == {"queued": 1}
    Send.objects.filter(campaign=campaign).update(next_attempt_at=timezone.now())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_message_whose_answer_was_lost_goes_again_as_it_first_went(esp, settings, leases):
    """{% now %} is the campaign's start: the retry is the same body, absorbed under its key."""
    campaign = sending_campaign(1, leases=leases, body_text="Sent at {% now 'Y-m-d H:i:s.u' %}\n")
    _lose_the_first_answer(esp, settings, campaign)
    _try_once()
    assert len(esp.requests) == 2 and len(esp.ids_by_key) == 1
    assert rows_by_status(campaign) == {"sent": 1}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_retry_after_the_account_renamed_its_sender_goes_as_the_first_try_went(esp, settings,
                                                                                 leases):
    """The campaign took its sender when it started: an edit of the account's is absorbed."""
    campaign = sending_campaign(1, leases=leases)
    _lose_the_first_answer(esp, settings, campaign)
    Account.objects.filter(id=campaign.account_id).update(from_name="Acme Newsroom")
    _try_once()
    assert len(esp.requests) == 2 and len(esp.ids_by_key) == 1
    assert rows_by_status(campaign) == {"sent": 1}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("leases", [False, True], ids=["rows", "leases"])
def test_a_retry_refused_for_another_body_leaves_the_row_unknown_at_once(esp, settings, leases):
    """Resumed, the campaign takes the account's sender as it is now: another body."""
    campaign = sending_campaign(1, leases=leases)
    _lose_the_first_answer(esp, settings, campaign)
    Account.objects.filter(id=campaign.account_id).update(from_name="Acme Newsroom")
    assert Campaign.objects.pause(campaign_id=campaign.id)
    assert Campaign.objects.resume(campaign_id=campaign.id)
    _try_once()
    assert len(esp.requests) == 2
    (row,) = Send.objects.filter(campaign=campaign)
    assert row.status == Send.Status.UNKNOWN and "invalid_idempotent_request" in row.last_error
