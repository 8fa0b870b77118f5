"""Settle a campaign's sends in doubt on what a plain SMTP relay recorded (``reconcile_unknown``).

The relay's log (or a list of Message-IDs it accepted) is read whole before anything is
written: a file that cannot be read, or is not in the format said, changes nothing. Then the
campaign's rows in doubt whose message the relay accepted become 'sent', each with its evidence;
optionally the rest are queued again with the same key. Rows of other campaigns are never
touched, whatever the file names.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path

from django.db import transaction

from growth.managers.verdicts import InDoubt
from growth.models import Campaign, Send, SendVerdict
from growth.reconcile import exim, message_ids, postfix
from growth.reconcile.evidence import Collector, EvidenceError, Sighting, lines_of

DECIDED_BY = "reconcile_unknown"


@dataclass(frozen=True, slots=True)
class Format:
    label: str  # as the evidence and the report name the source
    handle_name: str  # what the relay calls its own id of a message
    parse: Callable[[Iterable[str], Collector], None]


FORMATS = {
    "postfix-log": Format("Postfix log", "queue id", postfix.parse),
    "exim-log": Format("Exim log", "Exim id", exim.parse),
    "message-ids": Format("Message-ID list", "", message_ids.parse),
}


@dataclass(frozen=True, slots=True)
class Source:
    kind: str  # a key of FORMATS
    path: Path

    @property
    def format(self) -> Format:
        return FORMATS[self.kind]

    def __str__(self) -> str:
        return f"{self.format.label} {self.path.name}"

    def describe(self, sighting: Sighting) -> str:
        """A verdict's evidence: this source, and what it shows about the send."""
        return sighting.evidence(str(self), self.format.handle_name)


@dataclass(frozen=True, slots=True)
class Report:
    campaign_id: int
    source: Source
    dry_run: bool
    evidence: Collector
    marked_sent: list[InDoubt]  # the relay accepted them (dry run: would be marked)
    refused: list[InDoubt]  # the relay logged them, and refused them
    retried: int  # queued again with the same key (dry run: would be)
    reopened: bool  # the campaign had finished, and went back to sending for the retried rows
    taken_by_follow_up: list[InDoubt]  # in doubt, never retried: a follow-up campaign has them
    still_unknown: list[InDoubt]
    campaign_cancelled: bool  # nothing of a cancelled campaign is retried


def reconcile(*, campaign_id: int, source: Source, retry_rest: bool = False,
              dry_run: bool = False) -> Report:
    in_doubt = SendVerdict.objects.unknown_in_campaign(campaign_id=campaign_id)
    evidence = read(source, campaign_id=campaign_id, in_doubt={r.subscriber_id for r in in_doubt})
    accepted, refused = evidence.accepted, evidence.refused
    to_mark = {row.id: source.describe(accepted[row.subscriber_id])
               for row in in_doubt if row.subscriber_id in accepted}
    if dry_run:
        marked = set(to_mark)
    else:
        marked = set(SendVerdict.objects.settle_unknown(
            to_mark, verdict="sent", decided_by=f"{DECIDED_BY}:{source.kind}"))
    rest = [row for row in in_doubt if row.id not in to_mark]
    status = Campaign.objects.filter(id=campaign_id).values_list("status", flat=True).first()

    retried: set[int] = set()
    reopened = False
    if retry_rest and dry_run:
        if status != Campaign.Status.CANCELLED:
            retried = {row.id for row in rest if not row.resent}
        reopened = bool(retried) and status == Campaign.Status.SENT
    elif retry_rest:
        notes = {row.id: source.describe(refused[row.subscriber_id])
                 for row in rest if row.subscriber_id in refused}
        retried, reopened = _retry(campaign_id, {row.id for row in rest}, notes,
                                   default=f"nothing in {source} shows the relay accepted it")

    if dry_run:
        still = [row for row in rest if row.id not in retried]
    else:
        still = SendVerdict.objects.unknown_in_campaign(campaign_id=campaign_id)
    return Report(
        campaign_id=campaign_id, source=source, dry_run=dry_run, evidence=evidence,
        marked_sent=[row for row in in_doubt if row.id in marked],
        refused=[row for row in in_doubt if row.subscriber_id in refused],
        retried=len(retried), reopened=reopened,
        taken_by_follow_up=[row for row in still if row.resent], still_unknown=still,
        campaign_cancelled=status == Campaign.Status.CANCELLED)


def read(source: Source, *, campaign_id: int, in_doubt: Collection[int]) -> Collector:
    """Read the whole source; EvidenceError if it cannot be taken as evidence."""
    collector = Collector(campaign_id=campaign_id, in_doubt=in_doubt)
    try:
        source.format.parse(lines_of(source.path), collector)
    except EvidenceError as exc:
        raise EvidenceError(f"{source.path}: {exc}") from exc
    if not collector.lines:
        raise EvidenceError(f"{source.path}: there is nothing in it")
    if not collector.recognized:
        raise EvidenceError(f"{source.path}: no line of it is a line of a {source.format.label}")
    return collector


def _retry(campaign_id: int, read: set[int], notes: dict[int, str], *,
           default: str) -> tuple[set[int], bool]:
    """Queue the campaign's unknown rows again with the same key, but those a follow-up took,
    recording a 'retried' verdict for each (one transaction); return those moved, and whether
    the campaign went back to sending. Only rows ``read`` (in doubt when the evidence was read,
    and not shown accepted there): one that became unknown since was not looked for in it."""
    with transaction.atomic():
        _, ids = SendVerdict.objects.lock_retryable(campaign_id=campaign_id)
        ids = [send_id for send_id in ids if send_id in read]
        requeued = Send.objects.retry_unknown(ids) if ids else []
        SendVerdict.objects.record(
            {row.id: f"{notes.get(row.id, default)}\nqueued again with the same key (--retry-rest)"
             for row in requeued},
            verdict="retried", decided_by=DECIDED_BY)
    return {row.id for row in requeued}, any(row.reopened for row in requeued)
