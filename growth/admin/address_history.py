"""The operators' per-recipient history: one address across the campaigns of one of their
tenants, with the evidence behind each outcome."""

from __future__ import annotations

from urllib.parse import urlencode

from django import forms
from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from growth.admin.scoping import scoped_choices
from growth.ledger.address_history import address_record
from growth.models import Account


class AddressForm(forms.Form):
    account = forms.ModelChoiceField(queryset=Account.objects.none())
    email = forms.CharField(label="Address", max_length=320)

    def __init__(self, *args, accounts, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["account"].queryset = accounts
        if len(accounts) == 1:
            self.fields["account"].initial = accounts[0]


def address_history_url(account_id: int, email: str) -> str:
    return (f"{reverse('admin:growth_send_address')}?"
            f"{urlencode({'account': account_id, 'email': email})}")


class AddressHistoryMixin:
    """For SendAdmin: ``address/``, and a link to it from each send."""

    def address_history_urls(self):
        return [path("address/", self.admin_site.admin_view(self.address_history_view),
                     name="growth_send_address")]

    def address_history_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        accounts = scoped_choices(Account, request).order_by("name")
        bound = "email" in request.GET
        if bound and request.GET.get("account") and not accounts.filter(
                pk=_id(request.GET["account"])).exists():
            raise Http404("There is no account with this id.")  # another tenant's: no leak
        form = AddressForm(request.GET if bound else None, accounts=accounts)
        record = None
        if bound and form.is_valid():
            try:
                record = address_record(account_id=form.cleaned_data["account"].id,
                                        raw=form.cleaned_data["email"])
            except ValidationError as exc:
                form.add_error("email", exc.messages)
        return TemplateResponse(request, "growth/admin/address_history.html", {
            **self.admin_site.each_context(request), "opts": self.opts,
            "title": "An address across campaigns", "form": form, "record": record,
        })

    @admin.display(description="history")
    def address_history_link(self, obj):
        return format_html('<a href="{}">{} in every campaign of {}</a>',
                           address_history_url(obj.account_id, obj.email_lower), obj.email_lower,
                           obj.account)


def _id(text: str) -> int:
    """An id as typed; 0 (no account) for anything else ("²" is a digit to str.isdigit, not
    to int)."""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else 0
