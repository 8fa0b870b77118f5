from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponseRedirect
from django.template.defaultfilters import truncatechars
from django.template.loader import render_to_string
from django.urls import path, reverse
from django.utils.functional import SimpleLazyObject
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from growth.admin.clones import CloneAdminMixin
from growth.admin.exports import ExportMixin
from growth.admin.follow_ups import FollowUpAdminMixin
from growth.admin.monitor import MonitorMixin
from growth.admin.review_queue import campaign_review_counts
from growth.admin.scoping import ScopedRelatedFilter, TenantScopedAdmin
from growth.admin.transitions import TransitionAdminMixin
from growth.admin.workers import is_alive
from growth.models import Campaign, Send, WorkerHeartbeat
from growth.operations.follow_ups import resend_refusal
from growth.operations.previews import SendTestFailed, preview_campaign, send_test_message
from growth.reputation.guard import REASON_PREFIX, reputation_warnings
from growth.sending.sender import as_read
from growth.sending.transports.errors import REFUSAL_PREFIX, too_large

# a follow-up's recipients were counted on its confirmation page: narrowing its segments would
# make that count untrue, and the rows it takes from its original are the original's audience's
FOLLOW_UP_SEGMENTS = (" A follow-up's segments are its original's: it reaches the recipients its "
                      "original did not, and, if asked, those who joined these segments since.")
CONTENT_FIELDS = ["scheduled_for", "subject", "body_text", "body_html", "segments", "window_starts",
                  "window_ends"]
ENGINE_FIELDS = ["status", "pause_reason", "sends_as", "progress_detail", "recipients_built_at",
                 "started_at", "finished_at", "created_at", "updated_at"]
SEND_STATUSES = [status.value for status in Send.Status]
MAX_TEST_SENDS = 5  # campaigns per "send a test to me" action


class CampaignChanged(Exception):
    """The campaign moved (approved, edited by someone else) between the form and the save."""


class CampaignForm(forms.ModelForm):
    # The updated_at the editor loaded: the save is a compare-and-set on it.
    version = forms.CharField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Campaign
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["version"].initial = self.instance.updated_at.isoformat()

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk and cleaned.get("version") != self.instance.updated_at.isoformat():
            raise ValidationError(
                "This campaign changed since you opened it (it is now %(status)s): nothing was "
                "saved. Reload the page to see it as it is.", params={"status": self.instance.status})
        self._clean_window(cleaned)
        account = cleaned.get("account") or (self.instance.account if self.instance.account_id else None)
        segments = cleaned.get("segments")
        if account and segments and any(s.account_id != account.id for s in segments):
            self.add_error("segments", "Choose segments of the campaign's account only.")
        return cleaned

    def _clean_window(self, cleaned) -> None:
        if "window_starts" not in self.fields:  # read-only: not a draft any more
            return
        if self.has_error("window_starts") or self.has_error("window_ends"):
            return
        starts, ends = cleaned.get("window_starts"), cleaned.get("window_ends")
        if (starts is None) != (ends is None):
            self.add_error("window_ends" if ends is None else "window_starts",
                           "Give both ends of the sending window, or neither (any time).")
        elif starts is not None and starts == ends:
            self.add_error("window_ends", "A window that ends when it starts is empty: leave both "
                                          "empty to send at any time.")


@admin.register(Campaign)
class CampaignAdmin(TransitionAdminMixin, MonitorMixin, ExportMixin, FollowUpAdminMixin,
                    CloneAdminMixin, TenantScopedAdmin):
    form = CampaignForm
    list_display = ["name", "account", "state", "scheduled_for", "progress"]
    list_filter = ["status", ("account", ScopedRelatedFilter)]
    list_select_related = ["account"]
    search_fields = ["name"]
    filter_horizontal = ["segments"]
    actions = ["approve", "send_now", "pause", "resume", "cancel", "send_test_to_me", "clone"]
    change_form_template = "growth/admin/campaign_change_form.html"
    change_list_template = "growth/admin/campaign_change_list.html"

    class Media:
        css = {"all": ["growth/admin.css"]}
        js = ["growth/monitor.js"]

    def get_fieldsets(self, request, obj=None):
        fieldsets = [
            (None, {"fields": ["name", "account", "status",
                               *(["pause_reason"] if obj and obj.pause_reason else []),
                               *(["sends_as"] if obj else []), "scheduled_for", "version"]}),
            ("Content", {"fields": ["subject", "body_text", "body_html", "segments"],
                         "description": "Editable while the campaign is a draft." + (
                             FOLLOW_UP_SEGMENTS if obj and obj.resend_of_id else "")}),
            ("Sending window", {"fields": ["window_starts", "window_ends"], "description": (
                "The hours of the tenant's day (in its account's time zone) the campaign may send "
                "in; both empty: any time. A window may span midnight (22:00–06:00). Editable "
                "while the campaign is a draft.")}),
        ]
        if obj is not None:
            fieldsets.append(("Progress", {"fields": ["progress_detail", "recipients_built_at",
                                                      "started_at", "finished_at", "resend_links"]}))
        return fieldsets

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ENGINE_FIELDS
        if obj.status == Campaign.Status.DRAFT:
            return [*ENGINE_FIELDS, "account", "resend_links",
                    *(["segments"] if obj.resend_of_id else [])]
        return [*ENGINE_FIELDS, "account", *CONTENT_FIELDS, "resend_links"]

    # --- the list: one aggregate query for the whole page ----------------------------------

    def get_changelist_instance(self, request):
        changelist = super().get_changelist_instance(request)
        campaigns = list(changelist.result_list)
        counts = Campaign.objects.progress([c.id for c in campaigns])
        for campaign in campaigns:
            campaign.send_counts = counts.get(campaign.id, {})
        changelist.result_list = campaigns
        changelist.reputation_warnings = reputation_warnings({c.account_id for c in campaigns})
        return changelist

    @admin.display(description="status", ordering="status")
    def state(self, obj):
        if obj.pause_reason:
            return format_html('{} <span class="growth-pause-reason" title="{}">— cannot be sent: '
                               '{}</span>', obj.get_status_display(), obj.pause_reason,
                               truncatechars(obj.pause_reason, 80))
        return obj.get_status_display()

    @admin.display(description="sends as")
    def sends_as(self, obj):
        sender = obj.sends_as
        shown = as_read(name=sender.from_name, address=sender.from_email)
        if obj.from_email:
            return shown
        return f"{shown} (its account's sender now: a campaign takes it when it starts)"

    @admin.display(description="progress (sent / recipients)")
    def progress(self, obj):
        return self._progress_html(obj, compact=True)

    @admin.display(description="recipients")
    def progress_detail(self, obj):
        return self._progress_html(obj, compact=False)

    def _progress_html(self, campaign, *, compact: bool):
        counts = getattr(campaign, "send_counts", None)
        if counts is None:  # a change page: its own (single) aggregate
            counts = campaign.send_counts = Campaign.objects.progress([campaign.id]).get(campaign.id, {})
        total = sum(counts.values())
        sent = counts.get("sent", 0)
        return render_to_string("growth/admin/progress.html", {
            "total": total, "sent": sent, "percent": round(100 * sent / total, 1) if total else 0,
            "counts": [(s, counts.get(s, 0)) for s in SEND_STATUSES if counts.get(s) or not compact],
            "sends_url": _sends_url(campaign.id), "compact": compact, "campaign_id": campaign.id,
        })

    def has_delete_permission(self, request, obj=None):
        """Never once it has recipients: their rows are the record of who was mailed."""
        if obj is not None and (obj.recipients_built_at is not None or obj.sends.exists()):
            return False
        return super().has_delete_permission(request, obj)

    # --- saving: compare-and-set, never a save() that could write back an old status --------

    def save_model(self, request, obj, form, change):
        if not change:
            obj.save()
            return
        if obj.status == Campaign.Status.DRAFT:
            version = Campaign.objects.update_draft(
                campaign_id=obj.id, version=obj.updated_at, name=obj.name, subject=obj.subject,
                body_text=obj.body_text, body_html=obj.body_html, scheduled_for=obj.scheduled_for,
                window_starts=obj.window_starts, window_ends=obj.window_ends)
        else:
            version = Campaign.objects.rename(campaign_id=obj.id, version=obj.updated_at,
                                              name=obj.name)
        if version is None:
            status = Campaign.objects.status_of(campaign_id=obj.id)
            raise CampaignChanged(f"“{obj}” changed while you were editing it (it is now {status}): "
                                  "nothing was saved.")
        obj.updated_at = version

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        # none chosen is a choice, but one that reaches the whole account: say so when it is made
        if change and "segments" in form.changed_data and not form.cleaned_data.get("segments"):
            self.message_user(request, f"“{form.instance}” names no segment now: it goes to every "
                              f"segment of {form.instance.account}, every confirmed subscriber "
                              "of the account.", messages.WARNING)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except CampaignChanged as exc:  # the transaction was rolled back: segments included
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())

    # --- the change page: link to the sends, preview, "send a test to me" ------------------

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None:
            context["transition_buttons"] = self.transition_buttons(request, obj)
            if obj.status != Campaign.Status.DRAFT:  # only the name can change: one Save
                context.update(show_save_and_add_another=False, show_save_and_continue=False)
            context["sends_url"] = _sends_url(obj.id)
            # read as the page renders, from the counts the monitor's snapshot left on obj
            context["review_counts"] = SimpleLazyObject(lambda: campaign_review_counts(
                obj.id, counts=getattr(obj, "send_counts", None)))
            context["reputation_warnings"] = reputation_warnings([obj.account_id])
            context["paused_by_the_guard"] = obj.pause_reason.startswith(REASON_PREFIX)
            context["refused_by_the_transport"] = obj.pause_reason.startswith(REFUSAL_PREFIX)
            context["too_large"] = too_large(obj.pause_reason)
            context["holders"] = [(holder, is_alive(holder.seen_at, holder.stopped_at))
                                  for holder in WorkerHeartbeat.objects.holders_of(campaign_id=obj.id)]
            if obj.recipients_built_at is not None:
                context["export_url"] = reverse("admin:growth_campaign_export", args=[obj.pk])
            context["send_test_url"] = reverse("admin:growth_campaign_send_test", args=[obj.pk])
            if (resend_refusal(obj) is None and self.has_add_permission(request)
                    and self.has_change_permission(request, obj)):
                context["resend_url"] = reverse("admin:growth_campaign_resend", args=[obj.pk])
            try:
                context["preview"] = preview_campaign(campaign_id=obj.id)
            except ValidationError as exc:
                context["preview_errors"] = exc.messages
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self):
        return [
            *self.transition_urls(),
            *self.get_monitor_urls(),
            *self.get_export_urls(),
            path("<path:object_id>/send-test/", self.admin_site.admin_view(self.send_test_view),
                 name="growth_campaign_send_test"),
            *self.follow_up_urls(),
            *super().get_urls(),
        ]

    def send_test_view(self, request, object_id):
        return require_POST(self._send_test)(request, object_id)

    def _send_test(self, request, object_id):
        campaign = self.get_object(request, unquote(object_id))  # 404 for "abc" too, never a 500
        if not self.has_view_permission(request, campaign):
            raise PermissionDenied
        self._send_tests(request, [campaign])
        return HttpResponseRedirect(reverse("admin:growth_campaign_change", args=[campaign.pk]))

    # --- actions -----------------------------------------------------------------------------

    @admin.action(description="Send a test of the selected campaigns to me", permissions=["view"])
    def send_test_to_me(self, request, queryset):
        campaigns = list(queryset.select_related("account").order_by("id")[:MAX_TEST_SENDS + 1])
        if len(campaigns) > MAX_TEST_SENDS:
            self.message_user(request, f"Select at most {MAX_TEST_SENDS} campaigns to test.",
                              messages.ERROR)
            return
        self._send_tests(request, campaigns)

    def _send_tests(self, request, campaigns):
        to = request.user.email
        if not to:
            self.message_user(request, "Your user has no email address: add one to receive tests.",
                              messages.ERROR)
            return
        for campaign in campaigns:
            try:
                send_test_message(campaign_id=campaign.id, to=to)
            except ValidationError as exc:
                self.message_user(request, f"“{campaign}”: no test sent: {' '.join(exc.messages)}",
                                  messages.ERROR)
            except SendTestFailed as exc:
                self.message_user(request, f"“{campaign}”: the test could not be sent: {exc}",
                                  messages.ERROR)
            else:
                self.message_user(request, f"Sent a test of “{campaign}” to {to} (not recorded "
                                  "as a campaign send).", messages.SUCCESS)


def _sends_url(campaign_id: int) -> str:
    return f"{reverse('admin:growth_send_changelist')}?campaign__id__exact={campaign_id}"


def campaign_link(campaign) -> str:
    return format_html('<a href="{}">{}</a>',
                       reverse("admin:growth_campaign_change", args=[campaign.pk]), campaign)
