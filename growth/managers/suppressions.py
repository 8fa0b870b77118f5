from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import models

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class OptOut(FromRow):
    """What a recipient's opt-out changed: enough to undo it."""

    email_lower: str
    suppression_id: int | None  # the suppression it created; None: the address already was
    confirmed_ids: list[int]  # subscriber rows it moved from confirmed to unsubscribed
    pending_ids: list[int]  # and from pending


class SuppressionManager(models.Manager):
    """Idempotent writes to growth_suppressions (see suppressions.sql)."""

    def suppress(self, *, account_id: int, email_lower: str, reason: str,
                 campaign_id: int | None = None) -> bool:
        """Suppress an address for a tenant; return False if it already was."""
        return bool(QUERIES.rows("suppress", account_id=account_id, email_lower=email_lower,
                                 reason=reason, campaign_id=campaign_id))

    def suppress_many(self, *, account_id: int, emails_lower: Sequence[str], reason: str) -> set[str]:
        """Suppress several addresses in one statement; return those that were not suppressed yet."""
        if not emails_lower:
            return set()
        return set(QUERIES.column("suppress_many", account_id=account_id,
                                  emails=list(emails_lower), reason=reason))

    def suppress_bounced(self, send_ids: Sequence[int]) -> list[str]:
        """Suppress, for its own tenant, the address of each of these failed sends (a hard
        bounce); return the addresses that were not suppressed yet."""
        if not send_ids:
            return []
        return QUERIES.column("suppress_bounced", send_ids=list(send_ids))

    def remove(self, *, account_id: int, suppression_id: int) -> str | None:
        """Delete one of the tenant's suppressions; return its address, or None if it has none
        with this id."""
        removed = QUERIES.one("remove", account_id=account_id, suppression_id=suppression_id)
        return removed["email_lower"] if removed else None

    def unsubscribe(self, *, account_id: int, subscriber_id: int, email_lower: str,
                    campaign_id: int | None) -> OptOut | None:
        """Record the opt-out of ``email_lower``, the address the subscriber's message went to;
        return what it changed (for its undo, see ``resubscribe``), or None for an unknown
        subscriber."""
        done = QUERIES.one("unsubscribe", account_id=account_id, subscriber_id=subscriber_id,
                           email_lower=email_lower, campaign_id=campaign_id)
        return OptOut.from_row(done) if done else None

    def undoable(self, *, account_id: int, email_lower: str, suppression_id: int) -> bool:
        """Whether ``resubscribe`` would lift this suppression now (see _undoable)."""
        return QUERIES.one("undoable", account_id=account_id, email_lower=email_lower,
                           suppression_id=suppression_id)["undoable"]

    def resubscribe(self, *, account_id: int, email_lower: str, suppression_id: int,
                    confirmed_ids: Sequence[int], pending_ids: Sequence[int]) -> bool:
        """Undo a recipient's opt-out: lift its suppression if it is still the recipient's own
        and nothing has suppressed the address since, and set the subscriber rows it marked back
        to what they were. Return whether it was lifted (nothing is changed otherwise)."""
        done = QUERIES.one("resubscribe", account_id=account_id, email_lower=email_lower,
                           suppression_id=suppression_id, confirmed_ids=list(confirmed_ids),
                           pending_ids=list(pending_ids))
        return done["lifted"]
