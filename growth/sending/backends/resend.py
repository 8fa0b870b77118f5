"""Resend: the ``Idempotency-Key`` HTTP header on its API, ``Resend-Idempotency-Key`` over SMTP.

    EMAIL_BACKEND=growth.sending.backends.resend.EmailBackend  ANYMAIL=RESEND_API_KEY=re_...
    EMAIL_BACKEND=growth.sending.backends.resend.SMTPBackend   EMAIL_URL=smtp+tls://resend:re_...@smtp.resend.com:587
"""

from __future__ import annotations

from anymail.backends import resend
from django.core.mail.backends import smtp

from growth.sending.mime import OutgoingEmail

KEY_HEADER = "Idempotency-Key"
IDEMPOTENCY_WINDOW = 24 * 3600  # seconds Resend remembers a key


class EmailBackend(resend.EmailBackend):
    idempotent_receiver = True
    idempotency_window = IDEMPOTENCY_WINDOW

    def build_message_payload(self, message, defaults):
        payload = super().build_message_payload(message, defaults)
        if key := message.extra_headers.get(KEY_HEADER):
            payload.headers[KEY_HEADER] = key  # an HTTP request header, not an email header
        return payload


class SMTPBackend(smtp.EmailBackend):
    idempotent_receiver = True
    idempotency_window = IDEMPOTENCY_WINDOW

    def send_messages(self, email_messages):
        for message in email_messages:
            if key := message.extra_headers.get(KEY_HEADER):
                _add_header(message, "Resend-Idempotency-Key", key)
        return super().send_messages(email_messages)


def _add_header(message, name: str, value: str) -> None:
    if isinstance(message, OutgoingEmail):
        message.add_header(name, value)
    else:
        message.extra_headers[name] = value
