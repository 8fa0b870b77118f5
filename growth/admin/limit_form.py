"""The rate limit form: one of the scopes the table allows, something to limit, one bucket per
scope, each refusal said in words (the database's constraints would say only their names); and
what a form older than the limit is told (growth.admin.versioned: it is refused, not saved over
another operator's edit)."""

from __future__ import annotations

from django import forms
from django.db import IntegrityError

from growth.admin.charts import clock
from growth.admin.limit_history import configuration_text, set_from_settings
from growth.admin.versioned import edited_by, last_edit
from growth.models import RateLimit

SCOPES = ("a tenant, a provider, a tenant's mail to a provider, or a whole transport")
# By constraint name (growth.models.RateLimit): what a refused save means to an operator.
REFUSALS = {
    "rate_limit_one_scope": f"A limit applies to {SCOPES}.",
    "rate_limit_has_a_limit": "Give a rate (messages per second), a cap on messages on the wire, "
                              "or both: a limit with neither limits nothing.",
    "rate_limit_unique_transport": "This transport already has a limit: change that one.",
    "rate_limit_unique_account": "This tenant already has a limit: change that one.",
    "rate_limit_unique_destination": "This provider already has a limit of its own: change that one.",
    "rate_limit_unique_tenant_destination": "This tenant already has a limit for this provider: "
                                            "change that one.",
}


class LimitRefused(Exception):
    """The database refused the save (another operator's bucket got there first)."""


def refusal(exc: IntegrityError) -> str:
    name = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
    return REFUSALS.get(name, f"The limit was refused: {exc}")


def changed_since(limit: RateLimit) -> str:
    """What an operator whose form is older than ``limit`` is told: who last changed it and when
    (a user, as its History records; or a worker, from the settings), and what it is now."""
    reset = set_from_settings(limit)
    if reset is not None:
        by = (f" ({clock(reset.changed_at, '%Y-%m-%d %H:%M:%S')}, in the history of its rate: "
              f"{reset.reason})")
    else:
        edit = last_edit(limit)
        by = "" if edit is None else f" (the last edit in its History: {edited_by(edit)})"
    return (f"{'A worker' if reset else 'Someone'} changed this limit since you opened it{by}: "
            f"it is now {configuration_text(limit)}. Nothing was saved: reload the page to edit "
            "the limit as it is now.")


class RateLimitForm(forms.ModelForm):
    class Meta:
        model = RateLimit
        fields = ["account", "destination", "transport", "per_second", "burst", "max_in_flight"]

    def clean(self):
        cleaned = super().clean()
        if any(self.has_error(name) for name in ("account", "destination", "transport")):
            return cleaned
        account, destination = cleaned.get("account"), cleaned.get("destination")
        transport = cleaned.get("transport") or ""
        # Errors go on fields: Django then leaves the constraints on them unchecked, and the
        # operator reads one message in words, not "Constraint … is violated" beside it.
        if transport and (account or destination):
            self.add_error("transport", "A transport's limit covers all its mail: leave the tenant "
                                        "and the provider empty (or empty this field).")
            return cleaned
        if not (transport or account or destination):
            self.add_error("account", f"Choose what it limits: {SCOPES}.")
            return cleaned
        if cleaned.get("max_in_flight") is not None and destination is None:
            self.add_error("max_in_flight", "A cap on messages on the wire is a provider's (with or "
                                            "without a tenant): choose the provider.")
        self._check_it_limits_something(cleaned)
        self._check_unique(account, destination, transport)
        return cleaned

    def _check_it_limits_something(self, cleaned) -> None:
        if self.has_error("per_second") or self.has_error("max_in_flight"):
            return
        engine_set = self.instance.throttled_to is not None or self.instance.per_day is not None
        if cleaned.get("per_second") is None and cleaned.get("max_in_flight") is None and not engine_set:
            self.add_error("per_second", REFUSALS["rate_limit_has_a_limit"])

    def _check_unique(self, account, destination, transport) -> None:
        others = RateLimit.objects.exclude(pk=self.instance.pk)
        if transport:
            field, constraint = "transport", "rate_limit_unique_transport"
            same = others.filter(account=None, destination=None, transport=transport)
        elif destination is None:
            field, constraint = "account", "rate_limit_unique_account"
            same = others.filter(account=account, destination=None, per_day=None)
        elif account is None:
            field, constraint = "destination", "rate_limit_unique_destination"
            same = others.filter(account=None, destination=destination)
        else:
            field, constraint = "destination", "rate_limit_unique_tenant_destination"
            same = others.filter(account=account, destination=destination)
        if same.exists():
            self.add_error(field, REFUSALS[constraint])
