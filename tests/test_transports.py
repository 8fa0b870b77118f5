"""Transports: one shared contract for every transport, then the SMTP error policy on a real
SMTP server on loopback."""

from __future__ import annotations

import smtplib
import ssl

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.mail import EmailMessage

from growth.sending.transports import Delivery, Outcome, get_transport, receiver_deduplicates
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.transports.errors import MAX_ERROR, classify_failure, describe
from growth.sending.transports.null import NullTransport
from tests.smtp import RecordingHandler, SMTPServer, free_port


def deliveries(*recipients: str) -> list[Delivery]:
    return [
        Delivery(n, f"campaign:1:{n}", EmailMessage(
            subject="Hi", body="Body", from_email="news@tenant.example", to=[rcpt],
            headers={"Message-ID": f"<campaign.1.{n}@test>", "Idempotency-Key": f"campaign:1:{n}"}))
        for n, rcpt in enumerate(recipients, start=1)
    ]


class TransportContract:
    """Every transport: one outcome per delivery, in order; open/close any number of times."""

    def make(self):
        raise NotImplementedError

    def test_returns_one_sent_outcome_per_delivery_in_order(self):
        with self.make() as transport:
            outcomes = transport.send_bulk(deliveries("a@example.com", "b@example.com"))
        assert [(o.send_id, o.kind) for o in outcomes] == [(1, "sent"), (2, "sent")]
        assert all(o.provider_message_id for o in outcomes)

    def test_an_empty_batch_is_fine_and_close_is_idempotent(self):
        transport = self.make()
        with transport:
            assert transport.send_bulk([]) == []
        transport.close()

    def test_says_what_it_knows_of_its_receiver(self):
        transport = self.make()
        assert transport.idempotent in (True, False, None)
        assert receiver_deduplicates(transport, lease=60) in (True, False)


class TestNullTransport(TransportContract):
    def make(self):
        return NullTransport()


class TestLocmemTransport(TransportContract):
    def make(self):
        return DjangoMailTransport(backend="django.core.mail.backends.locmem.EmailBackend")

    def test_the_provider_id_is_our_message_id(self, mailoutbox):
        with self.make() as transport:
            (outcome,) = transport.send_bulk(deliveries("a@example.com"))
        assert outcome.provider_message_id == "<campaign.1.1@test>"
        assert mailoutbox[0].extra_headers["Idempotency-Key"] == "campaign:1:1"


@pytest.mark.usefixtures("smtp_settings")
class TestSMTPTransport(TransportContract):
    def make(self):
        return DjangoMailTransport()

    def test_messages_reach_the_server_with_their_keys(self, smtp_settings):
        with self.make() as transport:
            transport.send_bulk(deliveries("a@example.com", "b@example.com"))
        assert smtp_settings.handler.keys() == {"campaign:1:1": 1, "campaign:1:2": 1}

    def test_4xx_is_transient_5xx_permanent_and_the_batch_goes_on(self, smtp_settings):
        smtp_settings.handler.replies = {"later@example.com": ["451 4.3.0 try again later"],
                                         "nobody@example.com": ["550 5.1.1 no such user"]}
        with self.make() as transport:
            outcomes = transport.send_bulk(deliveries(
                "later@example.com", "nobody@example.com", "fine@example.com"))
        assert [o.kind for o in outcomes] == ["transient", "permanent", "sent"]
        assert [o.error for o in outcomes[:2]] == ["451 4.3.0 try again later",
                                                   "550 5.1.1 no such user"]
        assert smtp_settings.handler.keys() == {"campaign:1:3": 1}

    def test_a_refused_recipient_is_stored_as_the_servers_reply(self, smtp_settings):
        refuse(smtp_settings, rcpt={"nobody@example.com": "550 5.1.1 <nobody@example.com>: No such user"})
        with self.make() as transport:
            refused, fine = transport.send_bulk(deliveries("nobody@example.com", "fine@example.com"))
        assert (refused.kind, refused.error) == ("permanent",
                                                 "550 5.1.1 <nobody@example.com>: No such user")
        assert fine.kind == "sent"

    def test_a_refused_sender_refuses_us_and_the_rest_of_the_chunk_is_not_tried(self, smtp_settings):
        refuse(smtp_settings, mail="553 5.7.1 Sender not allowed here")
        with self.make() as transport:
            outcomes = transport.send_bulk(deliveries("a@example.com", "b@example.com",
                                                      "c@example.com"))
        assert [(o.send_id, o.kind, o.error) for o in outcomes] == [
            (i, "refused", "553 5.7.1 Sender not allowed here") for i in (1, 2, 3)]
        assert smtp_settings.handler.mail_commands == 1

    def test_a_sender_deferred_by_a_4xx_is_retried(self, smtp_settings):
        refuse(smtp_settings, mail="451 4.3.0 Local configuration error, try again")
        with self.make() as transport:
            outcomes = transport.send_bulk(deliveries("a@example.com", "b@example.com"))
        assert [o.kind for o in outcomes] == ["transient", "transient"]
        assert smtp_settings.handler.mail_commands == 2

    def test_a_login_the_relay_refuses_refuses_us_once_for_the_whole_chunk(self, smtp_settings,
                                                                           settings):
        smtp_settings.require_login("growth", "right")
        settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "growth", "wrong"
        transport = self.make()  # as a worker's wire: opened by its first send
        outcomes = transport.send_bulk(deliveries("a@example.com", "b@example.com"))
        transport.close()
        assert [(o.kind, o.error) for o in outcomes] == [
            ("refused", "535 5.7.8 Authentication credentials invalid")] * 2
        # one login for the chunk (smtplib tries it with both mechanisms the relay offers)
        assert smtp_settings.logins == ["growth"] * 2 and not smtp_settings.handler.accepted
        settings.EMAIL_HOST_PASSWORD = "right"  # mended: the same relay takes them
        with self.make() as transport:
            outcomes = transport.send_bulk(deliveries("a@example.com", "b@example.com"))
        assert [o.kind for o in outcomes] == ["sent", "sent"]

    def test_no_login_where_the_relay_wants_one_refuses_us(self, smtp_settings):
        smtp_settings.require_login("growth", "right")
        with self.make() as transport:
            outcomes = transport.send_bulk(deliveries("a@example.com", "b@example.com"))
        assert [(o.kind, o.error) for o in outcomes] == [
            ("refused", "530 5.7.0 Authentication required")] * 2

    def test_a_login_the_relay_does_not_offer_refuses_us(self, smtp_settings, settings):
        settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "growth", "secret"
        (outcome,) = self.make().send_bulk(deliveries("a@example.com"))
        assert outcome.kind == "refused"
        assert outcome.error == "SMTPNotSupportedError: SMTP AUTH extension not supported by server."

    def test_a_reply_without_an_enhanced_status_is_stored_as_it_came(self, smtp_settings):
        smtp_settings.handler.replies = {"a@example.com": ["554 Transaction failed"]}
        with self.make() as transport:
            (outcome,) = transport.send_bulk(deliveries("a@example.com"))
        assert (outcome.kind, outcome.error) == ("permanent", "554 Transaction failed")

    def test_a_server_that_is_down_makes_the_whole_batch_transient(self, settings):
        settings.EMAIL_PORT = free_port()  # nobody listens there
        outcomes = DjangoMailTransport().send_bulk(deliveries("a@example.com", "b@example.com"))
        assert [o.kind for o in outcomes] == ["transient", "transient"]
        assert outcomes[0].error.startswith("ConnectionRefusedError: ")

    def test_a_dropped_connection_is_reopened_for_the_next_message(self, smtp_settings):
        first, second, third = deliveries("a@example.com", "b@example.com", "c@example.com")
        transport = self.make()
        assert transport.send_bulk([first])[0].kind == "sent"
        smtp_settings.stop()  # the server restarts while our connection is open
        smtp_settings.start()
        outcomes = transport.send_bulk([second, third])
        transport.close()
        assert [o.kind for o in outcomes] == ["transient", "sent"]
        assert smtp_settings.handler.keys() == {"campaign:1:1": 1, "campaign:1:3": 1}

    def test_a_message_that_cannot_be_built_is_permanent(self):
        (delivery,) = deliveries("a@example.com")
        delivery.message.subject = "two\nlines"
        with self.make() as transport:
            (outcome,) = transport.send_bulk([delivery])
        assert outcome.kind == Outcome.PERMANENT
        assert outcome.error.startswith("BadHeaderError: Header values can't contain newlines")


def test_get_transport_imports_the_dotted_path(settings):
    settings.SENDER_TRANSPORT = "growth.sending.transports.null.NullTransport"
    assert isinstance(get_transport(), NullTransport)


def test_the_django_transport_follows_the_idempotency_setting(settings):
    settings.SENDER_IDEMPOTENT_TRANSPORT = True
    assert receiver_deduplicates(DjangoMailTransport(), lease=60) is True
    settings.SENDER_IDEMPOTENT_TRANSPORT = False
    assert receiver_deduplicates(DjangoMailTransport(), lease=60) is False


class RefusingHandler(RecordingHandler):
    """Refuses a scripted sender at MAIL FROM and scripted recipients at RCPT TO."""

    def __init__(self, *, mail: str | None = None, rcpt: dict[str, str] | None = None) -> None:
        super().__init__()
        self.mail_reply = mail
        self.rcpt_replies = rcpt or {}
        self.mail_commands = 0

    async def handle_MAIL(self, server, session, envelope, address, mail_options):
        self.mail_commands += 1
        if self.mail_reply:
            return self.mail_reply
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.lower() in self.rcpt_replies:
            return self.rcpt_replies[address.lower()]
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(rcpt_options)
        return "250 OK"


def refuse(server: SMTPServer, **replies) -> None:
    server.stop()
    server.handler = RefusingHandler(**replies)
    server.start()


@pytest.mark.parametrize(("exc", "stored"), [
    (smtplib.SMTPRecipientsRefused({"a@example.com": (550, b"5.1.1 No such user")}),
     "550 5.1.1 No such user"),
    (smtplib.SMTPRecipientsRefused({"a@example.com": (550, b"5.1.1 No such user"),
                                    "b@example.com": (452, b"4.2.2 Mailbox full")}),
     "a@example.com: 550 5.1.1 No such user; b@example.com: 452 4.2.2 Mailbox full"),
    (smtplib.SMTPDataError(550, b"5.2.1 The email account that you tried to reach is disabled"),
     "550 5.2.1 The email account that you tried to reach is disabled"),
    (smtplib.SMTPSenderRefused(553, b"5.1.8 Domain of sender address does not exist",
                               "news@tenant.example"),
     "553 5.1.8 Domain of sender address does not exist"),
    (smtplib.SMTPResponseException(421, b"4.7.0 Try again later, closing connection"),
     "421 4.7.0 Try again later, closing connection"),
    (smtplib.SMTPAuthenticationError(535, b"5.7.8 Username and Password not accepted"),
     "535 5.7.8 Username and Password not accepted"),
    # a multiline reply, as smtplib joins it (codes stripped): its repeated status dropped
    (smtplib.SMTPDataError(550, b"5.1.1 The email account does not exist.\n5.1.1 Please check it"),
     "550 5.1.1 The email account does not exist. Please check it"),
    (smtplib.SMTPDataError(550, "Non délivrable".encode("latin-1")), "550 Non d\ufffdlivrable"),
    (smtplib.SMTPServerDisconnected("Connection unexpectedly closed"),
     "SMTPServerDisconnected: Connection unexpectedly closed"),
    (ConnectionResetError(104, "Connection reset by peer"),
     "ConnectionResetError: [Errno 104] Connection reset by peer"),
    (TimeoutError(), "TimeoutError"),
])
def test_each_failure_is_stored_as_code_and_text_or_name_and_message(exc, stored):
    assert describe(exc) == stored


@pytest.mark.parametrize(("exc", "kind"), [
    (smtplib.SMTPAuthenticationError(535, b"5.7.8 Username and Password not accepted"), "refused"),
    (smtplib.SMTPAuthenticationError(454, b"4.7.0 Temporary authentication failure"), "transient"),
    (smtplib.SMTPSenderRefused(553, b"5.7.1 Sender not owned by user", "a@x.example"), "refused"),
    (smtplib.SMTPSenderRefused(451, b"4.3.0 Try again", "a@x.example"), "transient"),
    (smtplib.SMTPConnectError(554, b"5.7.1 Client host rejected"), "refused"),
    (smtplib.SMTPConnectError(421, b"Service not available"), "transient"),
    (smtplib.SMTPHeloError(501, b"5.5.4 Invalid HELO name"), "refused"),
    (smtplib.SMTPNotSupportedError("STARTTLS extension not supported by server."), "refused"),
    (ssl.SSLCertVerificationError(1, "certificate verify failed: self-signed certificate"),
     "refused"),
    (ImproperlyConfigured("Missing required setting 'RESEND_API_KEY'"), "refused"),
    (smtplib.SMTPServerDisconnected("Connection unexpectedly closed"), "transient"),
    (ConnectionRefusedError(111, "Connection refused"), "transient"),
    (smtplib.SMTPRecipientsRefused({"a@x.example": (554, b"5.7.1 <a@x.example>: Relay access denied")}),
     "refused"),
    # Postfix's defer_unauth_destination: about us, not a "slow down" (4.7.1 would read as one)
    (smtplib.SMTPRecipientsRefused({"a@x.example": (454, b"4.7.1 <a@x.example>: Relay access denied")}),
     "transient"),
    (smtplib.SMTPRecipientsRefused({"a@x.example": (450, b"4.7.25 Client host rejected: cannot "
                                                         b"find your hostname")}), "transient"),
    (smtplib.SMTPRecipientsRefused({"a@x.example": (550, b"5.1.1 <a@x.example>: Recipient address "
                                                         b"rejected: User unknown")}), "permanent"),
    (smtplib.SMTPDataError(530, b"5.7.57 Client not authenticated to send mail"), "refused"),
    (smtplib.SMTPDataError(554, b"5.7.1 Message rejected as spam"), "permanent"),
    # Amazon SES over SMTP: the day's quota spent is no "slow down"; its rate limit is one
    (smtplib.SMTPSenderRefused(454, b"Throttling failure: Daily message quota exceeded.",
                               "a@x.example"), "refused"),
    (smtplib.SMTPDataError(454, b"Throttling failure: Daily message quota exceeded."), "refused"),
    (smtplib.SMTPSenderRefused(454, b"Throttling failure: Maximum sending rate exceeded.",
                               "a@x.example"), "throttled"),
])
def test_which_failures_refuse_us_rather_than_the_recipient(exc, kind):
    assert classify_failure(exc).kind == kind


def test_a_stored_failure_is_bounded_and_on_one_line():
    error = describe(smtplib.SMTPDataError(550, b"5.7.1 " + b"x" * 5000 + b"\r\nmore"))
    assert len(error) == MAX_ERROR and error.endswith("\u2026") and "\n" not in error
