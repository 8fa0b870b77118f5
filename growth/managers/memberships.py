from __future__ import annotations

from django.db import models

from growth.managers.queries import Queries

QUERIES = Queries.beside(__file__)


class MembershipManager(models.Manager):
    """Users' access to accounts (see memberships.sql)."""

    def edit(self, membership_id: int, *, version: int, user_id: int, account_id: int,
             role: str) -> int | None:
        """Save a form of the membership if it is still ``version`` (the one the form was loaded
        from); return its version now, or None when another save came first (or the membership
        is gone): nothing was written."""
        row = QUERIES.one("edit", id=membership_id, version=version, user_id=user_id,
                          account_id=account_id, role=role)
        return None if row is None else row["version"]
