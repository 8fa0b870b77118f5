from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime

from django.db import models

from growth.job_ids import JobKey
from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class SendRecord(FromRow):
    """The send an event names, as our ledger has it."""

    send_id: int
    account_id: int
    campaign_id: int
    email_lower: str
    status: str  # as the event found it: only a send in doubt is settled by one


@dataclass(frozen=True, slots=True)
class Attribution:
    """What an event is about: a send of ours (its tenant, campaign, address), or nothing, and
    then why not."""

    send: SendRecord | None
    unattributed_because: str = ""


class FeedbackEventManager(models.Manager):
    """Reads that attribute ESP events to tenants, and the idempotent write of an event (see
    feedback.sql)."""

    def send_by_job(self, key: JobKey) -> SendRecord | None:
        found = QUERIES.one("send_by_job", campaign_id=key.campaign_id,
                            subscriber_id=key.subscriber_id)
        return SendRecord.from_row(found) if found else None

    def send_by_provider_id(self, *, message_id: str) -> SendRecord | None:
        """Return the send the provider gave this id, unless none or several have it."""
        rows = QUERIES.rows("send_by_provider_id", message_id=message_id)
        return SendRecord.from_row(rows[0]) if len(rows) == 1 else None

    def record(self, *, esp: str, event_id: str, event_type: str, reject_reason: str,
               email_lower: str, attribution: Attribution, suppressed: bool, description: str,
               mta_response: str, occurred_at: datetime | None) -> bool:
        """Insert the event; return False if it was already recorded."""
        send = attribution.send
        return bool(QUERIES.rows(
            "record", esp=esp, event_id=event_id, event_type=event_type,
            reject_reason=reject_reason, email_lower=email_lower,
            account_id=send and send.account_id, campaign_id=send and send.campaign_id,
            send_id=send and send.send_id, unattributed_because=attribution.unattributed_because,
            suppressed=suppressed, description=description, mta_response=mta_response,
            occurred_at=occurred_at))

    def use_token(self, *, esp: str, token: str, body: bytes) -> bool:
        """Record a webhook signature's one-time token; return False when it was used before
        with another body (a replay). The same body again is the ESP posting again: True."""
        digest = hashlib.sha256(body).hexdigest()
        used = QUERIES.one("use_token", esp=esp, token=token[:255], body_sha256=digest)
        return used["first_use"] or used["first_body_sha256"] == digest

    def soft_bounces(self, *, esp: str, account_id: int, email_lower: str, send_id: int,
                     days: int) -> int:
        """How many other sends of this tenant to this address bounced softly (recorded without
        suppressing) within the last ``days``. Run it in the transaction that records the new
        one: it first takes that (tenant, address)'s lock, so that two soft bounces recorded at
        once are counted one after the other."""
        QUERIES.rows("soft_bounce_lock", account_id=account_id, email_lower=email_lower)
        return QUERIES.one("soft_bounces", esp=esp, account_id=account_id,
                           email_lower=email_lower, send_id=send_id, days=days)["sends"]
