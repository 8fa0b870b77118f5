"""Two editors of one account never save over each other: its change form, fields and members
(the membership inline) together, is saved as one compare-and-set onto the version it was loaded
from (growth.admin.versioned). A form older than the account is refused whole, an edit of its
members only too, and told who saved the account last, when, and which of its fields differ from
what it showed. Only that save and a membership changed or deleted on its own page (which the
form's inline would otherwise post back) write an account's version. The members the form changes
are saved as their own page saves them (growth.admin.membership_edits), after the account: its
row is locked first, as that page locks it."""

from __future__ import annotations

from growth.admin.versioned import (
    SEEN_VERSION,
    VersionChanged,
    VersionedAdmin,
    VersionedForm,
    changed_since_text,
)
from growth.models import Account

# What the change form edits, all saved by the compare-and-set (a field added to the form and
# not here would be dropped silently: a test holds the two alike)
EDITED = ("name", "slug", "from_email", "from_name", "time_zone", "warmup_started_on",
          "warmup_daily_start", "warmup_daily_growth", "warmup_until")


def save_edit(account: Account, *, version: int, memberships_changed: bool) -> None:
    """Save the form's values of ``account`` onto ``version``; raise VersionChanged when the
    account is no longer at it (nothing written)."""
    saved = Account.objects.edit(account.pk, version=version,
                                 memberships_changed=memberships_changed,
                                 **{name: getattr(account, name) for name in EDITED})
    if saved is None:
        raise VersionChanged
    account.version = saved


def changed_since(form: VersionedForm) -> str:
    """What an editor whose form is older than the account is told."""
    return changed_since_text(form, noun="account",
                              nothing_saved="Nothing was saved, its members neither")


class AccountEdits(VersionedAdmin):
    """For the account's ModelAdmin (before its base class)."""

    def save_model(self, request, obj, form, change):
        # a change is saved with its inlines, in save_related, where they are known
        if not change:
            super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        if change:
            save_edit(form.instance, version=form.cleaned_data[SEEN_VERSION],
                      memberships_changed=any(formset.has_changed() for formset in formsets))
        super().save_related(request, form, formsets, change)

    def changed_since(self, form: VersionedForm) -> str:
        return changed_since(form)
