"""Brevo: an ``idempotencyKey`` in the API request's headers object. Brevo wants a UUID, so the
key is the UUID derived from our job id (uuid5: the same id gives the same UUID on every retry).

    EMAIL_BACKEND=growth.sending.backends.brevo.EmailBackend  ANYMAIL=BREVO_API_KEY=xkeysib-...
"""

from __future__ import annotations

import uuid

from anymail.backends import brevo

NAMESPACE = uuid.UUID("3d1c0c3e-5a3b-4f6e-9b1e-2f7c8a9d0e1f")  # ours; never change it
IDEMPOTENCY_WINDOW = 15 * 60  # seconds: Brevo documents 15 to 30 minutes


def brevo_key(job_id: str) -> str:
    return str(uuid.uuid5(NAMESPACE, job_id))


class EmailBackend(brevo.EmailBackend):
    idempotent_receiver = True
    idempotency_window = IDEMPOTENCY_WINDOW

    def send_messages(self, email_messages):
        for message in email_messages:
            if key := message.extra_headers.get("Idempotency-Key"):
                message.extra_headers["idempotencyKey"] = brevo_key(key)
        return super().send_messages(email_messages)
