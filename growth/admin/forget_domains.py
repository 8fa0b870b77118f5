"""For MailDomainAdmin: "Forget the selected domains…", asked first (growth.admin.asked_first).

The page says what forgetting does, and to whom. A send row carries the destination it was given
when its campaign was built, and pacing reads it from the row: the recipients of running
campaigns on a forgotten domain are paced as before. What changes is the next build that meets
the domain, which looks it up again first (growth.audience.destinations)."""

from __future__ import annotations

from collections import Counter, defaultdict

from django.conf import settings
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from growth.admin.asked_first import LISTED, Asked, ask_first, digest, hidden_fields
from growth.models import MailDomain

ACTION = "forget"


def _planned(domains) -> str:
    return digest((d.domain, d.destination_id, d.resolved_at.isoformat()) for d in domains)


def _paced_as(counts: Counter) -> str:
    """How a domain's unsent rows are paced, by the destination each row carries."""
    def one(name, n=None):
        count = "" if n is None else f"{n:,} "
        return f"{count}paced as {name}" if name else f"{count}not paced per provider"

    if len(counts) == 1:
        return one(next(iter(counts)))
    return ", ".join(one(name, n) for name, n in sorted(counts.items(),
                                                        key=lambda c: (c[0] is None, c[0] or "")))


FORGET = Asked(noun="domains", verb="forget", done="forgotten",
               changed="forgotten, or resolved again, since", gone="is cached any more")


class ForgetDomainsMixin:
    @admin.action(description="Forget the selected domains (resolved again when next met)…",
                  permissions=["delete"])
    def forget(self, request, queryset):
        return ask_first(
            self, request, FORGET,
            shown=lambda: list(queryset.select_related("destination").order_by("domain")),
            # the rows are locked from the comparison to their deletion
            locked=lambda: list(queryset.select_for_update(of=("self",)).order_by("domain")),
            planned=_planned, act=lambda domains: self._forget(request, domains),
            page=lambda domains: self._forget_confirmation(request, domains))

    def _forget(self, request, domains) -> None:
        self.log_deletions(request, domains)
        count, _ = MailDomain.objects.filter(domain__in=[d.domain for d in domains]).delete()
        self.message_user(request, f"{count} domain{'s' if count != 1 else ''} forgotten: the next "
                          "build that meets them resolves them again.", messages.SUCCESS)

    def _forget_confirmation(self, request, domains):
        unsent = MailDomain.objects.unsent_on([d.domain for d in domains])
        by_domain: dict[str, Counter] = defaultdict(Counter)
        for row in unsent:
            by_domain[row["domain"]][row["destination"]] += row["recipients"]
        rows = []
        for domain in domains[:LISTED]:
            counts = by_domain.get(domain.domain, Counter())
            rows.append((domain, sum(counts.values()), _paced_as(counts)))
        return TemplateResponse(request, "growth/admin/maildomain_confirm_forget.html", {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": "Forget cached domains: are you sure?",
            "forgetting": len(domains), "rows": rows, "unlisted": len(domains) - len(rows),
            "unsent": sum(row["recipients"] for row in unsent),
            "campaigns": len({row["campaign_id"] for row in unsent}),
            "per_build": settings.DESTINATIONS_RESOLVE_PER_BUILD,
            "dns": settings.DESTINATIONS_DNS,
            "hidden": hidden_fields(request, ACTION, [d.pk for d in domains], _planned(domains)),
            "back_url": request.get_full_path(),
        })
