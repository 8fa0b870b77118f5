"""Which accounts a user may see: the one rule behind the admin's scoping and the tenant UI."""

from __future__ import annotations

from django.db.models import QuerySet

from growth.models import Membership

_CACHE = "_growth_account_ids"


def account_ids_for(user) -> frozenset[int] | None:
    """Return the ids of the accounts ``user`` is a member of, or None for "every account"
    (superusers). Cached on the user object, i.e. for one request."""
    if not user.is_authenticated or not user.is_active:
        return frozenset()
    if user.is_superuser:
        return None
    cached = getattr(user, _CACHE, None)
    if cached is None:
        cached = frozenset(Membership.objects.filter(user=user).values_list("account_id", flat=True))
        setattr(user, _CACHE, cached)
    return cached


def scoped(queryset: QuerySet, user, *, account_field: str = "account") -> QuerySet:
    """Narrow ``queryset`` to the rows whose ``account_field`` is one of the user's accounts."""
    ids = account_ids_for(user)
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
