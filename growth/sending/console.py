"""What ``run_sender`` tells the person watching it.

The worker logs its steps in the words of the design (started, built, recovered); this reporter
adds what someone at the terminal wants to know: at start, whether the messages go anywhere at
all; every few seconds, how far each campaign is (from one aggregate over the campaigns' rows,
never per batch: with several workers it is the campaign's progress, not this worker's); when a
campaign stops being sendable under the worker (paused, cancelled, finished by another worker)
or comes back; when the worker has nothing to do and when it wakes; and a summary when a campaign
finishes. Every line goes through logging, with its figures as extras for ``LOG_FORMAT=json``.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from django.conf import settings
from django.core.mail.backends import console, dummy, filebased, locmem

from growth.models import Campaign, Send
from growth.sending.transports import BaseTransport
from growth.sending.transports.null import NullTransport

logger = logging.getLogger(__name__)

PROGRESS_EVERY = 5.0  # seconds between two looks at the campaigns' progress
# A look counts every row of the campaigns it shows, on the worker's loop: at 10,000,000 rows
# that is a second or more, so looks are spaced to take at most this share of the loop's time.
PROGRESS_SHARE = 0.05
NAME_SHOWN = 60  # characters of a campaign's name in a line

_TO_GO = (Send.Status.QUEUED, Send.Status.SENDING)
_SHOWN_IF_ANY = (Send.Status.FAILED, Send.Status.SUPPRESSED, Send.Status.UNKNOWN,
                 Send.Status.CANCELLED)
_SUMMED = (Send.Status.SENT, Send.Status.FAILED, Send.Status.SUPPRESSED, Send.Status.UNKNOWN)


def local_sink(transport: BaseTransport) -> str | None:
    """Where the transport leaves messages that reach nobody; None when it really sends."""
    if isinstance(transport, NullTransport):
        return "the null transport renders every message and sends none"
    backend = getattr(transport, "backend_class", None)
    if backend is None:
        return None
    if issubclass(backend, filebased.EmailBackend):  # before console: it is one
        path = getattr(settings, "EMAIL_FILE_PATH", "?")
        return f"the email backend (EMAIL_URL=filemail://) writes every message to a file in {path}"
    if issubclass(backend, console.EmailBackend):
        return "the email backend (EMAIL_URL=consolemail://) prints every message to this console"
    if issubclass(backend, locmem.EmailBackend):
        return "the email backend (locmem) keeps every message in this process's memory"
    if issubclass(backend, dummy.EmailBackend):
        return "the email backend (dummy) drops every message"
    return None


@dataclass(frozen=True, slots=True)
class Counts:
    """A campaign's rows by send status."""

    by_status: dict[str, int]

    def __getitem__(self, status: str) -> int:
        return self.by_status.get(status, 0)

    @property
    def total(self) -> int:
        return sum(self.by_status.values())

    @property
    def to_go(self) -> int:
        return sum(self[status] for status in _TO_GO)

    @property
    def done(self) -> int:
        return self.total - self.to_go

    def sent_of_total(self) -> str:
        share = 100 * self[Send.Status.SENT] / self.total if self.total else 0.0
        return f"{self[Send.Status.SENT]:,}/{self.total:,} sent ({share:.1f}%)"

    def extras(self) -> dict[str, int]:
        return {"total": self.total, **{status: self[status] for status in Send.Status.values}}


@dataclass
class _Watched:
    name: str
    paused: bool = False
    counts: Counts | None = None  # as of the last progress line
    read_at: float = 0.0  # when those counts were read (the console's clock)


class Console:
    def __init__(self, *, worker_id: str, every: float = PROGRESS_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.worker_id = worker_id
        self.every = every
        self._clock = clock
        self._watched: dict[int, _Watched] = {}
        self._looked_at = -math.inf
        self._next_look_in = every  # seconds after the last look: ``every``, or more if looks are slow
        self._idle_since: float | None = None

    def started(self, *, transport: BaseTransport, batch_size: int, lease: float,
                idempotent: bool, connections: int = 1) -> None:
        logger.info("worker %s started (batch %d, lease %.0fs, %s receiver, %s, %d connection%s%s)",
                    self.worker_id, batch_size, lease, "idempotent" if idempotent else "plain",
                    transport.label, connections, "" if connections == 1 else "s",
                    "" if transport.waits_on_a_wire else ": it waits on no network",
                    extra={"worker_id": self.worker_id})
        sink = local_sink(transport)
        if sink:
            logger.warning("this is not a real send: %s, and no recipient receives anything. "
                           "Set EMAIL_URL to a mail server (smtp+tls://user:password@host:587) "
                           "or EMAIL_BACKEND to an ESP's to send for real", sink,
                           extra={"worker_id": self.worker_id})

    def sending(self, campaign_ids: Sequence[int]) -> None:
        """The campaigns the worker may claim from now: note those it sees for the first time,
        those back from a pause, and those no longer sending (asking the database why)."""
        if campaign_ids:
            self._wake()
        now = set(campaign_ids)
        new = [c for c in campaign_ids if c not in self._watched]
        back = [c for c in campaign_ids if c in self._watched and self._watched[c].paused]
        gone = [c for c, w in self._watched.items() if not w.paused and c not in now]
        if not (new or back or gone):
            return  # the usual case: nothing to ask the database
        facts = _facts([*new, *back, *gone])
        counts = _counts([*back, *gone])
        for campaign_id in new:
            self._watched[campaign_id] = _Watched(_name(facts.get(campaign_id)))
        for campaign_id in back:
            watched = self._watched[campaign_id]
            watched.paused, watched.counts = False, None  # no rate across the pause
            logger.info("campaign %s “%s” resumed: %s to go", campaign_id, watched.name,
                        f"{counts[campaign_id].to_go:,}", extra=self._extra(campaign_id))
        for campaign_id in gone:
            self._gone(campaign_id, facts.get(campaign_id), counts[campaign_id])

    def progress(self) -> None:
        """Every ``every`` seconds (and at once for a campaign seen for the first time), one
        line per sending campaign whose figures changed: sent/total, %, rate and ETA."""
        now = self._clock()
        sending = {c: w for c, w in self._watched.items() if not w.paused}
        first_look = any(w.counts is None for w in sending.values())
        if not sending or (now - self._looked_at < self._next_look_in and not first_look):
            return
        self._looked_at = now
        counts = _counts(list(sending))
        self._next_look_in = max(self.every, (self._clock() - now) / PROGRESS_SHARE)
        for campaign_id, watched in sending.items():
            current = counts[campaign_id]
            if watched.counts is not None and current == watched.counts:
                continue  # nothing moved: no line, and the next rate spans the whole wait
            rate = None
            if watched.counts is not None and now > watched.read_at:
                rate = (current.done - watched.counts.done) / (now - watched.read_at)
            watched.counts, watched.read_at = current, now
            self._progress_line(campaign_id, watched.name, current, rate)

    def finished(self, campaign_ids: Iterable[int]) -> None:
        """A summary line for each campaign this worker moved to 'sent'."""
        campaign_ids = list(campaign_ids)
        if not campaign_ids:
            return
        facts = _facts(campaign_ids)
        counts = _counts(campaign_ids)
        for campaign_id in campaign_ids:
            self._watched.pop(campaign_id, None)
            self._summary(campaign_id, facts.get(campaign_id), counts[campaign_id], "finished")

    def outlook(self, *, busy: bool, wait: float, stopping: bool) -> None:
        """Note when the worker runs out of work (once), and when it has some again."""
        if busy:
            self._wake()
            return
        if self._idle_since is not None:
            return
        self._idle_since = self._clock()
        if stopping:
            logger.info("idle: no campaign is sending or due (--until-idle: stopping)",
                        extra={"worker_id": self.worker_id})
        else:
            logger.info("idle: no campaign is sending or due; looking again in %s",
                        _duration(wait), extra={"worker_id": self.worker_id})

    # --- the lines ---------------------------------------------------------------------------

    def _wake(self) -> None:
        if self._idle_since is None:
            return
        idle_for, self._idle_since = self._clock() - self._idle_since, None
        logger.info("awake after %s idle: a campaign is sending or due", _duration(idle_for),
                    extra={"worker_id": self.worker_id})

    def _gone(self, campaign_id: int, facts: dict | None, counts: Counts) -> None:
        status = facts["status"] if facts else None
        watched = self._watched[campaign_id]
        if status == Campaign.Status.SENDING:
            return  # paused and resumed between two looks: nothing to say
        if status == Campaign.Status.PAUSED:
            watched.paused = True
            reason = f" by the engine: {facts['pause_reason']}" if facts["pause_reason"] else ""
            logger.info("campaign %s “%s” paused%s; %s, %s waiting for a resume", campaign_id,
                        watched.name, reason, counts.sent_of_total(), f"{counts.to_go:,}",
                        extra={**self._extra(campaign_id), **counts.extras()})
            return
        del self._watched[campaign_id]
        if status in (Campaign.Status.CANCELLED, Campaign.Status.SENT):
            word = "cancelled" if status == Campaign.Status.CANCELLED else "finished"
            self._summary(campaign_id, facts, counts, word)

    def _progress_line(self, campaign_id: int, name: str, counts: Counts,
                       rate: float | None) -> None:
        parts = [counts.sent_of_total()]
        parts += [f"{counts[status]:,} {status}" for status in _SHOWN_IF_ANY if counts[status]]
        parts.append(f"{counts.to_go:,} to go")
        eta = None
        if rate is not None:
            parts.append(f"{_rate(rate)}/s")
            if rate > 0 and counts.to_go:
                eta = counts.to_go / rate
                parts.append(f"ETA {_duration(eta)}")
        logger.info("campaign %s “%s”: %s", campaign_id, name, ", ".join(parts),
                    extra={**self._extra(campaign_id), **counts.extras(),
                           "rate_per_second": rate, "eta_seconds": eta})

    def _summary(self, campaign_id: int, facts: dict | None, counts: Counts, word: str) -> None:
        name = _name(facts)
        parts = [f"{counts[status]:,} {status}" for status in _SUMMED]
        parts += [f"{counts[status]:,} {status}" for status in (*_TO_GO, Send.Status.CANCELLED)
                  if counts[status]]
        took, rate = "", None
        if facts and facts["started_at"] and facts["finished_at"]:
            seconds = (facts["finished_at"] - facts["started_at"]).total_seconds()
            rate = counts[Send.Status.SENT] / max(seconds, 1e-3)
            took = f"; took {_duration(seconds)}, {_rate(rate)} sent/s on average"
        logger.info("campaign %s “%s” %s: %s recipients: %s%s", campaign_id, name, word,
                    f"{counts.total:,}", ", ".join(parts), took,
                    extra={**self._extra(campaign_id), **counts.extras(),
                           "average_rate_per_second": rate})

    def _extra(self, campaign_id: int) -> dict[str, object]:
        return {"campaign_id": campaign_id, "worker_id": self.worker_id}


def _facts(campaign_ids: list[int]) -> dict[int, dict]:
    rows = Campaign.objects.filter(id__in=campaign_ids).values(
        "id", "name", "status", "pause_reason", "started_at", "finished_at")
    return {row["id"]: row for row in rows}


def _counts(campaign_ids: list[int]) -> dict[int, Counts]:
    found = Campaign.objects.progress(campaign_ids) if campaign_ids else {}
    return {campaign_id: Counts(found.get(campaign_id, {})) for campaign_id in campaign_ids}


_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def on_one_line(text: object, limit: int | None = None) -> str:
    """Text someone else typed (a campaign's name, a DNS record) as an operator's terminal may
    show it: on one line (a line break could forge a line of a report), without a control
    character such as ESC, which the terminal would act on; cut at ``limit`` characters."""
    text = " ".join(_CONTROLS.sub(" ", str(text)).split())
    return text if limit is None or len(text) <= limit else text[:limit - 1] + "…"


def _name(facts: dict | None) -> str:
    """The campaign's name on one line."""
    return on_one_line(facts["name"], NAME_SHOWN) if facts else "?"


def _rate(per_second: float) -> str:
    return f"{per_second:,.1f}" if per_second < 10 else f"{per_second:,.0f}"


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
