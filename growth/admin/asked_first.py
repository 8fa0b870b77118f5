"""A list action that asks first, as growth.admin.review's decisions do: the action's first post
shows what it would do; the page posts the selection back with ``post=yes`` and a digest of what
it promised. Confirming acts only if the selection still plans exactly that: otherwise (a row
gone, or changed, since) nothing is done and the page is shown again as things now stand.

One digest rather than a field per row: a selection across the whole list may hold more rows
than Django takes fields in a post (DATA_UPLOAD_MAX_NUMBER_FIELDS)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db import IntegrityError, transaction

from growth.admin.races import lost_to_another_save, queued_messages

LISTED = 100  # rows listed one by one on a confirmation page; beyond, a count
PLANNED = "planned"


def digest(planned: Iterable[tuple]) -> str:
    """What a page promises, as one value: each row as the page showed it, in any order."""
    return hashlib.sha256("\n".join(sorted(map(repr, planned))).encode()).hexdigest()


def confirmed(request) -> bool:
    return request.POST.get("post") == "yes"


def as_promised(request, planned: str) -> bool:
    """Whether the confirmed page promised what the selection plans now."""
    return request.POST.get(PLANNED) == planned


def hidden_fields(request, action: str, pks: Iterable, planned: str) -> list[tuple[str, object]]:
    """The fields that post the page's selection back: the rows it showed (``pks``), or, for a
    selection across the list, the list's selection as posted (its filters are in the URL the
    page posts to)."""
    fields: list[tuple[str, object]] = [("action", action), ("post", "yes"), (PLANNED, planned)]
    if request.POST.get("select_across") == "1":
        fields.append(("select_across", "1"))
        pks = request.POST.getlist(ACTION_CHECKBOX_NAME)
    return fields + [(ACTION_CHECKBOX_NAME, pk) for pk in pks]


@dataclass(frozen=True)
class Asked:
    """One list action that asks first: ``noun`` ("campaigns"), ``verb`` ("clone") and ``done``
    ("cloned") word its messages; ``changed`` says what may have changed since the page, ``lost``
    what another save, committed while the action ran, can have removed from under it."""

    noun: str
    verb: str
    done: str
    changed: str
    gone: str = "is there any more"
    lost: str = "a row it needs was changed or deleted meanwhile"


def ask_first(modeladmin, request, asked: Asked, *, shown: Callable[[], Sequence],
              locked: Callable[[], Sequence], planned: Callable[[Sequence], str],
              act: Callable[[Sequence], None], page: Callable[[Sequence], object]):
    """The action: confirmed as promised, ``act`` on the rows ``locked`` (in the transaction that
    compares them with the page, which they stay locked through); else the confirmation ``page``
    of the rows ``shown``, again as things now stand if the page confirmed is stale or the
    transaction lost to another save (growth.admin.races: rolled back, nothing done)."""
    if confirmed(request):
        queued = queued_messages(request)
        said = len(queued)
        try:
            with transaction.atomic():
                rows = locked()
                promised = bool(rows) and as_promised(request, planned(rows))
                if promised:
                    act(rows)
        except IntegrityError as exc:  # a deferred foreign key fails at the commit, after act
            if not lost_to_another_save(exc):
                raise
            del queued[said:]  # what act said, undone with it
            modeladmin.message_user(request, f"Nothing was {asked.done}: {asked.lost}. Here is "
                                    "what it would do now.", messages.WARNING)
        else:
            if promised:
                return None  # back to the list
            if not rows:
                modeladmin.message_user(request, f"None of the selected {asked.noun} "
                                        f"{asked.gone}: nothing was {asked.done}.",
                                        messages.WARNING)
                return None
            modeladmin.message_user(request, f"The {asked.noun} this would {asked.verb} changed "
                                    f"since the page was shown ({asked.changed}): nothing was "
                                    f"{asked.done}. Here is what it would do now.",
                                    messages.WARNING)
    rows = shown()
    if not rows:
        modeladmin.message_user(request, f"None of the selected {asked.noun} {asked.gone}: "
                                f"nothing to {asked.verb}.", messages.WARNING)
        return None
    return page(rows)
