from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import models

from growth.managers.queries import FromRow, Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class Claim(FromRow):
    """A sending domain as the sender rule reads it."""

    account_id: int | None  # None: the platform's
    domain: str
    verified: bool


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a DNS check wrote: ``stale`` when the row changed while the DNS was read."""

    stale: bool
    verified_at: datetime | None = None


class SendingDomainManager(models.Manager):
    """Which domains an account may send from, and their proof in DNS (see domains.sql)."""

    def claims(self, *, account_id: int | None, names: Sequence[str]) -> list[Claim]:
        return [Claim.from_row(row)
                for row in QUERIES.rows("claims", account_id=account_id, names=list(names))]

    def usable(self, *, account_id: int | None) -> list[tuple[str, bool]]:
        """[(domain, is the platform's)] this account may send from: its verified ones first."""
        return [(row["domain"], row["platform"])
                for row in QUERIES.rows("usable", account_id=account_id)]

    def unverified(self, *, account_id: int | None) -> list[str]:
        return QUERIES.column("unverified", account_id=account_id)

    def record_check(self, domain, *, verified: bool) -> Recorded:
        """Record the DNS check of ``domain`` (a SendingDomain as it was read for the check)."""
        row = QUERIES.one("record_check", verified=verified, id=domain.pk,
                          account_id=domain.account_id, domain=domain.domain,
                          selector=domain.selector, algorithm=domain.algorithm,
                          private_key=domain.private_key)
        return Recorded(stale=True) if row is None else Recorded(False, row["verified_at"])
