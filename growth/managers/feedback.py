from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import models

from growth.managers.queries import fetchall, load_beside
from growth.managers.sends import job_key

QUERIES = load_beside(__file__)


@dataclass(frozen=True, slots=True)
class Attribution:
    """The tenant an event belongs to, and as much of the campaign and send as is known."""

    account_id: int
    campaign_id: int | None = None
    send_id: int | None = None
    email_lower: str | None = None  # the send's address, when the event is matched to a send


class FeedbackEventManager(models.Manager):
    """Reads that attribute ESP events to tenants, and the idempotent write of an event (see
    feedback.sql)."""

    def send_by_job_id(self, *, job_id: str) -> Attribution | None:
        key = job_key(job_id)
        return _one_send(fetchall(QUERIES["send_by_job_id"], key)) if key else None

    def send_by_provider_id(self, *, message_id: str) -> Attribution | None:
        """Return the send the provider gave this id, unless none or several have it."""
        rows = fetchall(QUERIES["send_by_provider_id"], {"message_id": message_id})
        return _one_send(rows) if len(rows) == 1 else None

    def tenant(self, *, account_id: int, campaign_id: int | None,
               email_lower: str | None) -> Attribution | None:
        """Return the account (None if it does not exist) with the campaign, if it is the
        account's, and that campaign's send to ``email_lower``, if any."""
        rows = fetchall(QUERIES["tenant"], {"account_id": account_id, "campaign_id": campaign_id,
                                            "email_lower": email_lower})
        if not rows:
            return None
        account, campaign, send = rows[0]
        return Attribution(account_id=account, campaign_id=campaign, send_id=send)

    def record(self, *, esp: str, event_id: str, event_type: str, reject_reason: str,
               email_lower: str, attribution: Attribution, suppressed: bool, description: str,
               mta_response: str, occurred_at: datetime | None) -> bool:
        """Insert the event; return False if it was already recorded."""
        return bool(fetchall(QUERIES["record"], {
            "esp": esp, "event_id": event_id, "event_type": event_type,
            "reject_reason": reject_reason, "email_lower": email_lower,
            "account_id": attribution.account_id, "campaign_id": attribution.campaign_id,
            "send_id": attribution.send_id, "suppressed": suppressed, "description": description,
            "mta_response": mta_response, "occurred_at": occurred_at,
        }))

    def unsubscribe_address(self, *, account_id: int, email_lower: str) -> int:
        """Mark the tenant's subscriber rows of the address unsubscribed; return how many changed."""
        return len(fetchall(QUERIES["unsubscribe_address"], {
            "account_id": account_id, "email_lower": email_lower,
        }))


def _one_send(rows: list[tuple]) -> Attribution | None:
    if not rows:
        return None
    send_id, account_id, campaign_id, email_lower = rows[0]
    return Attribution(account_id=account_id, campaign_id=campaign_id, send_id=send_id,
                       email_lower=email_lower)
