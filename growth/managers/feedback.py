from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import models

from growth.job_ids import JobKey
from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class Attribution(FromRow):
    """The tenant an event belongs to, and as much of the campaign and send as is known."""

    account_id: int
    campaign_id: int | None = None
    send_id: int | None = None
    email_lower: str | None = None  # the send's address, when the event is matched to a send


class FeedbackEventManager(models.Manager):
    """Reads that attribute ESP events to tenants, and the idempotent write of an event (see
    feedback.sql)."""

    def send_by_job(self, key: JobKey) -> Attribution | None:
        found = QUERIES.one("send_by_job", campaign_id=key.campaign_id,
                            subscriber_id=key.subscriber_id)
        return Attribution.from_row(found) if found else None

    def send_by_provider_id(self, *, message_id: str) -> Attribution | None:
        """Return the send the provider gave this id, unless none or several have it."""
        rows = QUERIES.rows("send_by_provider_id", message_id=message_id)
        return Attribution.from_row(rows[0]) if len(rows) == 1 else None

    def tenant(self, *, account_id: int, campaign_id: int | None,
               email_lower: str | None) -> Attribution | None:
        """Return the account (None if it does not exist) with the campaign, if it is the
        account's, and that campaign's send to ``email_lower``, if any."""
        found = QUERIES.one("tenant", account_id=account_id, campaign_id=campaign_id,
                            email_lower=email_lower)
        return Attribution.from_row(found) if found else None

    def record(self, *, esp: str, event_id: str, event_type: str, reject_reason: str,
               email_lower: str, attribution: Attribution, suppressed: bool, description: str,
               mta_response: str, occurred_at: datetime | None) -> bool:
        """Insert the event; return False if it was already recorded."""
        return bool(QUERIES.rows(
            "record", esp=esp, event_id=event_id, event_type=event_type,
            reject_reason=reject_reason, email_lower=email_lower,
            account_id=attribution.account_id, campaign_id=attribution.campaign_id,
            send_id=attribution.send_id, suppressed=suppressed, description=description,
            mta_response=mta_response, occurred_at=occurred_at))
