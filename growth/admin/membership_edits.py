"""Two operators editing one membership (a user's role in an account) never save over each other:
its page saves by a compare-and-set onto the version it was loaded from (growth.admin.versioned),
and a form older than the membership is refused whole, told who saved it last, when, and which of
its fields differ from what it showed; a demotion is never silently undone. Its account's change
form lists it too (the members' inline): a member changed there is saved by the same
compare-and-set, so it is a new version that refuses a page of it opened before.

A membership changed or deleted on its own page is also a new version of its account's change
form (growth.admin.account_edits), whose inline would otherwise post the old role back. Its
account's row is locked first, as that form's save locks it before its members': two such saves
at once wait for one another, and neither is chosen as a deadlock's victim (a 500)."""

from __future__ import annotations

from django.db import transaction
from django.forms.models import BaseInlineFormSet

from growth.admin.versioned import (
    SEEN_VERSION,
    VersionChanged,
    VersionedAdmin,
    VersionedForm,
    changed_since_text,
)
from growth.models import Account, Membership


def save_edit(membership: Membership, *, version: int) -> None:
    """Save the form's values of ``membership`` onto ``version``; raise VersionChanged when the
    membership is no longer at it (nothing written)."""
    saved = Membership.objects.edit(membership.pk, version=version, user_id=membership.user_id,
                                    account_id=membership.account_id, role=membership.role)
    if saved is None:
        raise VersionChanged
    membership.version = saved


class MembersFormSet(BaseInlineFormSet):
    """An account's members, in its change form: a changed one is saved onto the version this
    request read (the account's own compare-and-set, just before, vouches for the rest)."""

    def save_existing(self, form, obj, commit=True):
        membership = form.save(commit=False)
        if commit:
            save_edit(membership, version=membership.version)
        return membership


class MembershipEdits(VersionedAdmin):
    """For the membership's ModelAdmin (before its base class)."""

    def save_model(self, request, obj, form, change):
        if not change:
            super().save_model(request, obj, form, change)  # a new member: no form shows it yet
            return
        if form.has_changed():
            # its account before the change too: moved, it left that account's form
            Account.objects.members_changed({obj.account_id, form.initial.get("account")} - {None})
        save_edit(obj, version=form.cleaned_data[SEEN_VERSION])

    def delete_model(self, request, obj):
        Account.objects.members_changed([obj.account_id])
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            accounts = list(queryset.values_list("account_id", flat=True))
            Account.objects.members_changed(accounts)
            super().delete_queryset(request, queryset)

    def changed_since(self, form: VersionedForm) -> str:
        return changed_since_text(form, noun="membership")
