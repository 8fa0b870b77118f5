from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


class AccountManager(models.Manager):
    """Tenants (see accounts.sql)."""

    def edit(self, account_id: int, *, version: int, memberships_changed: bool, name: str,
             slug: str, from_email: str, from_name: str, time_zone: str,
             warmup_started_on: dt.date | None, warmup_daily_start: int,
             warmup_daily_growth: float, warmup_until: int) -> int | None:
        """Save an editor's form of the account if the account is still ``version`` (the one the
        form was loaded from); return its version now, or None when another save came first (or
        the account is gone): nothing was written."""
        row = QUERIES.one("edit", id=account_id, version=version,
                          memberships_changed=memberships_changed, name=name, slug=slug,
                          from_email=from_email, from_name=from_name, time_zone=time_zone,
                          warmup_started_on=warmup_started_on,
                          warmup_daily_start=warmup_daily_start,
                          warmup_daily_growth=warmup_daily_growth, warmup_until=warmup_until)
        return None if row is None else row["version"]

    def members_changed(self, account_ids: Iterable[int]) -> None:
        """A new version of these accounts' change forms (see accounts.sql)."""
        QUERIES.rowcount("members_changed", ids=sorted(set(account_ids)))
