"""For CampaignAdmin: "Clone selected campaigns…", asked first (growth.admin.asked_first): the page
names each draft it will create and the campaign it copies; confirming creates them from the
content the page showed, and records each in its History."""

from __future__ import annotations

from django.contrib import admin, messages
from django.template.response import TemplateResponse

from growth.admin.asked_first import LISTED, Asked, ask_first, digest, hidden_fields
from growth.operations.follow_ups import clone_campaign, clone_name

ACTION = "clone"


def _planned(campaigns) -> str:
    """What a clone copies, campaign by campaign: a campaign edited since the page differs."""
    return digest((c.pk, c.name, c.subject, c.body_text, c.body_html,
                   tuple(sorted(s.pk for s in c.segments.all()))) for c in campaigns)


CLONE = Asked(noun="campaigns", verb="clone", done="cloned", changed="edited or deleted since",
              # a segment's deletion locks the segments, and a copy's links to them then fail
              lost="a segment of one of them was deleted meanwhile")


class CloneAdminMixin:
    @admin.action(description="Clone selected campaigns (new drafts)…", permissions=["add"])
    def clone(self, request, queryset):
        return ask_first(
            self, request, CLONE,
            shown=lambda: list(queryset.select_related("account").prefetch_related("segments")
                               .order_by("id")),
            # no edit of an original between the comparison and its copy
            locked=lambda: list(queryset.select_for_update(of=("self",))
                                .prefetch_related("segments").order_by("id")),
            planned=_planned, act=lambda campaigns: self._clone(request, campaigns),
            page=lambda campaigns: self._clone_confirmation(request, campaigns))

    def _clone(self, request, campaigns) -> None:
        clones = []
        for campaign in campaigns:
            copy = clone_campaign(campaign_id=campaign.id)
            self.log_addition(request, copy, f"Clone of “{campaign}” (id {campaign.pk}).")
            clones.append(copy)
        self.message_user(request, f"{len(clones)} draft{'s' if len(clones) != 1 else ''} "
                          f"created: {', '.join(str(c) for c in clones)}.", messages.SUCCESS)

    def _clone_confirmation(self, request, campaigns):
        rows = [(campaign, clone_name(campaign), list(campaign.segments.all()))
                for campaign in campaigns[:LISTED]]
        return TemplateResponse(request, "growth/admin/campaign_confirm_clone.html", {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": "Clone campaigns: are you sure?",
            "cloning": len(campaigns), "rows": rows, "unlisted": len(campaigns) - len(rows),
            "hidden": hidden_fields(request, ACTION, [c.pk for c in campaigns],
                                    _planned(campaigns)),
            "back_url": request.get_full_path(),
        })
