"""What a member does to the suppression list in /app/, recorded as the admin records an
operator: a LogEntry naming the user (its History), written in the same transaction as the change,
and an AccountLogEntry of the account, through which /app/ shows each account its own trail. The
latter keeps its own copy of the entry (who, when, what): Django deletes a user's LogEntries with
the user, and the account's trail must still say who lifted a suppression.

As in the admin: one entry per suppression added (its Suppression's History) or removed (the row
is gone: the entry keeps its id and address); an imported file is one entry on the account with
the count and the file's name, as the admin's subscriber import is on its segment (a file may
hold 900,000 addresses)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import transaction

from growth.audience.address_files import AddressList
from growth.audience.imports import ImportReport, import_suppressions
from growth.audience.opt_outs import remove_suppression
from growth.models import Account, AccountLogEntry, Membership, Suppression

BATCH = 2000
REPR_LENGTH = 200  # LogEntry.object_repr's
CONTROL = re.compile(r"[\x00-\x1f\x7f]+")  # a file's name, typed by anyone: no NUL, no line break
ACTIONS = {ADDITION: "Added", CHANGE: "Imported", DELETION: "Removed"}


@dataclass(frozen=True, slots=True)
class Change:
    """One line of an account's trail, as /app/ shows it."""

    when: datetime
    who: str
    action: str
    email_lower: str  # "": an import
    detail: str


def add(member: Membership, user, *, addresses: AddressList, reason: str) -> ImportReport:
    """Suppress typed addresses, recording each one added."""
    with transaction.atomic():
        report = import_suppressions(account_id=member.account_id, addresses=addresses,
                                     reason=reason)
        if report.imported:
            _record_added(member, user, [e.address.email_lower for e in report.accepted], reason)
    return report


def suppress_one(member: Membership, user, *, email_lower: str, reason: str) -> bool:
    """Suppress one address (from its lookup); return False if it already was (nothing recorded)."""
    with transaction.atomic():
        done = Suppression.objects.suppress(account_id=member.account_id, email_lower=email_lower,
                                            reason=reason)
        if done:
            _record_added(member, user, [email_lower], reason)
    return done


def import_file(member: Membership, user, *, addresses: AddressList, file_name: str,
                skip_invalid: bool, check_only: bool) -> ImportReport:
    """Import a file of addresses, recording the import (when it added any) on the account."""
    with transaction.atomic():
        report = import_suppressions(account_id=member.account_id, addresses=addresses,
                                     skip_invalid=skip_invalid, check_only=check_only)
        if report.imported and report.accepted:
            count = len(report.accepted)
            name = CONTROL.sub(" ", file_name)[:REPR_LENGTH]
            _record(user, member.account_id, [(LogEntry(
                content_type=ContentType.objects.get_for_model(Account), object_id=str(member.account_id),
                object_repr=str(member.account)[:REPR_LENGTH], action_flag=CHANGE,
                change_message=f"Imported {count:,} suppression{'s' if count != 1 else ''} "
                               f"from “{name}” in /app/."), "")])
    return report


def remove(member: Membership, user, *, suppression_id: int) -> str:
    """Lift one of the account's suppressions, recording who did and what it was; return its
    address. Raise Suppression.DoesNotExist as remove_suppression does (nothing recorded)."""
    with transaction.atomic():
        # a suppression's reason never changes while it stands: read here, it is what was lifted
        was = (Suppression.objects.filter(pk=suppression_id, account_id=member.account_id)
               .values("reason", "created_at").first())
        address = remove_suppression(account_id=member.account_id, suppression_id=suppression_id)
        since = was["created_at"].astimezone(UTC)
        _record(user, member.account_id, [(LogEntry(
            content_type=ContentType.objects.get_for_model(Suppression), object_id=str(suppression_id),
            object_repr=address[:REPR_LENGTH], action_flag=DELETION,
            change_message=f"Removed from the suppression list in /app/ (it was "
                           f"{Suppression.Reason(was['reason']).label.lower()}, since "
                           f"{since:%Y-%m-%d %H:%M} UTC): campaigns may reach it again."),
            address)])
    return address


def recent_changes(account_id: int, *, email_lower: str | None = None,
                   limit: int = 10) -> list[Change]:
    """The account's last changes made in /app/, newest first (``email_lower``: of one address)."""
    links = AccountLogEntry.objects.filter(account_id=account_id)
    if email_lower is not None:
        links = links.filter(email_lower=email_lower)
    links = links.order_by("-action_time", "-id")[:limit]
    return [Change(link.action_time, link.username, ACTIONS.get(link.action_flag, ""),
                   link.email_lower, link.change_message) for link in links]


def _record_added(member: Membership, user, emails_lower: list[str], reason: str) -> None:
    ids = dict(Suppression.objects.filter(account_id=member.account_id, email_lower__in=emails_lower)
               .values_list("email_lower", "id"))
    content_type = ContentType.objects.get_for_model(Suppression)
    message = f"Added to the suppression list in /app/ ({Suppression.Reason(reason).label.lower()})."
    _record(user, member.account_id, ((LogEntry(
        content_type=content_type, object_id=str(ids[email]), object_repr=email[:REPR_LENGTH],
        action_flag=ADDITION, change_message=message), email) for email in emails_lower))


def _record(user, account_id: int, entries: Iterable[tuple[LogEntry, str]]) -> None:
    entries = list(entries)
    for entry, _ in entries:
        entry.user_id = user.pk
    LogEntry.objects.bulk_create([entry for entry, _ in entries], batch_size=BATCH)
    AccountLogEntry.objects.bulk_create(
        [AccountLogEntry(entry=entry, account_id=account_id, email_lower=email,
                         username=user.get_username(), action_time=entry.action_time,
                         action_flag=entry.action_flag, change_message=entry.change_message)
         for entry, email in entries], batch_size=BATCH)
