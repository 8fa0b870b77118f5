"""Opt-outs: a tenant's view of who must not be mailed (removing a suppression, looking an address
up), and a recipient's own (unsubscribing from the emailed link, and undoing it)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError

from growth.audience.addresses import parse_address
from growth.managers.sends import AddressHistory
from growth.models import Account, Send, Subscriber, Suppression
from growth.sending.unsubscribe import UndoTarget

MASK = "•••"


# --- the tenant's view ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ShownSubscriber:
    """A subscriber row as the lookup shows it: a suppression wins over a confirmed status."""

    segment_name: str
    since: datetime
    status: str  # a Subscriber.Status, or "suppressed"
    label: str
    note: str


@dataclass(frozen=True, slots=True)
class AddressLookup:
    email_lower: str
    subscribers: list[Subscriber]  # one per segment the address is in
    suppression: Suppression | None
    history: list[AddressHistory]  # the campaigns with a row for it, newest first

    @property
    def reached(self) -> list[AddressHistory]:
        return [h for h in self.history if h.status == Send.Status.SENT]

    @property
    def last_failure(self) -> AddressHistory | None:
        """The most recent of its sends that failed."""
        failed = [h for h in self.history if h.status == Send.Status.FAILED]
        return max(failed, key=lambda h: h.updated_at, default=None)

    @property
    def shown_subscribers(self) -> list[ShownSubscriber]:
        return [self._shown(s) for s in self.subscribers]

    def _shown(self, subscriber: Subscriber) -> ShownSubscriber:
        status, label, note = subscriber.status, subscriber.get_status_display(), ""
        if self.suppression is not None and status != Subscriber.Status.UNSUBSCRIBED:
            note = ("opted in here, but suppressed: not mailed" if status == Subscriber.Status.CONFIRMED
                    else "not confirmed yet, and suppressed: not mailed")
            status, label = "suppressed", "Suppressed"
        return ShownSubscriber(subscriber.segment.name, subscriber.created_at, status, label, note)


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


# --- the recipient's -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Recipient:
    """The subscriber an unsubscribe link names, in the account that sent it, and the address
    the link's message went to (the subscriber's own, unless it was edited since)."""

    account: Account
    subscriber: Subscriber
    email_lower: str

    @property
    def sender(self) -> str:
        return self.account.from_name or self.account.name

    @property
    def masked_address(self) -> str:
        return mask_address(self.email_lower)

    def is_suppressed(self) -> bool:
        return Suppression.objects.filter(account=self.account,
                                          email_lower=self.email_lower).exists()


def find_recipient(*, account_id: int, subscriber_id: int,
                   campaign_id: int | None = None) -> Recipient | None:
    """The subscriber, only if it belongs to the account; None otherwise. Its address is the one
    the campaign's message went to: an operator may have edited the subscriber's since, and the
    person who opts out from that message is its owner, not the new address's."""
    subscriber = (Subscriber.objects.filter(id=subscriber_id, account_id=account_id)
                  .select_related("account").first())
    if subscriber is None:
        return None
    sent_to = None if campaign_id is None else (
        Send.objects.filter(campaign_id=campaign_id, subscriber_id=subscriber_id,
                            account_id=account_id).values_list("email_lower", flat=True).first())
    return Recipient(subscriber.account, subscriber, sent_to or subscriber.email_lower)


def unsubscribe(recipient: Recipient, *, campaign_id: int | None) -> UndoTarget | None:
    """Suppress the address for the account and mark its subscriber rows unsubscribed (repeating
    it is harmless). Return what the recipient may undo: None when the address was suppressed
    already, since this opt-out then created nothing of its own to lift. Raise
    Subscriber.DoesNotExist if the subscriber is gone (nothing is changed then)."""
    done = Suppression.objects.unsubscribe(
        account_id=recipient.account.id, subscriber_id=recipient.subscriber.id,
        email_lower=recipient.email_lower, campaign_id=campaign_id)
    if done is None:
        raise Subscriber.DoesNotExist(recipient.subscriber.id)
    if done.suppression_id is None:
        return None
    return UndoTarget(recipient.account.id, recipient.subscriber.id, done.suppression_id,
                      tuple(done.confirmed_ids), tuple(done.pending_ids))


def can_resubscribe(recipient: Recipient, undo: UndoTarget) -> bool:
    return Suppression.objects.undoable(account_id=recipient.account.id,
                                        email_lower=recipient.email_lower,
                                        suppression_id=undo.suppression_id)


def resubscribe(recipient: Recipient, undo: UndoTarget) -> bool:
    """Undo the recipient's own opt-out; return whether it was undone.

    Safe by construction: it lifts only the suppression that opt-out created, only while its
    reason is still ``unsubscribed`` and nothing has suppressed the address since (an ESP's
    bounce, complaint or opt-out, a failed send): a bounce, a complaint, a tenant's own
    suppression is never lifted from a link. Only the subscriber rows that opt-out marked go back,
    each to the status it had (a pending row to pending, never to confirmed), and only while
    they are still unsubscribed; a row unsubscribed before stays so. Nothing lifted: nothing
    changes. Repeating it is harmless.
    """
    return Suppression.objects.resubscribe(
        account_id=recipient.account.id, email_lower=recipient.email_lower,
        suppression_id=undo.suppression_id, confirmed_ids=undo.confirmed_ids,
        pending_ids=undo.pending_ids)


def is_resubscribed(recipient: Recipient, undo: UndoTarget) -> bool:
    """The opt-out is undone: the address is not suppressed and none of the rows it marked is
    still unsubscribed."""
    marked = [*undo.confirmed_ids, *undo.pending_ids]
    return not recipient.is_suppressed() and not Subscriber.objects.filter(
        id__in=marked, account=recipient.account,
        status=Subscriber.Status.UNSUBSCRIBED).exists()


def mask_address(email_lower: str) -> str:
    """``j•••@e•••.com``: enough for its owner to recognise, too little to read an address off a
    forwarded page. Shown: the first character of the local part and of the domain, and the
    domain's last label; a part of one character shows none of itself. The domain in Unicode."""
    local, _, domain = email_lower.rpartition("@")
    name, dot, last_label = _unicode_domain(domain).rpartition(".")
    if not dot:
        name, last_label = last_label, ""
    return f"{_masked(local.strip(chr(34)))}@{_masked(name)}{'.' if dot else ''}{last_label}"


def _masked(part: str) -> str:
    return part[0] + MASK if len(part) > 1 else MASK


def _unicode_domain(domain: str) -> str:
    """``bücher.example`` for ``xn--bcher-kva.example`` (the dedup key keeps domains in IDNA)."""
    labels = []
    for label in domain.split("."):
        if label.startswith("xn--"):
            with contextlib.suppress(UnicodeError):  # not valid punycode: shown as stored
                label = label[4:].encode("ascii").decode("punycode")
        labels.append(label)
    return ".".join(labels)
