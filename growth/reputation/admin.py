"""The reputation and the sender's readiness in the operators' admin.

- ``SenderPanelMixin``, for the account's ModelAdmin: its change page shows the tenant's bounce
  and complaint rates (with their warn/stop state) and the readiness checks of its sender (SPF,
  DKIM, DMARC, one-click unsubscribe: ``growth.deliverability.readiness``). The DNS lookups run
  at most once per ``READINESS_CACHE_SECONDS`` per account and process (``?recheck-sender=1``
  runs them again), each within a few seconds: a dead resolver cannot hang the page.
- ``growth/reputation/warnings.html``, for the campaign list and pages: the tenants at or above a
  warning threshold, from ``growth.reputation.guard.reputation_warnings(account_ids)`` in the
  context as ``reputation_warnings``.
"""

from __future__ import annotations

import hashlib
import logging

from django.core.cache import cache

from growth.deliverability import readiness as readiness_checks
from growth.reputation import guard

logger = logging.getLogger("growth.reputation")

READINESS_CACHE_SECONDS = 600
RECHECK_PARAMETER = "recheck-sender"
ADMIN_DNS_TIMEOUT = 2.0  # seconds per lookup
ADMIN_DNS_BUDGET = 8.0  # seconds for all of them
ADMIN_PROBE_TIMEOUT = 3.0  # seconds for the one-click POST


def sender_panel(account, *, recheck: bool = False) -> dict:
    """What the account page's panel shows: ``reputation`` (a guard.Reputation), ``readiness``
    (a readiness.Readiness, or None with ``readiness_error``)."""
    panel = {"reputation": guard.reputation_of(account.pk), "readiness": None,
             "readiness_error": "", "recheck_parameter": RECHECK_PARAMETER}
    # the sender is typed by a tenant: hashed, so that any cache backend takes the key
    sender = hashlib.sha256(account.from_email.encode()).hexdigest()[:16]
    key = f"growth:sender-readiness:{account.pk}:{sender}"
    found = None if recheck else cache.get(key)
    if found is None:
        try:
            found = readiness_checks.check_account(
                account, resolver=readiness_checks.default_resolver(timeout=ADMIN_DNS_TIMEOUT,
                                                                    budget=ADMIN_DNS_BUDGET),
                probe_timeout=ADMIN_PROBE_TIMEOUT)
        except Exception as exc:  # the page must show, whatever a lookup did
            logger.exception("sender readiness of account %s could not be checked", account.pk)
            panel["readiness_error"] = f"{type(exc).__name__}: {exc}"
            return panel
        cache.set(key, found, READINESS_CACHE_SECONDS)
    panel["readiness"] = found
    return panel


class SenderPanelMixin:
    """For the account's ModelAdmin (before its base class): the reputation and readiness panel
    on the change page."""

    change_form_template = "growth/reputation/account_change_form.html"

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and obj.pk:
            context["sender_panel"] = sender_panel(
                obj, recheck=request.GET.get(RECHECK_PARAMETER) == "1")
        return super().render_change_form(request, context, add=add, change=change,
                                          form_url=form_url, obj=obj)
