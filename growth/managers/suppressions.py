from __future__ import annotations

from collections.abc import Sequence

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


class SuppressionManager(models.Manager):
    """Idempotent writes to growth_suppressions (see suppressions.sql)."""

    def suppress(self, *, account_id: int, email_lower: str, reason: str,
                 campaign_id: int | None = None) -> bool:
        """Suppress an address for a tenant; return False if it already was."""
        return bool(QUERIES.rows("suppress", account_id=account_id, email_lower=email_lower,
                                 reason=reason, campaign_id=campaign_id))

    def unsubscribe(self, *, account_id: int, subscriber_id: int,
                    campaign_id: int | None) -> str | None:
        """Record a recipient's opt-out; return the address, or None for an unknown subscriber."""
        done = QUERIES.one("unsubscribe", account_id=account_id, subscriber_id=subscriber_id,
                           campaign_id=campaign_id)
        return done["email_lower"] if done else None

    def suppress_many(self, *, account_id: int, emails_lower: Sequence[str], reason: str) -> set[str]:
        """Suppress several addresses in one statement; return those that were not suppressed yet."""
        if not emails_lower:
            return set()
        return set(QUERIES.column("suppress_many", account_id=account_id,
                                  emails=list(emails_lower), reason=reason))

    def remove(self, *, account_id: int, suppression_id: int) -> str | None:
        """Delete one of the tenant's suppressions; return its address, or None if it has none
        with this id."""
        removed = QUERIES.one("remove", account_id=account_id, suppression_id=suppression_id)
        return removed["email_lower"] if removed else None
