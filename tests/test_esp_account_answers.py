"""An ESP that says our ACCOUNT cannot send (no credits, a quota spent, sending suspended or paused)
refuses us, not the recipient: the campaign must pause for an operator, failing nobody.

Each answer is the one the ESP documents (status, code, text; see the URL by each case), sent
through the real django-anymail backend against a loopback server that answers as the ESP does,
and read by growth/sending/transports/errors.py as the worker reads it (DjangoMailTransport).
"""

from __future__ import annotations

import pytest

from growth.sending.rendering import CampaignContent, CampaignRenderer
from growth.sending.transports import Delivery, Outcome
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.transports.errors import refusal_reason, too_large
from growth.sending.unsubscribe import LinkMaker
from tests.esp_server import FakeESP

POSTMARK = "anymail.backends.postmark.EmailBackend"
RESEND = "growth.sending.backends.resend.EmailBackend"
BREVO = "growth.sending.backends.brevo.EmailBackend"
SENDGRID = "anymail.backends.sendgrid.EmailBackend"
MAILGUN = "anymail.backends.mailgun.EmailBackend"
SES = "anymail.backends.amazon_ses.EmailBackend"

# SendGrid's webhooks are read (growth.feedback); its answers here, on anymail's backend
pytestmark = pytest.mark.filterwarnings("ignore:django-anymail has dropped official support")


@pytest.fixture
def esp(settings):
    server = FakeESP().start()
    settings.ANYMAIL = {
        "POSTMARK_SERVER_TOKEN": "pm-test", "POSTMARK_API_URL": server.url,
        "RESEND_API_KEY": "re_test", "RESEND_API_URL": server.url,
        "BREVO_API_KEY": "xkeysib-test", "BREVO_API_URL": server.url,
        "SENDGRID_API_KEY": "SG.test", "SENDGRID_API_URL": server.url,
        "MAILGUN_API_KEY": "key-test", "MAILGUN_API_URL": server.url,
        "MAILGUN_SENDER_DOMAIN": "mg.acme.example"}
    settings.SENDER_IDEMPOTENT_TRANSPORT = None
    yield server
    server.stop()


@pytest.fixture
def ses(settings):
    """Amazon SES's v2 API on tests.esp_server's fake, through anymail and boto3."""
    from botocore.config import Config

    server = FakeESP().start()
    settings.ANYMAIL = {"AMAZON_SES_CLIENT_PARAMS": {
        "endpoint_url": server.url.rstrip("/"), "region_name": "us-east-1",
        "aws_access_key_id": "AKIAEXAMPLE", "aws_secret_access_key": "secret",
        "config": Config(retries={"total_max_attempts": 1}, read_timeout=0.5)}}
    yield server
    server.stop()


def delivery(send_id: int) -> Delivery:
    content = CampaignContent(7, 3, "Hi {{ email }}", "Hello\n", "<p>Hello</p>",
                              "news@acme.example", "Acme")
    renderer = CampaignRenderer(content, links=LinkMaker("https://growth.example"))
    job_id = f"campaign:7:{send_id}"
    return Delivery(send_id, job_id, renderer.render(job_id=job_id, email=f"r{send_id}@example.com",
                                                     subscriber_id=send_id))


def send_chunk(backend: str, size: int = 3) -> list[Outcome]:
    with DjangoMailTransport(backend=backend) as transport:
        return transport.send_bulk([delivery(n) for n in range(1, size + 1)])


# --- the account cannot send: a refusal of us, the whole chunk at the first answer ------------

ACCOUNT_REFUSALS = [
    # Postmark: HTTP 422 + ErrorCode (https://postmarkapp.com/developer/api/overview: "422 ...
    # the response body contains JSON {ErrorCode: 405, Message: "details"}"; the codes' labels as
    # listed from https://postmarkapp.com/developer/api/overview#error-codes in
    # https://gist.github.com/abhijit-hota/27f385c8bf90028adc893bdf91482547; the credits:
    # https://postmarkapp.com/support/article/936-what-happens-when-credits-run-out). The Message
    # texts are the documented labels; the exact wording Postmark sends was not found.
    pytest.param(POSTMARK, 422, {"ErrorCode": 405, "Message": "Not allowed to send"}, {},
                 id="postmark-405-not-allowed-to-send-credits"),
    pytest.param(POSTMARK, 422, {"ErrorCode": 412, "Message": "Account is Pending"}, {},
                 id="postmark-412-account-is-pending"),
    pytest.param(POSTMARK, 422, {"ErrorCode": 413, "Message": "Account May Not Send"}, {},
                 id="postmark-413-account-may-not-send"),
    # Resend: https://resend.com/docs/api-reference/errors (as mirrored in resend/resend-rust
    # src/error.rs): 429 monthly_quota_exceeded "You have reached your monthly email sending
    # quota." ("Upgrade your plan..."); 429 daily_quota_exceeded "You have reached your daily
    # email sending quota." ("Upgrade your plan ... or wait until 24 hours have passed")
    pytest.param(RESEND, 429, {"statusCode": 429, "name": "monthly_quota_exceeded",
                               "message": "You have reached your monthly email sending quota."},
                 {}, id="resend-429-monthly-quota"),
    pytest.param(RESEND, 429, {"statusCode": 429, "name": "daily_quota_exceeded",
                               "message": "You have reached your daily email sending quota."},
                 {}, id="resend-429-daily-quota"),
    # Brevo: "402 | Error. Not enough credit, plan upgrade needed", error code not_enough_credits
    # (Brevo's OpenAPI spec as generated into sendinblue/APIv3-python-library, ErrorModel; the
    # message text was not found)
    pytest.param(BREVO, 402, {"code": "not_enough_credits", "message": "Not enough credit"}, {},
                 id="brevo-402-not-enough-credits"),
    # SendGrid: 401 "Maximum credits exceeded" (https://support.sendgrid.com/hc/en-us/articles/
    # 18322114821403-4XX-API-Errors-and-Troubleshooting-Suggestions); v3 error body shape from
    # https://twilio.com/docs/sendgrid/api-reference/how-to-use-the-sendgrid-v3-api/errors
    pytest.param(SENDGRID, 401, {"errors": [{"message": "Maximum credits exceeded", "field": None,
                                             "help": None}]}, {},
                 id="sendgrid-401-maximum-credits-exceeded"),
    # Mailgun: a 400's JSON has a "message" (https://documentation.mailgun.com/docs/mailgun/
    # quickstart-guide/responses). The text is as users report it (github.com/Monstarrrr/
    # rebutify/issues/162, over SMTP as 421); its API status is NOT documented: 400 assumed.
    pytest.param(MAILGUN, 400, {"message": "Domain mg.acme.example is not allowed to send: Please "
                                           "activate your Mailgun account. Check your inbox or "
                                           "log in to your control panel to resend the "
                                           "activation email."}, {},
                 id="mailgun-400-domain-not-allowed-to-send"),
]


@pytest.mark.parametrize(("backend", "status", "body", "headers"), ACCOUNT_REFUSALS)
def test_an_account_that_cannot_send_refuses_us_and_fails_nobody(esp, backend, status, body,
                                                                 headers):
    """Failed as the recipient's (a 4xx is final), one spent account fails every recipient of the
    campaign within minutes; retried as a throttle, every row fails at the retry horizon (a month's
    quota, credits, a suspension outlast 48 hours) after the pacer has crushed the transport's rate.
    A refusal pauses the campaign: an operator tops up, upgrades or re-enables, and resumes."""
    esp.answers = [(status, body, headers)] * 3  # the same answer to each message of the chunk
    outcomes = send_chunk(backend)
    assert [o.kind for o in outcomes] == [Outcome.REFUSED] * 3, outcomes[0].error
    assert len(esp.requests) == 1  # the rest of the chunk was not tried


# --- Amazon SES (v2 through boto3): code in x-amzn-ErrorType --------------------------------

SES_ANSWERS = [
    # https://docs.aws.amazon.com/ses/latest/dg/manage-sending-quotas-errors.html: over the
    # limits "the API produces a ThrottlingException error" with "Daily message quota exceeded"
    # or "Maximum sending rate exceeded". Its HTTP status there: not given (AWS's common errors
    # list ThrottlingException as 400); SESv2's own TooManyRequestsException is 429 (botocore's
    # sesv2 model). Both shapes, and SES v1's "Throttling", are tried.
    pytest.param(400, "ThrottlingException", "Daily message quota exceeded", Outcome.REFUSED,
                 id="ses-400-ThrottlingException-daily-quota"),
    pytest.param(429, "TooManyRequestsException", "Daily message quota exceeded", Outcome.REFUSED,
                 id="ses-429-TooManyRequests-daily-quota"),
    pytest.param(400, "Throttling", "Daily message quota exceeded", Outcome.REFUSED,
                 id="ses-400-Throttling-daily-quota"),
    pytest.param(400, "ThrottlingException", "Maximum sending rate exceeded", Outcome.THROTTLED,
                 id="ses-400-ThrottlingException-max-rate"),
    # botocore's sesv2 model: AccountSuspendedException 400 "The message can't be sent because
    # the account's ability to send email has been permanently restricted."; SendingPausedException
    # 400 "... is currently paused." (https://docs.rs/aws-sdk-sesv2/1.26.0/aws_sdk_sesv2/operation/
    # send_email/enum.SendEmailError.html)
    pytest.param(400, "AccountSuspendedException", "The message can't be sent because the "
                 "account's ability to send email has been permanently restricted.",
                 Outcome.REFUSED, id="ses-400-AccountSuspended"),
    pytest.param(400, "SendingPausedException", "The message can't be sent because the "
                 "account's ability to send email is currently paused.", Outcome.REFUSED,
                 id="ses-400-SendingPaused"),
]


@pytest.mark.parametrize(("status", "code", "text", "kind"), SES_ANSWERS)
def test_amazon_ses_account_answers(ses, status, code, text, kind):
    ses.statuses, ses.error_codes = [status], [(code, text)]
    outcomes = send_chunk(SES, size=1)
    assert [o.kind for o in outcomes] == [kind], outcomes[0].error
    if kind == Outcome.THROTTLED:
        assert outcomes[0].throttle_scope == Outcome.TRANSPORT


# --- what must not change: a rate limit slows us, a recipient's refusal is the recipient's ---

def test_a_rate_limit_is_still_a_throttle_on_the_whole_transport(esp):
    # Resend: 429 rate_limit_exceeded (resend-rust src/error.rs, from Resend's errors page)
    esp.answers = [(429, {"statusCode": 429, "name": "rate_limit_exceeded",
                          "message": "Too many requests. You can only make 2 requests per second."},
                    {"Retry-After": "1"})]
    (outcome,) = send_chunk(RESEND, size=1)
    assert (outcome.kind, outcome.throttle_scope) == (Outcome.THROTTLED, Outcome.TRANSPORT)


def test_a_postmark_refusal_of_the_recipient_address_is_still_the_recipients(esp):
    # Postmark ErrorCode 300, a recipient's: anymail marks it invalid (permanent for that row)
    esp.answers = [(422, {"ErrorCode": 300, "Message": "Invalid 'To' address: 'r1@example.com'."}, {})]
    (outcome,) = send_chunk(POSTMARK, size=1)
    assert outcome.kind == Outcome.PERMANENT, outcome.error


def test_a_postmark_refusal_naming_no_address_of_ours_is_not_counted_sent(esp):
    """Postmark's ErrorCode 300 means "email not sent"; anymail matches the address its message
    names to ours, and when it cannot, it reports the recipient 'unknown', with no message id and
    no error. That message was not taken."""
    esp.answers = [(422, {"ErrorCode": 300,
                          "Message": "Error parsing 'To': Illegal email address 'r1@example..com'. "
                                     "It must contain the '@' symbol."}, {})]
    (outcome,) = send_chunk(POSTMARK, size=1)
    assert outcome.kind == Outcome.PERMANENT
    assert "Illegal email address" in outcome.error


# --- a message larger than the ESP takes: the campaign's, as a relay's 552 5.3.4 ---------------

@pytest.mark.parametrize("backend", [POSTMARK, RESEND, BREVO, MAILGUN])
def test_a_message_too_large_for_the_esp_refuses_the_campaign_as_it_is(esp, backend):
    """An HTTP 413: every message of the campaign is about as large. Failed as each recipient's
    final answer, the whole campaign would fail within minutes; paused, its page tells the
    operator to resend a smaller message to the rest (``errors.too_large``)."""
    esp.answers = [(413, {"message": "Payload Too Large"}, {})] * 3
    outcomes = send_chunk(backend)
    assert [o.kind for o in outcomes] == [Outcome.REFUSED] * 3, outcomes[0].error
    assert too_large(refusal_reason(outcomes[0].error)), outcomes[0].error
