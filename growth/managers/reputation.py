"""The reputation guard's statements (see reputation.sql): each tenant's bounce and complaint
figures over its recent sends, and the lock under which the guard pauses a tenant's campaigns.

Attached to no model: ``REPUTATION`` is the one instance, used by ``growth.reputation.guard``.
The pause itself is the engine's own compare-and-set (``CampaignManager.pause``), run by the
guard inside the transaction that holds ``lock_to_pause``'s rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class Figures(FromRow):
    """One tenant's counts over the window, as reputation.sql's ``_rates`` defines them."""

    account_id: int
    account_name: str
    sent: int  # accepted by the receiving side ('sent') in the window
    bounced_sent: int  # of those, hard bounces reported afterwards (ESP webhook, bounce mailbox)
    bounced_failed: int  # refused for good: by our relay at once, or failed on a reported bounce
    complained: int  # sends a complaint was reported for
    bounced_at: datetime | None  # when the newest hard-bounce evidence reached us
    complained_at: datetime | None  # when the newest complaint reached us

    @property
    def attempts(self) -> int:
        """Messages that reached a receiving server: the bounce rate's denominator."""
        return self.sent + self.bounced_failed

    @property
    def hard_bounces(self) -> int:
        return self.bounced_sent + self.bounced_failed

    @property
    def delivered(self) -> int:
        """Accepted and not bounced since: the complaint rate's denominator."""
        return max(self.sent - self.bounced_sent, 0)


class ReputationManager:
    """Reads for the reputation guard; it writes nothing itself (the pause is the campaign
    manager's compare-and-set)."""

    def figures(self, account_ids: Iterable[int], *, days: int) -> list[Figures]:
        """The figures of these tenants over the last ``days`` days (every tenant given gets a
        row, zeros when it sent nothing)."""
        ids = sorted({int(i) for i in account_ids})
        if not ids:
            return []
        return [Figures.from_row(row) for row in QUERIES.rows("rates", account_ids=ids, days=days)]

    def figures_of_sending_tenants(self, *, days: int) -> list[Figures]:
        """The figures of every tenant that has a campaign sending now."""
        return [Figures.from_row(row) for row in QUERIES.rows("rates_of_sending_tenants", days=days)]

    def lock_to_pause(self, *, account_id: int, evidence_at: datetime) -> list[int]:
        """Lock, until the caller's transaction ends, the tenant's sending campaigns that moved
        (started, built, resumed) before ``evidence_at``; return their ids. Campaigns another
        transaction holds are skipped. Call inside ``transaction.atomic()``."""
        return QUERIES.column("lock_to_pause", account_id=account_id, evidence_at=evidence_at)


REPUTATION = ReputationManager()
