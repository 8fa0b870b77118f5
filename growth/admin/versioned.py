"""A versioned change form: two editors of one row never save over each other.

The form carries, hidden, the version of the row it was loaded from and what it showed. A form
older than the row is refused in words (who changed the row, when, and what): nothing is saved
and the operator's typed values stay in front of them. The admin's save is a compare-and-set on
that version (one statement, which bumps it): when another save commits between the validation
and the write, the compare-and-set finds nothing, the transaction is rolled back and the form
validated again (growth.admin.races), refused this time: it cannot reach the save again, however
many saves commit meanwhile (a version only grows, and it was past the form's at the lost save).

One owner for the admins of rate limits, accounts and memberships: a subclass says what a refused
form is told (``changed_since``; ``changed_since_text`` words it as an account's is) and saves a
change onto ``form.cleaned_data[SEEN_VERSION]``, raising ``VersionChanged`` when the row is no
longer at it."""

from __future__ import annotations

import json
from collections.abc import Callable

from django import forms
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError
from django.utils.choices import flatten_choices

from growth.admin.charts import clock
from growth.admin.races import Overtaken, ValidatedAgain

SEEN_VERSION = "seen_version"  # the row's version the form was loaded from
SEEN_VALUES = "seen_values"  # {field: its value as the form showed it}, JSON
SEEN = (SEEN_VERSION, SEEN_VALUES)


class VersionChanged(Overtaken):
    """The row's version moved between the form's validation and its save: nothing was written."""


def last_edit(obj) -> LogEntry | None:
    """The newest entry of the object's History: who saved it last in the admin, and when."""
    return (LogEntry.objects.filter(content_type=ContentType.objects.get_for_model(type(obj)),
                                    object_id=str(obj.pk))
            .select_related("user").order_by("-action_time", "-id").first())


def edited_by(entry: LogEntry) -> str:
    """ "alice, 2026-12-01 10:00:00": who saved, and when (the server's clock)."""
    return f"{entry.user.get_username()}, {clock(entry.action_time, '%Y-%m-%d %H:%M:%S')}"


def _shown(value):
    """A field's prepared value as its hidden copy keeps it (what its ``has_changed`` reads)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return str(value)


class SeenVersionField(forms.IntegerField):
    widget = forms.HiddenInput

    def has_changed(self, initial, data) -> bool:
        return False  # what the form was loaded from: no edit, not in the History's message


class SeenValuesField(forms.Field):
    """Read only to describe a refusal: never an error, whatever is posted."""

    widget = forms.HiddenInput

    def has_changed(self, initial, data) -> bool:
        return False


class VersionedForm:
    """Mixed in before an admin's ModelForm by ``VersionedAdmin.get_form``."""

    refusal: Callable[[VersionedForm], str]  # what a form older than the row is told

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields[SEEN_VERSION].initial = self.instance.version
        if not self.is_bound:  # a posted form shows the copy it was posted with
            self.fields[SEEN_VALUES].initial = json.dumps(
                {name: _shown(self[name].value()) for name in self.fields if name not in SEEN})

    def clean(self):
        cleaned = super().clean()
        # The instance is the row as this request read it: a save since the form was loaded is
        # refused here, one after this check by the save's compare-and-set. A version that is
        # missing or no whole number is none (its field's error is hidden with it).
        if cleaned.get(SEEN_VERSION) != self.instance.version:
            self.add_error(None, self.refusal(self))
        return cleaned

    def changed_since_seen(self) -> list[str] | None:
        """The names of the fields whose value now differs from what the form showed when it was
        loaded; None when that is not known (its hidden copy is missing or hand-made)."""
        try:
            seen = json.loads(self.data.get(self.add_prefix(SEEN_VALUES)) or "null")
        except (ValueError, RecursionError):
            return None
        if not isinstance(seen, dict):
            return None
        changed = []
        for name, field in self.fields.items():
            if name in SEEN or name not in seen:
                continue
            try:
                differs = field.has_changed(self[name].initial, seen[name])
            except (ValidationError, TypeError, ValueError):  # a hand-made value: not what it showed
                differs = True
            if differs:
                changed.append(name)
        return changed


def _value_text(field: forms.Field, value) -> str:
    """``value`` of ``field`` as its page shows it: a choice by its label, a row by its name."""
    if value in (None, ""):
        return "empty"
    if isinstance(field, forms.ModelChoiceField):
        row = field.queryset.filter(pk=value).first()  # as scoped for this user: no other name
        value = value if row is None else field.label_from_instance(row)
    elif isinstance(field, forms.ChoiceField):
        value = dict(flatten_choices(field.choices)).get(value, value)
    return f"“{value}”"


def changed_since_text(form: VersionedForm, *, noun: str,
                       nothing_saved: str = "Nothing was saved") -> str:
    """What an editor whose form is older than its row (``noun``: "account") is told: who saved
    the row last in the admin and when, which fields differ from what the form showed, and what
    to do."""
    edit = last_edit(form.instance)
    by = ("" if edit is None
          else f" (the last save in its History: {edited_by(edit)}: {edit.get_change_message()})")
    changed = form.changed_since_seen()
    if changed:
        what = " What differs from the page you opened: " + "; ".join(
            f"{form[name].label} is now {_value_text(form.fields[name], form[name].initial)}"
            for name in changed) + "."  # initial: the row as this request read it
    elif changed == []:
        what = " None of the fields you see differs from the page you opened."
    else:
        what = ""
    return (f"Someone changed this {noun} since you opened it{by}.{what} {nothing_saved}: what "
            f"you typed is still below. Reload the page to see the {noun} as it is now, and make "
            "your changes again.")


class VersionedAdmin(ValidatedAgain):
    """For a ModelAdmin (before its base class) of a model with a ``version``, bumped by the
    compare-and-set its save makes."""

    def changed_since(self, form: VersionedForm) -> str:
        raise NotImplementedError("subclasses of VersionedAdmin must provide a changed_since() method")

    def _editing(self, request, obj) -> bool:
        """A row's own page that saves: its form carries the version it was loaded from."""
        return obj is not None and self.has_change_permission(request, obj)

    def get_fields(self, request, obj=None):
        # Django's, from the form's fields (the hidden ones among them): they go where
        # with_seen_fields puts them, once
        return [name for name in super().get_fields(request, obj) if name not in SEEN]

    def get_fieldsets(self, request, obj=None):
        return self.with_seen_fields(request, obj, super().get_fieldsets(request, obj))

    def with_seen_fields(self, request, obj, fieldsets):
        """``fieldsets`` with the hidden fields, for a subclass that makes its own."""
        if not self._editing(request, obj):
            return fieldsets
        (name, options), *rest = fieldsets
        return [(name, {**options, "fields": [*options["fields"], SEEN]}), *rest]

    def get_form(self, request, obj=None, change=False, **kwargs):
        fields = (kwargs.pop("fields") if "fields" in kwargs
                  else flatten_fieldsets(self.get_fieldsets(request, obj)))
        if fields is not None:  # the hidden ones are the form's, not the model's
            fields = [name for name in fields if name not in SEEN]
        form = super().get_form(request, obj, change, fields=fields, **kwargs)
        if not self._editing(request, obj):
            return form
        return type(form.__name__, (VersionedForm, form), {
            SEEN_VERSION: SeenVersionField(required=False),
            SEEN_VALUES: SeenValuesField(required=False),
            "refusal": staticmethod(self.changed_since),
        })
