"""Which accounts a user may see and change: the one rule behind the admin's scoping and the
tenant UI. A membership's role means the same in both: an editor changes the account's data, a
viewer only reads it."""

from __future__ import annotations

from django.db.models import QuerySet

from growth.models import Membership

_CACHE = "_growth_memberships"


def _roles(user) -> dict[int, str]:
    """{account id: role} of the user's memberships, cached on the user (one request)."""
    cached = getattr(user, _CACHE, None)
    if cached is None:
        cached = dict(Membership.objects.filter(user=user).values_list("account_id", "role"))
        setattr(user, _CACHE, cached)
    return cached


def account_ids_for(user, *, editable: bool = False) -> frozenset[int] | None:
    """Return the ids of the accounts ``user`` may see (``editable``: may change), or None for
    "every account" (superusers)."""
    if not user.is_authenticated or not user.is_active:
        return frozenset()
    if user.is_superuser:
        return None
    roles = _roles(user)
    if editable:
        return frozenset(a for a, role in roles.items() if role == Membership.Role.EDITOR)
    return frozenset(roles)


def may_edit(user, account_id: int | None) -> bool:
    """May ``user`` change the data of this account (None: of any account at all)?"""
    ids = account_ids_for(user, editable=True)
    if ids is None:
        return True
    return bool(ids) if account_id is None else account_id in ids


def scoped(queryset: QuerySet, user, *, account_field: str = "account",
           editable: bool = False) -> QuerySet:
    """Narrow ``queryset`` to the rows whose ``account_field`` is one of the user's accounts
    (``editable``: one it may change)."""
    ids = account_ids_for(user, editable=editable)
    if ids is None:
        return queryset
    return queryset.filter(**{f"{account_field}__in": ids})


def membership(user, *, slug: str) -> Membership | None:
    """Return the user's membership of the account ``slug``; None when there is none (whether
    or not such an account exists: the caller answers 404 either way)."""
    if not user.is_authenticated or not user.is_active:
        return None
    return (Membership.objects.select_related("account")
            .filter(user=user, account__slug=slug).first())
