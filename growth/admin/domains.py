"""Sending domains: the DKIM keys that sign the SMTP path's mail (see growth.sending.dkim).

A superuser manages every domain, the platform's (no account) included; a tenant's operator
those of the accounts it edits (a viewer only reads them), within its model permissions. The
private key is written, never read back: its field is empty on every page (a blank field on a
change keeps the stored key), a viewer's read-only page leaves it out, and what is saved is
checked first (it parses with the chosen algorithm, an RSA key has 2048 bits or more, a probe
signature verifies against it). A domain's page shows the TXT record to publish, and "Verify in
DNS" (a button there, an action on the list) checks that it is published: a tenant may send from
its domain only once it is verified (growth.deliverability.sender_domains).
"""

from __future__ import annotations

import re

import idna
from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from dns.exception import DNSException

from growth.admin.scoping import TenantScopedAdmin
from growth.deliverability import sender_domains
from growth.deliverability.readiness import default_resolver
from growth.models import SendingDomain
from growth.sending import dkim

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_SELECTOR = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")  # RFC 6376 §3.1: DNS labels
KEY_FIELD = "private_key"
PROOF_FIELDS = ["account", "domain", "selector", "algorithm", KEY_FIELD]
VERIFY_DNS_BUDGET = 20.0  # seconds for every lookup of one "Verify in DNS"


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value: neither the stored one nor one posted back with
    an error (as PasswordInput without render_value)."""

    def format_value(self, value):
        return None


class SendingDomainForm(forms.ModelForm):
    private_key = forms.CharField(
        required=False, strip=True, label="Private key",
        widget=WriteOnlyTextarea(attrs={"rows": 6, "cols": 66, "autocomplete": "off",
                                        "spellcheck": "false"}),
        help_text="RSA: PEM (openssl genrsa 2048). Ed25519: the base64 of the 32-byte key, or "
                  "OpenSSL's PEM (openssl genpkey -algorithm ed25519). Never shown again.")
    user_is_superuser = False  # set by the ModelAdmin on the form class it builds per request

    class Meta:
        model = SendingDomain
        fields = ["account", "domain", "selector", "algorithm", KEY_FIELD]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.initial.pop(KEY_FIELD, None)  # the stored key never travels to the page
        if self.instance.pk:
            self.fields[KEY_FIELD].widget.attrs["placeholder"] = (
                "A key is stored. Leave this empty to keep it; paste a key to replace it.")

    def clean_domain(self) -> str:
        value = self.cleaned_data["domain"].strip().lower().rstrip(".")
        try:
            value = idna.encode(value, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise ValidationError(f"{value!r} is not a domain name: {exc}") from None
        if "." not in value:
            raise ValidationError("Give the full domain of the From addresses, e.g. example.com.")
        if not self.user_is_superuser:
            for platform in (settings.DKIM_DOMAIN, settings.BOUNCE_DOMAIN):
                if platform and (value == platform or value.endswith("." + platform)):
                    raise ValidationError(f"{value} is the platform's domain.")
        account = self.cleaned_data.get("account")
        if (SendingDomain.objects.filter(domain=value, account=account)
                .exclude(pk=self.instance.pk).exists()):
            owner = "this account" if account else "the platform"
            raise ValidationError(f"{value} already has a key in {owner} (one key per domain).")
        return value

    def clean_selector(self) -> str:
        value = self.cleaned_data["selector"].strip()
        if not _SELECTOR.match(value):
            raise ValidationError("A selector is one or more DNS labels (letters, digits, hyphens), "
                                  "e.g. zy1 or 2026-01.")
        return value

    def clean(self):
        cleaned = super().clean()
        pasted = cleaned.get(KEY_FIELD, "")
        algorithm = cleaned.get("algorithm")
        key = pasted or (self.instance.private_key if self.instance.pk else "")
        if not key:
            self.add_error(KEY_FIELD, "Paste the domain's private key.")
        elif algorithm:
            try:
                cleaned[KEY_FIELD] = dkim.load_private_key(key, algorithm)
            except dkim.DkimKeyError as exc:
                self.add_error(KEY_FIELD, f"This key cannot sign: {exc}." if pasted else
                               f"The stored key cannot sign with {algorithm}: {exc}. Paste a key "
                               "for this algorithm.")
        return cleaned


@admin.register(SendingDomain)
class SendingDomainAdmin(TenantScopedAdmin):
    form = SendingDomainForm
    list_display = ["domain", "selector", "algorithm", "owner", "dns_name", "verification",
                    "created_at"]
    list_filter = ["algorithm"]
    list_select_related = ["account"]
    search_fields = ["domain", "selector", "account__name"]
    readonly_fields = ["dns_name", "dns_record", "verification", "created_at"]
    actions = ["verify_in_dns"]
    change_form_template = "growth/admin/sendingdomain_change_form.html"

    def get_fieldsets(self, request, obj=None):
        fields = ["account", "domain", "selector", "algorithm"]
        if obj is None or self.has_change_permission(request, obj):
            fields.append(KEY_FIELD)  # a read-only page would print the stored value
        fieldsets = [(None, {"fields": fields})]
        if obj is not None:
            fieldsets.append(("Publish in DNS", {
                "fields": ["dns_name", "dns_record", "verification", "created_at"],
                "description": "Receivers look the public key up here: publish this TXT record "
                               "before mail goes out signed with this key, then “Verify in DNS”: "
                               "the account may send from the domain once it is verified."}))
        return fieldsets

    def save_model(self, request, obj, form, change):
        if change:  # verified_at is the DNS check's alone (a trigger clears it on a change)
            obj.save(update_fields=PROOF_FIELDS)
        else:
            obj.save()

    # --- verify in DNS ----------------------------------------------------------------------

    def get_urls(self):
        return [
            path("<path:object_id>/verify/", self.admin_site.admin_view(self.verify_view),
                 name="growth_sendingdomain_verify"),
            *super().get_urls(),
        ]

    def verify_view(self, request, object_id):
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        domain = self.get_object(request, object_id)  # another tenant's: 404
        if not self.has_change_permission(request, domain):
            raise PermissionDenied
        self._verify(request, [domain])
        return HttpResponseRedirect(reverse("admin:growth_sendingdomain_change", args=[domain.pk]))

    @admin.action(description="Verify in DNS", permissions=["change"])
    def verify_in_dns(self, request, queryset):
        self._verify(request, list(queryset.select_related("account").order_by("domain", "id")))

    def _verify(self, request, domains) -> None:
        """Check each domain's key in DNS, record and say the outcome, in its History too."""
        try:
            resolver = default_resolver(timeout=settings.DELIVERABILITY_DNS_TIMEOUT,
                                        budget=VERIFY_DNS_BUDGET)
        except (DNSException, OSError, ValueError) as exc:  # no resolv.conf, a malformed setting
            self.message_user(request, f"Nothing verified: no DNS resolver (DELIVERABILITY_DNS "
                              f"{settings.DELIVERABILITY_DNS!r}: {exc}).", messages.ERROR)
            return
        levels = {True: messages.SUCCESS, False: messages.ERROR, None: messages.WARNING}
        for domain in domains:
            outcome = sender_domains.verify(domain=domain, resolver=resolver)
            self.log_change(request, domain, f"Verify in DNS: {outcome.message}")
            self.message_user(request, outcome.message, levels[outcome.verified])

    def render_change_form(self, request, context, add=False, change=False, form_url="", obj=None):
        if obj is not None and self.has_change_permission(request, obj):
            context["verify_url"] = reverse("admin:growth_sendingdomain_verify", args=[obj.pk])
        return super().render_change_form(request, context, add=add, change=change,
                                          form_url=form_url, obj=obj)

    @admin.display(description="verified in DNS", ordering="verified_at")
    def verification(self, obj):
        if obj.verified_at is None:
            return "not yet"
        return f"verified {timezone.localtime(obj.verified_at):%Y-%m-%d %H:%M}"

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.user_is_superuser = request.user.is_superuser
        return form

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if db_field.name == "account" and not request.user.is_superuser:
            kwargs["required"] = True  # only a superuser keys the platform's domains
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        if db_field.name == "account" and request.user.is_superuser:
            field.empty_label = "— the platform's domain —"
        return field

    def _may_edit(self, request, obj) -> bool:
        if obj is not None and obj.account_id is None:
            return request.user.is_superuser
        return super()._may_edit(request, obj)

    @admin.display(description="account", ordering="account__name")
    def owner(self, obj):
        return obj.account or "the platform"

    @admin.display(description="DNS name (TXT)")
    def dns_name(self, obj):
        return f"{obj.selector}._domainkey.{obj.domain}" if obj.pk else "—"

    @admin.display(description="TXT record")
    def dns_record(self, obj):
        if not obj.pk:
            return "—"
        try:
            record = dkim.dns_record(dkim.load_private_key(obj.private_key, obj.algorithm),
                                     obj.algorithm)
        except dkim.DkimKeyError as exc:
            return f"The stored key cannot sign: {exc}. Paste a new key."
        return format_html(
            '<code class="dkim-record" style="word-break:break-all">{}</code>'
            '<p class="help">In a zone file, as strings of at most 255 characters:</p>'
            '<code class="dkim-zone" style="word-break:break-all">{} IN TXT ( {} )</code>',
            record, f"{obj.selector}._domainkey.{obj.domain}.", dkim.zone_strings(record))
