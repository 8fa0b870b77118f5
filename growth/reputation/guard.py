"""The reputation guard: a tenant whose bounce or complaint rate reaches the stop threshold has
its sending campaigns paused, with the reason; an operator resumes them knowingly.

**The figures.** Per tenant, over the sends of the last ``REPUTATION_WINDOW_DAYS`` days (7):

- bounce rate = hard bounces ÷ messages that reached a receiving server. Hard bounces are those
  reported back (an ESP's webhook or the bounce mailbox, both recorded as
  ``growth_feedback_events`` that suppressed the address) plus our relay's own permanent refusals
  of an address (5.1.x, 5.2.1: ``growth.feedback.bounces.smtp_hard_bounce``);
- complaint rate = sends complained about ÷ sends delivered (accepted, not bounced since).

A send counts once per kind, whoever reported it (an ESP's webhook and a feedback loop's ARF
report of the same complaint are one complaint). The window is a time window, not "the last N
sends": it is what the tallies serve (each campaign's sent rows per minute, and which of them
were reported bounced or complained about: growth/managers/reputation.sql), and it matches how
the mailbox providers measure (Gmail's Postmaster Tools: per day). Feedback is counted against
the send it is about, as that send stands now, so a complaint that arrives two days after its
message counts as long as that message is in the window, and one that beats the worker's own
record of the send counts against a sent message once the worker records it.

**The thresholds** (percent; settings ``REPUTATION_*``):

- complaints: warn 0.1 %, stop 0.3 % — Gmail's and Yahoo's 2024 bulk-sender rules ("keep spam
  rates below 0.1 %, never reach 0.3 %"), which Outlook.com adopted in 2025;
- bounces: warn 2 %, stop 5 % — the mailbox providers publish no bounce figure; these are our
  choice, from Amazon SES's published ones (it recommends staying under 2 %, puts an account
  under review at 5 % and may pause it at 10 %): a plain-SMTP sender has no ESP in front of it
  to take the first blow, so we stop where SES starts to worry;
- nothing is judged under ``REPUTATION_MIN_SENDS`` (500) messages in the window: three complaints
  about a ten-recipient test are no rate.

**Above warn** the admin shows it (the account's page, the campaign list and pages).
**At or above stop** each sending campaign of that tenant, and only that tenant, is paused with
the reason, by the engine's own ``pause`` compare-and-set (sending -> paused), inside a
transaction that holds the campaign rows it read (``ReputationManager.lock_to_pause``): a
campaign that is resumed, paused or cancelled meanwhile is not touched, and one paused already
is not paused twice.

**Resuming knowingly.** An operator's resume moves the campaign (its ``updated_at``). The guard
pauses a campaign only on evidence newer than that: it pauses when the rate is at or above stop
*and* the newest bounce or complaint of the kind that is over reached us after the campaign last
moved. A campaign just resumed therefore goes on sending until *new* feedback arrives while the
rate is still that high; then it is paused again. The same holds for a campaign that started
after the last bad news (its start and build move it): it is paused at the next bounce or
complaint if the tenant is still over the threshold. No acknowledgement table is needed, and no
read-then-write: the condition is re-checked under the row lock.

**When it runs.** Every ``REPUTATION_CHECK_EVERY`` seconds (30) in each worker's housekeeping
(``GuardSchedule``), and right after a webhook or the bounce mailbox records a hard bounce or a
complaint (``feedback_recorded``, once the recording transaction commits, at most every few
seconds per tenant and process). The worker's pass is the backstop: the feedback path only
brings the pause forward.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction

from growth.managers.reputation import REPUTATION, Figures
from growth.models import Campaign

logger = logging.getLogger("growth.reputation")

OK = "ok"
WARN = "warn"
STOP = "stop"
UNJUDGED = "unjudged"  # fewer sends than REPUTATION_MIN_SENDS in the window
_SEVERITY = {UNJUDGED: 0, OK: 0, WARN: 1, STOP: 2}

REASON_PREFIX = "Reputation guard:"
FEEDBACK_CHECK_EVERY = 5.0  # seconds between a process's checks of one tenant after feedback
_FEEDBACK_KINDS = frozenset({"bounced", "complained"})


@dataclass(frozen=True, slots=True)
class Thresholds:
    window_days: int
    min_sends: int
    bounce_warn: float  # percent
    bounce_stop: float
    complaint_warn: float
    complaint_stop: float

    @classmethod
    def from_settings(cls) -> Thresholds:
        return cls(window_days=max(int(settings.REPUTATION_WINDOW_DAYS), 1),
                   min_sends=max(int(settings.REPUTATION_MIN_SENDS), 1),
                   bounce_warn=float(settings.REPUTATION_BOUNCE_WARN),
                   bounce_stop=float(settings.REPUTATION_BOUNCE_STOP),
                   complaint_warn=float(settings.REPUTATION_COMPLAINT_WARN),
                   complaint_stop=float(settings.REPUTATION_COMPLAINT_STOP))


@dataclass(frozen=True, slots=True)
class Rate:
    kind: str  # "bounce" or "complaint"
    count: int  # hard bounces, or sends complained about
    base: int  # messages that reached a server, or messages delivered
    warn: float  # percent
    stop: float  # percent
    newest_at: datetime | None  # when the newest evidence of this kind reached us
    judged: bool  # enough sends in the window to judge

    @property
    def percent(self) -> float:
        return 100.0 * self.count / self.base if self.base else 0.0

    @property
    def state(self) -> str:
        if not self.judged:
            return UNJUDGED
        if self.count and self.percent >= self.stop:
            return STOP
        if self.count and self.percent >= self.warn:
            return WARN
        return OK

    @property
    def warn_text(self) -> str:
        return f"{self.warn:g}"

    @property
    def stop_text(self) -> str:
        return f"{self.stop:g}"

    @property
    def plural(self) -> str:
        return "hard bounces" if self.kind == "bounce" else "complaints"

    def __str__(self) -> str:
        return f"{self.kind} rate {self.percent:.2f} %"


@dataclass(frozen=True, slots=True)
class Reputation:
    account_id: int
    account_name: str
    sends: int  # messages that reached a receiving server in the window
    window_days: int
    min_sends: int
    bounce: Rate
    complaint: Rate

    @classmethod
    def of(cls, figures: Figures, thresholds: Thresholds) -> Reputation:
        judged = figures.attempts >= thresholds.min_sends
        return cls(
            account_id=figures.account_id, account_name=figures.account_name,
            sends=figures.attempts, window_days=thresholds.window_days,
            min_sends=thresholds.min_sends,
            bounce=Rate("bounce", figures.hard_bounces, figures.attempts, thresholds.bounce_warn,
                        thresholds.bounce_stop, figures.bounced_at, judged),
            complaint=Rate("complaint", figures.complained, figures.delivered,
                           thresholds.complaint_warn, thresholds.complaint_stop,
                           figures.complained_at, judged))

    @property
    def judged(self) -> bool:
        return self.sends >= self.min_sends

    @property
    def rates(self) -> tuple[Rate, Rate]:
        return (self.complaint, self.bounce)

    @property
    def state(self) -> str:
        """The worst of the two rates' states (UNJUDGED under the minimum of sends)."""
        if not self.judged:
            return UNJUDGED
        return max((rate.state for rate in self.rates), key=_SEVERITY.__getitem__)

    @property
    def stopping(self) -> list[Rate]:
        return [rate for rate in self.rates if rate.state == STOP]

    @property
    def over_warning(self) -> list[Rate]:
        """The rates at or above their warning (or stop) threshold."""
        return [rate for rate in self.rates if rate.state in (WARN, STOP)]

    @property
    def warning(self) -> bool:
        return self.state in (WARN, STOP)

    @property
    def evidence_at(self) -> datetime | None:
        """When the newest evidence of a rate over its stop threshold reached us."""
        times = [rate.newest_at for rate in self.stopping if rate.newest_at is not None]
        return max(times) if times else None

    def reason(self) -> str:
        """The pause reason the campaign page shows."""
        over = "; ".join(f"{rate} over the last {self.sends:,} sends ({rate.count:,} {rate.plural}, "
                         f"{self.window_days} days; stop at {rate.stop:g} %)"
                         for rate in self.stopping)
        return (f"{REASON_PREFIX} {over}. Resume knowingly: it is paused again only if new "
                "feedback arrives while the rate is still this high.")


@dataclass(frozen=True, slots=True)
class Paused:
    campaign_id: int
    account_id: int
    reason: str


# --- reading ----------------------------------------------------------------------------------


def reputations(account_ids) -> list[Reputation]:
    """The reputation of each of these tenants (one statement)."""
    thresholds = Thresholds.from_settings()
    return [Reputation.of(figures, thresholds)
            for figures in REPUTATION.figures(account_ids, days=thresholds.window_days)]


def reputation_of(account_id: int) -> Reputation | None:
    found = reputations([account_id])
    return found[0] if found else None


def reputation_warnings(account_ids) -> list[Reputation]:
    """The tenants among these whose rates are at or above a warning threshold: for the admin's
    campaign list (the accounts on the page) and campaign page (its account)."""
    return [reputation for reputation in reputations(account_ids) if reputation.warning]


# --- acting -----------------------------------------------------------------------------------


def check_all() -> list[Paused]:
    """Judge every tenant with a campaign sending now; pause what is over a stop threshold.
    For the worker's housekeeping (``GuardSchedule``): a lost database connection is raised, for
    the worker's reconnection; any other failure is logged and the worker goes on."""
    thresholds = Thresholds.from_settings()
    try:
        figures = REPUTATION.figures_of_sending_tenants(days=thresholds.window_days)
        return _enforce([Reputation.of(f, thresholds) for f in figures])
    except (OperationalError, InterfaceError):
        raise
    except Exception:
        logger.exception("reputation guard: the check failed; nothing paused")
        return []


def check_account(account_id: int) -> list[Paused]:
    """Judge one tenant (after feedback about it); pause what is over a stop threshold."""
    thresholds = Thresholds.from_settings()
    figures = REPUTATION.figures([account_id], days=thresholds.window_days)
    return _enforce([Reputation.of(f, thresholds) for f in figures])


def _enforce(judged: list[Reputation]) -> list[Paused]:
    paused: list[Paused] = []
    for reputation in judged:
        evidence_at = reputation.evidence_at
        if not reputation.judged or evidence_at is None:
            continue
        reason = reputation.reason()
        with transaction.atomic():
            for campaign_id in REPUTATION.lock_to_pause(account_id=reputation.account_id,
                                                        evidence_at=evidence_at):
                if Campaign.objects.pause(campaign_id=campaign_id, reason=reason):
                    paused.append(Paused(campaign_id, reputation.account_id, reason))
                    logger.warning("campaign %s paused by the reputation guard: %s", campaign_id,
                                   reason, extra={"campaign_id": campaign_id,
                                                  "account_id": reputation.account_id})
    return paused


class GuardSchedule:
    """``check_all`` at most every ``every`` seconds (REPUTATION_CHECK_EVERY): for the worker's
    housekeeping, which runs every cycle when idle and every second while batches are full."""

    def __init__(self, every: float | None = None) -> None:
        self.every = float(settings.REPUTATION_CHECK_EVERY if every is None else every)
        self._at: float | None = None

    def run_if_due(self) -> list[Paused]:
        now = time.monotonic()
        if self._at is not None and now - self._at < self.every:
            return []
        self._at = now
        return check_all()


# --- the feedback path ------------------------------------------------------------------------

_checked_at: dict[int, float] = {}
_checked_lock = threading.Lock()


def feedback_recorded(*, account_id: int, event_type: str) -> None:
    """A hard bounce or a complaint about this tenant's mail was just recorded (in the current
    transaction, if any): judge the tenant once it commits. Cheap for the caller: nothing runs
    before the commit, at most one check per tenant every FEEDBACK_CHECK_EVERY seconds per
    process, and a failure is logged, never raised (the worker's pass is the backstop)."""
    if event_type not in _FEEDBACK_KINDS:
        return
    transaction.on_commit(partial(_check_after_feedback, account_id))


def _check_after_feedback(account_id: int) -> None:
    now = time.monotonic()
    with _checked_lock:
        last = _checked_at.get(account_id)
        if last is not None and now - last < FEEDBACK_CHECK_EVERY:
            return
        _checked_at[account_id] = now
    try:
        check_account(account_id)
    except Exception:
        logger.exception("reputation guard: the check after feedback failed (the worker's next "
                         "pass judges the tenant)", extra={"account_id": account_id})


def forget_feedback_checks() -> None:
    """Forget when tenants were last checked after feedback (tests)."""
    with _checked_lock:
        _checked_at.clear()
