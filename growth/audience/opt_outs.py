"""A tenant's view of who must not be mailed: removing a suppression, looking an address up."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ValidationError

from growth.audience.addresses import parse_address
from growth.managers.sends import AddressHistory
from growth.models import Send, Subscriber, Suppression


@dataclass(frozen=True, slots=True)
class AddressLookup:
    email_lower: str
    subscribers: list[Subscriber]  # one per segment the address is in
    suppression: Suppression | None
    history: list[AddressHistory]  # the campaigns with a row for it, newest first

    @property
    def reached(self) -> list[AddressHistory]:
        return [h for h in self.history if h.status == Send.Status.SENT]


def remove_suppression(*, account_id: int, suppression_id: int) -> str:
    """Lift one of the tenant's suppressions; return its address. Raise Suppression.DoesNotExist
    if the tenant has none with this id. The address's subscriber rows keep their status: one who
    unsubscribed stays unsubscribed."""
    address = Suppression.objects.remove(account_id=account_id, suppression_id=suppression_id)
    if address is None:
        raise Suppression.DoesNotExist(suppression_id)
    return address


def lookup_address(*, account_id: int, raw: str) -> AddressLookup:
    """Everything the tenant holds about one address. Raise ValidationError for a bad address."""
    email_lower = parse_address(raw).email_lower
    if len(email_lower) > 320:
        raise ValidationError("That address is too long.")
    subscribers = list(Subscriber.objects.filter(account_id=account_id, email_lower=email_lower)
                       .select_related("segment").order_by("created_at", "id"))
    suppression = (Suppression.objects.filter(account_id=account_id, email_lower=email_lower)
                   .select_related("campaign").first())
    history = Send.objects.history_of_address(account_id=account_id, email_lower=email_lower)
    return AddressLookup(email_lower, subscribers, suppression, history)
