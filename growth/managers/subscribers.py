from __future__ import annotations

from collections.abc import Sequence

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


class SubscriberManager(models.Manager):
    """Bulk writes to growth_subscribers (see subscribers.sql)."""

    def add_many(self, *, segment_id: int, addresses: Sequence[tuple[str, str]],
                 status: str) -> set[str]:
        """Insert (email, email_lower) pairs into a segment in one statement; return the keys
        inserted. Addresses already in the segment are left exactly as they are; one that
        unsubscribed from the tenant is not added."""
        if not addresses:
            return set()
        return set(QUERIES.column("add_many", segment_id=segment_id, status=status,
                                  emails=[email for email, _ in addresses],
                                  email_lowers=[key for _, key in addresses]))

    def confirm_pending(self, subscriber_ids: Sequence[int]) -> list[int]:
        """Move pending subscribers to confirmed; return the ids moved (others are untouched)."""
        return QUERIES.column("confirm_pending", ids=list(subscriber_ids))

    def unsubscribe_address(self, *, account_id: int, email_lower: str) -> int:
        """Mark the tenant's subscriber rows of the address unsubscribed; return how many changed."""
        return len(QUERIES.column("unsubscribe_address", account_id=account_id,
                                  email_lower=email_lower))
