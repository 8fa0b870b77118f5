from __future__ import annotations

from django import forms

from growth.models import Suppression

MANUAL_REASONS = [(r.value, r.label) for r in (Suppression.Reason.MANUAL, Suppression.Reason.BOUNCED,
                                               Suppression.Reason.COMPLAINED)]


class AddSuppressionsForm(forms.Form):
    addresses = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "autocomplete": "off", "spellcheck": "false"}),
        help_text="One address or more: one per line, or separated by commas or spaces.")
    reason = forms.ChoiceField(choices=MANUAL_REASONS, initial=Suppression.Reason.MANUAL)


class ImportSuppressionsForm(forms.Form):
    file = forms.FileField(help_text="CSV, UTF-8: a column headed “email” (an export of this list "
                                     "works), or one address per line.")
    skip_invalid = forms.BooleanField(required=False,
                                      label="Import the valid lines even if some are invalid")
    check_only = forms.BooleanField(required=False, label="Check only (import nothing)")


class LookupForm(forms.Form):
    email = forms.CharField(label="Address", max_length=320,
                            widget=forms.EmailInput(attrs={"autocomplete": "off"}))


class SuppressAddressForm(forms.Form):
    """Suppress the address a lookup shows, from the lookup page."""

    email = forms.CharField(max_length=320, widget=forms.HiddenInput)
    reason = forms.ChoiceField(choices=MANUAL_REASONS, initial=Suppression.Reason.MANUAL)
