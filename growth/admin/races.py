"""A save that lost a race to another save is answered as if it had come a moment later: with its
form, validated again against what the other save committed, its error on the field it concerns,
what the operator typed still in front of them, and nothing written.

These races end a save after its form was found valid: the row it edits moved to a newer version
(``Overtaken``: growth.admin.versioned), or a value that must be unique (an account's slug, a
segment's name in its account, a user's membership of an account…), free when the form checked
it, was taken by a save that committed first (the database's unique violation, which PostgreSQL
raises only once that save has committed); or a row one of its choices names, there when the
form checked it, was deleted by a save that committed first (a foreign key violation, which
PostgreSQL raises at this save's commit: Django's keys are deferred). The transaction is rolled
back and the view run once more: its form's own checks now see the winner's rows (a choice
deleted since is "not one of the available choices"). A form that lacks the check its constraint
needs fails the same way again, and that is left loud (a 500), not retried."""

from __future__ import annotations

from django.db import IntegrityError

UNIQUE_VIOLATION = "23505"  # SQLSTATE
FOREIGN_KEY_VIOLATION = "23503"
LOST = (UNIQUE_VIOLATION, FOREIGN_KEY_VIOLATION)


class Overtaken(Exception):
    """Another save committed after this form's validation: nothing was written."""


def lost_to_another_save(exc: BaseException) -> bool:
    """Return True if ``exc`` ended a save that another save, committed first, made invalid."""
    if isinstance(exc, IntegrityError):
        return getattr(exc.__cause__, "sqlstate", None) in LOST
    return isinstance(exc, Overtaken)


class ValidatedAgain:
    """For a ModelAdmin (before its base class): a save that lost a race is answered with its
    form, validated again."""

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        queued = queued_messages(request)
        said = len(queued)
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except (IntegrityError, Overtaken) as exc:
            if not lost_to_another_save(exc):
                raise
        # Rolled back (Django's changeform_view is atomic), and out of the aborted transaction.
        # What the lost save said (a deferred foreign key fails at the commit, after Django's
        # "… was added successfully" and the admin's own messages) is unsaid with it.
        del queued[said:]
        return super().changeform_view(request, object_id, form_url, extra_context)


def queued_messages(request) -> list:
    """The messages this request added so far (django.contrib.messages' storage), or a list
    of nothing when the request has none."""
    return getattr(getattr(request, "_messages", None), "_queued_messages", [])
