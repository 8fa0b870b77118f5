"""Transports: one shared contract for every transport, then the SMTP error policy on a real
SMTP server on loopback."""

from __future__ import annotations

import pytest
from django.core.mail import EmailMessage

from growth.sending.transports import Delivery, Outcome, get_transport, receiver_deduplicates
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.transports.null import NullTransport
from tests.smtp import free_port


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
        assert "451" in outcomes[0].error and "550" in outcomes[1].error
        assert smtp_settings.handler.keys() == {"campaign:1:3": 1}

    def test_a_server_that_is_down_makes_the_whole_batch_transient(self, settings):
        settings.EMAIL_PORT = free_port()  # nobody listens there
        outcomes = DjangoMailTransport().send_bulk(deliveries("a@example.com", "b@example.com"))
        assert [o.kind for o in outcomes] == ["transient", "transient"]
        assert "Connection refused" in outcomes[0].error or "refused" in outcomes[0].error.lower()

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
        assert "BadHeaderError" in outcome.error


def test_get_transport_imports_the_dotted_path(settings):
    settings.SENDER_TRANSPORT = "growth.sending.transports.null.NullTransport"
    assert isinstance(get_transport(), NullTransport)


def test_the_django_transport_follows_the_idempotency_setting(settings):
    settings.SENDER_IDEMPOTENT_TRANSPORT = True
    assert receiver_deduplicates(DjangoMailTransport(), lease=60) is True
    settings.SENDER_IDEMPOTENT_TRANSPORT = False
    assert receiver_deduplicates(DjangoMailTransport(), lease=60) is False
