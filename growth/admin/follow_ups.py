"""The campaign admin's recovery tool "Resend to the rest…": a confirmation page that says who the
follow-up would reach, then a draft. (The plain clone: growth.admin.clones.)"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from growth.admin.races import lost_to_another_save
from growth.models import Campaign
from growth.operations.campaigns import TransitionRefused
from growth.operations.follow_ups import (
    MAX_NAME,
    create_follow_up,
    resend_audience,
    resend_refusal,
)


class ResendForm(forms.Form):
    name = forms.CharField(max_length=MAX_NAME)
    include_unknown = forms.BooleanField(
        required=False, label="Also the recipients in doubt",
        help_text="Unknown, or queued again after an attempt whose answer was lost (its worker "
                  "died, or the connection did): their message may have arrived, and they may "
                  "get it twice.")
    include_new_subscribers = forms.BooleanField(
        required=False, label="Also subscribers who joined since the original was built")


class FollowUpAdminMixin:
    """For CampaignAdmin: the resend confirmation page, and the links between a campaign and its
    follow-ups."""

    def follow_up_urls(self):
        return [path("<path:object_id>/resend/", self.admin_site.admin_view(self.resend_view),
                     name="growth_campaign_resend")]

    def resend_view(self, request, object_id):
        original = self.get_object(request, unquote(object_id))  # another tenant's: 404
        if not (self.has_add_permission(request) and self.has_change_permission(request, original)):
            raise PermissionDenied
        change_url = reverse("admin:growth_campaign_change", args=[original.pk])
        refusal = resend_refusal(original)
        if refusal:
            self.message_user(request, refusal, messages.ERROR)
            return HttpResponseRedirect(change_url)
        form = ResendForm(request.POST or None,
                          initial={"name": f"{original.name} — resend to the rest"[:MAX_NAME]})
        if request.method == "POST" and form.is_valid():
            try:
                follow_up = create_follow_up(campaign_id=original.id, **form.cleaned_data)
            except TransitionRefused as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return HttpResponseRedirect(change_url)
            except IntegrityError as exc:
                # a segment's deletion locks the segments: the copy's links to them wait, then
                # fail their foreign key at the commit (rolled back: nothing was created)
                if not lost_to_another_save(exc):
                    raise
                self.message_user(request, f"Nothing was created: a segment of “{original}” was "
                                  "deleted meanwhile. Look again at what the follow-up would "
                                  "reach now, then confirm.", messages.ERROR)
                return self._resend_page(request, original, form, change_url)
            self.log_addition(request, follow_up, f"Follow-up of “{original}” (id {original.pk}), "
                              f"resend to the rest; unknown included: "
                              f"{form.cleaned_data['include_unknown']}, new subscribers included: "
                              f"{form.cleaned_data['include_new_subscribers']}.")
            self.log_change(request, original, f"Follow-up “{follow_up}” (id {follow_up.pk}) "
                            "created to resend to the rest.")
            self.message_user(request, format_html(
                "Created the draft “{}”. Its recipients are taken from “{}” when it starts: review "
                "it, set when it should go out, and approve it.", follow_up, original),
                messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:growth_campaign_change", args=[follow_up.pk]))
        return self._resend_page(request, original, form, change_url)

    def _resend_page(self, request, original, form, change_url):
        counted = resend_audience(original)
        return TemplateResponse(request, "growth/admin/campaign_resend.html", {
            **self.admin_site.each_context(request),
            "title": f"Resend “{original}” to the rest",
            "opts": self.opts, "original": original, "form": form, "counted": counted,
            "base": counted.total(include_unknown=False, include_new_subscribers=False),
            # a newcomer at the address of a row in doubt is one message: with both ticked the
            # total is not the sum of the two boxes' figures
            "totals": {name: counted.total(include_unknown=doubt, include_new_subscribers=new)
                       for name, doubt, new in [("neither", False, False),
                                                ("new_subscribers", False, True),
                                                ("in_doubt", True, False), ("both", True, True)]},
            "sent": Campaign.objects.progress([original.id]).get(original.id, {}).get("sent", 0),
            "change_url": change_url,
        })

    @admin.display(description="resends")
    def resend_links(self, obj):
        parts = []
        if obj.resend_of_id:
            parts.append(format_html('follow-up of <a href="{}">{}</a>', reverse(
                "admin:growth_campaign_change", args=[obj.resend_of_id]), obj.resend_of))
        follow_ups = list(Campaign.objects.filter(resend_of=obj).order_by("id"))
        if follow_ups:
            parts.append(format_html("followed up by {}", format_html(", ".join(
                format_html('<a href="{}">{}</a>', reverse("admin:growth_campaign_change",
                                                           args=[f.pk]), f)
                for f in follow_ups))))
        return format_html("; ".join(["{}"] * len(parts)), *parts) if parts else "—"
