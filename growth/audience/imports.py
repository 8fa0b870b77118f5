"""Importing lists of addresses: subscribers into a segment, suppressions into a tenant's list.

All of a list goes in one statement in one transaction, so a list is imported whole or not at
all. By default a list with any invalid line imports nothing (the report says which lines to
fix); ``skip_invalid`` imports the rest. ``check_only`` runs the import and rolls it back, so the
report says exactly what an import would do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.db import transaction

from growth.audience.address_files import AddressList, Entry, Invalid
from growth.audience.addresses import SMTPUTF8_REFUSAL, needs_smtputf8
from growth.models import Segment, Subscriber, Suppression

IMPORTABLE_STATUSES = (Subscriber.Status.PENDING, Subscriber.Status.CONFIRMED)


@dataclass(frozen=True, slots=True)
class Duplicate:
    line: int
    email: str
    why: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    accepted: list[Entry]  # imported, or that would have been (see ``imported``)
    duplicates: list[Duplicate]
    invalid: list[Invalid]
    imported: bool  # False: checked only, or refused because of invalid lines
    checked_only: bool = False

    @property
    def refused(self) -> bool:
        return not self.imported and not self.checked_only


def import_subscribers(*, segment_id: int, addresses: AddressList, status: str,
                       skip_invalid: bool = False, check_only: bool = False) -> ImportReport:
    """Add the list's new addresses to a segment with ``status``; an address already in the
    segment is a duplicate and keeps its row as it is, and one that unsubscribed from the tenant
    is not added (an import never re-subscribes anyone)."""
    if status not in IMPORTABLE_STATUSES:
        raise ValidationError({"status": "Imported subscribers are pending or confirmed."})
    if not Segment.objects.filter(id=segment_id).exists():
        raise ValidationError({"segment": "There is no such segment."})
    addresses = _mailable(addresses)
    return _import(
        addresses,
        lambda entries: Subscriber.objects.add_many(
            segment_id=segment_id, status=status,
            addresses=[(e.address.email, e.address.email_lower) for e in entries]),
        already="already in the segment", skip_invalid=skip_invalid, check_only=check_only,
        why_not=lambda keys: _unsubscribed(segment_id, keys))


def _unsubscribed(segment_id: int, keys: set[str]) -> dict[str, str]:
    """Which of these addresses, not in the segment, were left out because they unsubscribed
    from the tenant."""
    account_id = Segment.objects.filter(id=segment_id).values_list("account_id", flat=True)
    tenants = Subscriber.objects.filter(account_id__in=account_id, email_lower__in=keys)
    in_segment = set(tenants.filter(segment_id=segment_id).values_list("email_lower", flat=True))
    unsubscribed = tenants.filter(status=Subscriber.Status.UNSUBSCRIBED)
    return {key: "unsubscribed from this sender: only they can subscribe again"
            for key in unsubscribed.values_list("email_lower", flat=True) if key not in in_segment}


def import_suppressions(*, account_id: int, addresses: AddressList,
                        reason: str = Suppression.Reason.IMPORTED, skip_invalid: bool = False,
                        check_only: bool = False) -> ImportReport:
    """Suppress the list's addresses for a tenant; one already suppressed keeps its first reason."""
    if reason not in Suppression.Reason.values:
        raise ValidationError({"reason": "Unknown reason."})
    return _import(
        addresses,
        lambda entries: Suppression.objects.suppress_many(
            account_id=account_id, reason=reason,
            emails_lower=[e.address.email_lower for e in entries]),
        already="already suppressed", skip_invalid=skip_invalid, check_only=check_only)


def _mailable(addresses: AddressList) -> AddressList:
    """The list with the addresses no message can be sent to moved among the invalid ones."""
    mailable, unmailable = [], []
    for entry in addresses.entries:
        (unmailable if needs_smtputf8(entry.address.email) else mailable).append(entry)
    if not unmailable:
        return addresses
    return AddressList(
        entries=mailable,
        repeats=addresses.repeats,
        invalid=sorted([*addresses.invalid, *(Invalid(e.line, e.address.email, SMTPUTF8_REFUSAL)
                                              for e in unmailable)], key=lambda i: i.line))


def _import(addresses: AddressList, insert: Callable[[Sequence[Entry]], set[str]], *,
            already: str, skip_invalid: bool, check_only: bool,
            why_not: Callable[[set[str]], dict[str, str]] | None = None) -> ImportReport:
    """``why_not``: of the keys not inserted, those left out for another reason than
    ``already``, with it."""
    keep = not check_only and (skip_invalid or not addresses.invalid)
    with transaction.atomic():
        inserted = insert(addresses.entries)
        if not keep:
            transaction.set_rollback(True)
    skipped = {e.address.email_lower for e in addresses.entries} - set(inserted)
    reasons = why_not(skipped) if why_not and skipped else {}
    accepted = [e for e in addresses.entries if e.address.email_lower in inserted]
    duplicates = [Duplicate(r.line, r.email, f"repeats line {r.first_line}")
                  for r in addresses.repeats]
    duplicates += [Duplicate(e.line, e.address.email, reasons.get(e.address.email_lower, already))
                   for e in addresses.entries if e.address.email_lower not in inserted]
    duplicates.sort(key=lambda d: d.line)
    return ImportReport(accepted=accepted, duplicates=duplicates, invalid=addresses.invalid,
                        imported=keep, checked_only=check_only)
