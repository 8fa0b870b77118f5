from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.template.response import TemplateResponse
from django.urls import path
from django.utils import timezone

from growth.admin.account_edits import AccountEdits
from growth.admin.membership_edits import MembersFormSet, MembershipEdits
from growth.admin.pacing import warmup_schedule_html
from growth.admin.scoping import IdSelection, ScopedRelatedFilter, TenantScopedAdmin, scoped_choices
from growth.admin.segment_deletion import SegmentDeletionMixin
from growth.admin.widgets import TolerantAutocomplete
from growth.audience.address_files import UnreadableFile, read_csv
from growth.audience.addresses import parse_address
from growth.audience.imports import IMPORTABLE_STATUSES, import_subscribers
from growth.deliverability.sender_domains import sender_refusal
from growth.models import Account, Membership, Segment, Subscriber, Suppression
from growth.reputation.admin import SenderPanelMixin
from growth.sending.sender import sender_address

WARMUP_FIELDS = ["warmup_started_on", "warmup_daily_start", "warmup_daily_growth", "warmup_until"]


class SuperuserOnly:
    def has_module_permission(self, request):
        return request.user.is_superuser

    def has_view_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_add_permission(self, request, obj=None):
        return request.user.is_superuser

    def has_change_permission(self, request, obj=None):
        return request.user.is_superuser

    has_delete_permission = has_change_permission


class MembershipInline(SuperuserOnly, TolerantAutocomplete, admin.TabularInline):
    model = Membership
    formset = MembersFormSet
    extra = 0
    autocomplete_fields = ["user"]


class AccountForm(forms.ModelForm):
    """The account's sender is held to ``sender_domains.sender_refusal`` when it changes: a
    tenant's member is refused, an operator only warned (``sender_warning``), unless the domain
    is another account's verified one."""

    user_is_superuser = False  # set by the ModelAdmin on the form class it builds per request
    sender_warning = ""

    def clean_from_email(self) -> str:
        value = self.cleaned_data["from_email"]
        if self.instance.pk and "from_email" not in self.changed_data:
            return value  # a sender saved before the rule does not hold up an edit of the rest
        try:
            sender_address(value)
        except ValidationError:
            return value  # the model's validator says what is wrong with it
        refusal = sender_refusal(account_id=self.instance.pk, address=value)
        if refusal is None:
            return value
        if not self.user_is_superuser:
            raise ValidationError(f"{value} cannot be this account's sender: {refusal.reason}")
        if refusal.owner_id is not None:
            owner = Account.objects.filter(pk=refusal.owner_id).first()
            raise ValidationError(
                f"{refusal.domain} is a verified sending domain of another account ({owner}). "
                "To send from it here too, add it to this account's sending domains (with its "
                "own selector and key) and verify it in DNS.")
        self.sender_warning = (f"Saved as an operator, though the rule for tenants refuses it: "
                               f"{refusal.reason}")
        return value


@admin.register(Account)
class AccountAdmin(AccountEdits, SenderPanelMixin, TenantScopedAdmin):
    form = AccountForm
    account_field = "id"
    list_display = ["name", "slug", "from_email", "from_name"]
    search_fields = ["name", "slug", "from_email"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]
    fieldsets = [
        (None, {"fields": ["name", "slug", "from_email", "from_name"],
                "description": "A campaign goes out as the sender its account had when it started: "
                               "an edit here reaches one sending now only when it is paused and "
                               "resumed."}),
        ("Pacing", {"fields": ["time_zone", *WARMUP_FIELDS, "warmup_schedule"],
                    "description": "The clock its campaigns' sending windows and the warm-up's days "
                                   "are read in, and the warm-up: a new sender's daily cap, growing "
                                   "each day until it no longer caps anything."}),
    ]

    def get_readonly_fields(self, request, obj=None):
        if request.user.is_superuser:
            return ["warmup_schedule"]
        # like its rate limits, a tenant's warm-up guards the platform's sending reputation; a
        # slug is unique among all tenants: trying one out would tell whether another has it
        return ["slug", *WARMUP_FIELDS, "warmup_schedule"]

    def get_prepopulated_fields(self, request, obj=None):
        return self.prepopulated_fields if request.user.is_superuser else {}  # slug: read only

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.user_is_superuser = request.user.is_superuser
        return form

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)  # a change is saved here
        if form.sender_warning:
            self.message_user(request, form.sender_warning, messages.WARNING)

    def has_add_permission(self, request):
        return request.user.is_superuser  # a new tenant is not a member's decision

    def has_delete_permission(self, request, obj=None):
        return request.user.is_superuser

    @admin.display(description="warm-up schedule")
    def warmup_schedule(self, obj):
        return warmup_schedule_html(obj, now=timezone.now())


@admin.register(Membership)
class MembershipAdmin(MembershipEdits, IdSelection, SuperuserOnly, TolerantAutocomplete,
                      admin.ModelAdmin):
    list_display = ["user", "account", "role", "created_at"]
    list_filter = ["role", "account"]
    list_select_related = ["user", "account"]
    search_fields = ["user__username", "user__email", "account__name", "account__slug"]
    autocomplete_fields = ["user", "account"]


@admin.register(Segment)
class SegmentAdmin(SegmentDeletionMixin, TenantScopedAdmin):
    list_display = ["name", "account"]
    list_filter = [("account", ScopedRelatedFilter)]
    list_select_related = ["account"]
    search_fields = ["name", "account__name"]


class SubscriberImportForm(forms.Form):
    segment = forms.ModelChoiceField(queryset=Segment.objects.none())
    status = forms.ChoiceField(
        choices=[(s.value, s.label) for s in IMPORTABLE_STATUSES], initial=Subscriber.Status.CONFIRMED,
        help_text="Only confirmed subscribers receive campaigns. Addresses already in the segment "
                  "keep their status (an import never re-subscribes anyone).")
    file = forms.FileField(help_text="CSV, UTF-8: a column headed “email”, or one address per line.")
    skip_invalid = forms.BooleanField(
        required=False, label="Import the valid lines even if some are invalid",
        help_text="Unticked, a file with any invalid line imports nothing.")
    check_only = forms.BooleanField(required=False, label="Check only (import nothing)")

    def __init__(self, *args, segments, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["segment"].queryset = segments.select_related("account")
        self.fields["segment"].label_from_instance = lambda s: f"{s.account} — {s.name}"


class SubscriberForm(forms.ModelForm):
    def clean(self):
        """One subscriber an address a segment: the constraint reads email_lower, which is no
        field of the form, so Django's own check left it to the database (a 500)."""
        cleaned = super().clean()
        segment = cleaned.get("segment", self.instance.segment if self.instance.pk else None)
        try:
            email_lower = parse_address(cleaned.get("email") or "").email_lower
        except ValidationError:
            return cleaned  # the model's clean says what is wrong with it
        if segment and (Subscriber.objects.filter(segment=segment, email_lower=email_lower)
                        .exclude(pk=self.instance.pk).exists()):
            self.add_error("email", f"{email_lower} is in the segment “{segment}” already.")
        return cleaned


@admin.register(Subscriber)
class SubscriberAdmin(TenantScopedAdmin):
    form = SubscriberForm
    list_display = ["email", "account", "segment", "status", "created_at"]
    list_filter = ["status", ("account", ScopedRelatedFilter), ("segment", ScopedRelatedFilter)]
    list_select_related = ["account", "segment"]
    search_fields = ["email_lower"]
    ordering = ["-id"]  # newest first, from the primary key: no sort of a million rows per page
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    actions = ["confirm_pending"]
    change_list_template = "growth/admin/subscriber_change_list.html"

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ["email_lower", "created_at"]
        # A status moves only by compare-and-set (an opt-out must never be written back over).
        return ["account", "status", "email_lower", "created_at"]

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["email", "email_lower", "segment"])
        else:
            obj.save()

    @admin.action(description="Confirm selected pending subscribers…", permissions=["change"])
    def confirm_pending(self, request, queryset):
        """Asked first (the subscribers start receiving campaigns), then done and recorded in
        each one's History. Only pending ones move, by compare-and-set: one unsubscribed since
        the page was shown stays so."""
        ids = list(queryset.values_list("id", flat=True))
        if request.POST.get("post") != "yes":
            pending = list(queryset.filter(status=Subscriber.Status.PENDING)
                           .select_related("account", "segment").order_by("id"))
            return TemplateResponse(request, "growth/admin/subscriber_confirm_pending.html", {
                **self.admin_site.each_context(request), "opts": self.opts,
                "title": "Confirm pending subscribers?", "pending": pending,
                "left_alone": len(ids) - len(pending),
                "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                "select_across": request.POST.get("select_across") == "1",
                "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                "back_url": request.get_full_path()})
        with transaction.atomic():  # the change and its History commit together
            confirmed = Subscriber.objects.confirm_pending(ids)
            LogEntry.objects.log_actions(
                user_id=request.user.pk, action_flag=CHANGE,
                queryset=Subscriber.objects.filter(id__in=confirmed).order_by("id"),
                change_message="Confirmed by an operator (pending → confirmed): receives its "
                               "segment's campaigns from now on.")
        self.message_user(request, f"{len(confirmed)} subscriber(s) confirmed.", messages.SUCCESS)
        if len(ids) > len(confirmed):
            self.message_user(request, f"{len(ids) - len(confirmed)} left alone: not pending "
                              "(an unsubscribed address is never confirmed from here).",
                              messages.WARNING)
        return None

    def get_urls(self):
        return [
            path("import/", self.admin_site.admin_view(self.import_view),
                 name="growth_subscriber_import"),
            *super().get_urls(),
        ]

    def import_view(self, request):
        if not self.has_add_permission(request):
            raise PermissionDenied
        segments = scoped_choices(Segment, request, editable=True)
        form = SubscriberImportForm(request.POST or None, request.FILES or None, segments=segments)
        report = error = None
        if request.method == "POST" and form.is_valid():
            try:
                report = import_subscribers(
                    segment_id=form.cleaned_data["segment"].id,
                    addresses=read_csv(form.cleaned_data["file"]),
                    status=form.cleaned_data["status"],
                    skip_invalid=form.cleaned_data["skip_invalid"],
                    check_only=form.cleaned_data["check_only"])
                if report.imported and report.accepted:
                    segment = form.cleaned_data["segment"]
                    self.log_change(request, segment, (
                        f"Imported {len(report.accepted):,} subscriber(s) as "
                        f"{form.cleaned_data['status']} from “{form.cleaned_data['file'].name}”."))
            except UnreadableFile as exc:
                error = f"Nothing was imported: {exc}"
            except ValidationError as exc:
                error = f"Nothing was imported: {' '.join(exc.messages)}"
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts, "title": "Import subscribers", "form": form, "report": report,
            "error": error, "segment": form.cleaned_data.get("segment") if report else None,
        }
        return TemplateResponse(request, "growth/admin/subscriber_import.html", context)


class SuppressionForm(forms.ModelForm):
    class Meta:
        model = Suppression
        fields = ["account", "email_lower", "reason", "campaign"]

    def clean_email_lower(self):
        try:
            return parse_address(self.cleaned_data["email_lower"]).email_lower
        except ValidationError as exc:
            raise ValidationError(exc.messages) from None

    def clean(self):
        cleaned = super().clean()
        campaign, account = cleaned.get("campaign"), cleaned.get("account")
        email_lower = cleaned.get("email_lower")
        if campaign and account and campaign.account_id != account.id:
            self.add_error("campaign", "This campaign belongs to another account.")
        if account and email_lower and (Suppression.objects.filter(account=account, email_lower=email_lower)
                                        .exclude(pk=self.instance.pk).exists()):
            self.add_error("email_lower", "This address is already suppressed for this account.")
        return cleaned


@admin.register(Suppression)
class SuppressionAdmin(TenantScopedAdmin):
    form = SuppressionForm
    list_display = ["email_lower", "account", "reason", "campaign", "created_at"]
    list_filter = ["reason", ("account", ScopedRelatedFilter)]
    list_select_related = ["account", "campaign"]
    search_fields = ["email_lower"]
    readonly_fields = ["created_at"]
    show_facets = admin.ShowFacets.NEVER
