from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, models, transaction

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)

PAGE_SIZE = 5_000  # rows a page: memory stays that of one page, whatever the campaign's size


@dataclass(frozen=True, slots=True)
class LedgerRow(FromRow):
    """One recipient of a campaign, and what the ESP said about the send."""

    email: str
    email_lower: str  # the page's key
    status: str
    sent_at: datetime | None
    attempts: int
    last_error: str
    job_id: str
    provider_message_id: str
    resent_in_id: int | None  # the follow-up campaign the recipient was handed to
    feedback: str  # the distinct ESP event types on this send, '; '-separated ('' for none)
    feedback_detail: str  # the latest event's MTA response or description
    feedback_at: datetime | None  # when the latest event happened


class SendLedgerManager(models.Manager):
    """Reads of the per-recipient ledger: who got what (see ledger.sql)."""

    def page(self, *, campaign_id: int, after: str = "", size: int = PAGE_SIZE) -> list[LedgerRow]:
        """Up to ``size`` of the campaign's rows whose address sorts after ``after``, in order."""
        rows = QUERIES.rows("campaign_page", campaign_id=campaign_id, after=after, page=size)
        return [LedgerRow.from_row(row) for row in rows]

    def pages(self, *, campaign_id: int, size: int = PAGE_SIZE) -> Iterator[list[LedgerRow]]:
        """Every row of the campaign once, page by page, each page its own statement, all in
        one read-only snapshot: the campaign as it was when the first page was read (a long
        export holds back VACUUM that long). In a transaction already, that one's view. Each
        address is in exactly one page (the key is unique in the campaign)."""
        begins = not connection.in_atomic_block
        with transaction.atomic():
            if begins:
                QUERIES.rows("snapshot")
            after = ""
            while True:
                page = self.page(campaign_id=campaign_id, after=after, size=size)
                if page:
                    yield page
                if len(page) < size:
                    return
                after = page[-1].email_lower
