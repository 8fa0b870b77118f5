"""The mail-domain cache's statements (see destinations.sql): the domains a campaign's build will
meet that have no destination yet, the recording of classifications, and what an operator who
forgets cached domains is told about the running campaigns' recipients on them.

``MAIL_DOMAINS`` is the instance ``growth.audience.destinations`` uses; the manager needs no
model of its own, and may also be attached to ``MailDomain``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


@dataclass(frozen=True, slots=True)
class Classification:
    """Where one domain's mail goes, how that was found, and for how long to believe it."""

    domain: str  # the key: the domain as the build reads it from an address
    destination: str  # the destination's name
    source: str  # MailDomain.Source: mx, static, unresolved
    lifetime: float  # seconds until it is classified again
    mx_hosts: tuple[str, ...] = ()  # in preference order


class MailDomainManager(models.Manager):
    """Reads and writes of growth_mail_domains and growth_destinations (see destinations.sql)."""

    def unclassified_domains(self, *, campaign_id: int, limit: int) -> list[str]:
        """Domains of the campaign's tenant's confirmed subscribers that have no classification
        or an expired one, most frequent first, at most ``limit``."""
        return QUERIES.column("unclassified_domains", campaign_id=campaign_id, limit=limit)

    def record(self, classifications: Sequence[Classification]) -> int:
        """Write the classifications (creating their destinations) in one statement; return how
        many domains were recorded. A domain given twice keeps its last classification."""
        latest = {c.domain: c for c in classifications}
        if not latest:
            return 0
        batch = [latest[domain] for domain in sorted(latest)]
        return len(QUERIES.column(
            "record",
            domains=[c.domain for c in batch],
            destinations=[c.destination for c in batch],
            mx_hosts=[" ".join(c.mx_hosts) for c in batch],
            sources=[c.source for c in batch],
            lifetimes=[float(c.lifetime) for c in batch],
        ))

    def unsent_on(self, domains: Sequence[str]) -> list[dict]:
        """The running campaigns' rows not yet sent whose address is on one of ``domains``:
        ``{domain, campaign_id, destination (the row's, None: not paced per provider),
        recipients}`` per group."""
        if not domains:
            return []
        return QUERIES.rows("unsent_on_domains", domains=list(domains))


MAIL_DOMAINS = MailDomainManager()
