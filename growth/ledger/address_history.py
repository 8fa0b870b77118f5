"""One address across a tenant's campaigns, for operators: what each campaign's row says, and
the evidence behind it (the ESP's feedback on that send, the verdicts about it while in doubt)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from growth.audience.opt_outs import AddressLookup, lookup_address
from growth.job_ids import message_id
from growth.managers.sends import AddressHistory
from growth.models import FeedbackEvent, SendVerdict


@dataclass(frozen=True, slots=True)
class SendEvidence:
    send: AddressHistory
    message_id: str
    events: list[FeedbackEvent]
    verdicts: list[SendVerdict]


@dataclass(frozen=True, slots=True)
class AddressRecord:
    lookup: AddressLookup
    sends: list[SendEvidence]  # newest campaign first


def address_record(*, account_id: int, raw: str) -> AddressRecord:
    """Raise ValidationError for a bad address."""
    lookup = lookup_address(account_id=account_id, raw=raw)
    send_ids = [h.send_id for h in lookup.history]
    events, verdicts = defaultdict(list), defaultdict(list)
    for event in FeedbackEvent.objects.filter(send_id__in=send_ids, account_id=account_id
                                              ).order_by("occurred_at", "id"):
        events[event.send_id].append(event)
    for verdict in SendVerdict.objects.filter(send_id__in=send_ids).order_by("decided_at", "id"):
        verdicts[verdict.send_id].append(verdict)
    return AddressRecord(lookup, [
        SendEvidence(h, message_id(h.job_id), events[h.send_id], verdicts[h.send_id])
        for h in lookup.history])
