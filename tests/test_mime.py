"""The prebuilt wire form of a message must say what Django's own builder would say."""

from __future__ import annotations

from email import message_from_bytes, policy

import pytest
from django.core.mail import EmailMultiAlternatives

from growth.sending.rendering import CampaignContent, CampaignRenderer
from growth.sending.unsubscribe import LinkMaker

HTML = "<html><body><p>Hi {{ email }} &amp; co</p></body></html>"
CASES = {
    "ascii text only": ("Hello {{ email }}", "Hi {{ email }},\nline two\n", ""),
    "ascii with html": ("Hello", "Hi {{ email }}\n", HTML),
    "non-ascii everywhere": ("Grüße, {{ email }} — ça va ?", "Liebe Grüße\nçà\n", "<p>Grüße</p>"),
    "long subject": ("A subject that is quite a lot longer than seventy-eight characters, "
                     "to make Django fold it", "Body\n", ""),
    "dots and blank lines": ("Dots", ".\n..leading dots\n\n\nend", ""),
    "template tags": ("{% if email %}Yes {{ email|upper }}{% endif %}", "{{ email|title }}", ""),
}


def renderer(subject: str, text: str, html: str, from_name: str = "Acme Bücher") -> CampaignRenderer:
    content = CampaignContent(7, 3, subject, text, html, "news@acme.example", from_name)
    return CampaignRenderer(content, links=LinkMaker("https://growth.example"),
                            message_id_domain="growth.example")


def django_bytes(message) -> bytes:
    plain = EmailMultiAlternatives(subject=message.subject, body=message.body,
                                   from_email=message.from_email, to=message.to,
                                   headers=message.extra_headers,
                                   alternatives=message.alternatives)
    return plain.message().as_bytes(linesep="\r\n")


def parsed(data: bytes):
    return message_from_bytes(data, policy=policy.default)


def comparable(message) -> tuple:
    headers = [(k, str(v).strip()) for k, v in message.items() if k not in ("Date", "Content-Type")]
    parts = [(p.get_content_type(), p.get_content()) for p in message.walk()
             if not p.is_multipart()]
    return headers, message.get_content_type(), parts


@pytest.mark.parametrize("case", CASES)
def test_the_prebuilt_message_parses_like_djangos(case):
    message = renderer(*CASES[case]).render(job_id="campaign:7:42", email="o'brien@example.com",
                                            subscriber_id=42)
    assert message.prebuilt is not None
    assert comparable(parsed(message.prebuilt)) == comparable(parsed(django_bytes(message)))
    assert b"\r\n" in message.prebuilt and b"\n" not in message.prebuilt.replace(b"\r\n", b"")


def test_the_wire_form_is_what_backends_get():
    message = renderer(*CASES["ascii with html"]).render(job_id="campaign:7:1", email="a@b.example",
                                                         subscriber_id=1)
    assert message.message().as_bytes(linesep="\r\n") == message.prebuilt


def test_an_internationalised_domain_is_built_as_its_dedup_key_reads_it():
    message = renderer("Hi", "Hi", "").render(job_id="campaign:7:1", email="jose@bücher.example",
                                              subscriber_id=1)
    assert message.to == ["jose@xn--bcher-kva.example"]
    assert parsed(message.prebuilt)["To"] == "jose@xn--bcher-kva.example"


@pytest.mark.parametrize(("email", "text"), [
    ("a@b.example", "x" * 1200),  # a line longer than SMTP allows
])
def test_unusual_messages_fall_back_to_djangos_builder(email, text):
    message = renderer("Hi", text, "").render(job_id="campaign:7:1", email=email, subscriber_id=1)
    assert message.prebuilt is None
    assert parsed(message.message().as_bytes())["Idempotency-Key"] == "campaign:7:1"
