from __future__ import annotations

from django.db import models

from growth.managers.queries import fetchall, load_beside

QUERIES = load_beside(__file__)


class SuppressionManager(models.Manager):
    """Idempotent writes to growth_suppressions (see suppressions.sql)."""

    def suppress(self, *, account_id: int, email_lower: str, reason: str,
                 campaign_id: int | None = None) -> bool:
        """Suppress an address for a tenant; return False if it already was."""
        return bool(fetchall(QUERIES["suppress"], {
            "account_id": account_id, "email_lower": email_lower, "reason": reason,
            "campaign_id": campaign_id,
        }))

    def unsubscribe(self, *, account_id: int, subscriber_id: int,
                    campaign_id: int | None) -> str | None:
        """Record a recipient's opt-out; return the address, or None for an unknown subscriber."""
        rows = fetchall(QUERIES["unsubscribe"], {
            "account_id": account_id, "subscriber_id": subscriber_id, "campaign_id": campaign_id,
        })
        return rows[0][0] if rows else None
