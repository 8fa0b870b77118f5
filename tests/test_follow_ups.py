"""Resend to the rest: a follow-up's audience is what its original did not deliver, decided in
the database at build time, never an address the original (or another follow-up) sent to."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from growth.models import Campaign, Send, SendLease, Subscriber, Suppression
from growth.operations.campaigns import (
    TransitionRefused,
    approve_campaign,
    cancel_campaign,
    pause_campaign,
    resume_campaign,
)
from growth.operations.follow_ups import clone_campaign, create_follow_up, resend_audience
from tests.factories import SegmentFactory, SubscriberFactory
from tests.helpers import concurrently, manage, subprocess_env
from tests.scenarios import audience, sending_campaign, statuses

TAKEABLE = {"failed", "cancelled", "queued"}


def set_statuses(campaign: Campaign, wanted: list[str]) -> dict[str, str]:
    """Give the campaign's rows (in id order) these statuses; return {address: status}."""
    rows = list(Send.objects.filter(campaign=campaign).order_by("id"))
    assert len(rows) == len(wanted)
    for row, status in zip(rows, wanted, strict=True):
        sent_at = timezone.now() if status == "sent" else None
        Send.objects.filter(id=row.id).update(status=status, sent_at=sent_at)
    return {row.email_lower: status for row, status in zip(rows, wanted, strict=True)}


def paused_with(wanted: list[str]) -> tuple[Campaign, dict[str, str]]:
    campaign = sending_campaign(count=len(wanted))
    pause_campaign(campaign_id=campaign.id)
    return campaign, set_statuses(campaign, wanted)


def build(follow_up: Campaign) -> int:
    """Approve the draft, start it and build it as the worker would; return rows created."""
    Campaign.objects.filter(id=follow_up.id).update(
        scheduled_for=timezone.now() - timezone.timedelta(minutes=1))
    approve_campaign(campaign_id=follow_up.id)
    assert follow_up.id in Campaign.objects.start_due()
    return Send.objects.build_recipients(campaign_id=follow_up.id)


def addresses(campaign: Campaign) -> set[str]:
    return set(Send.objects.filter(campaign=campaign).values_list("email_lower", flat=True))


def of_status(ledger: dict[str, str], *wanted: str) -> set[str]:
    return {address for address, status in ledger.items() if status in wanted}


@pytest.mark.django_db
class TestAudience:
    def test_takes_what_was_not_delivered_and_never_a_sent_address(self):
        original, ledger = paused_with(["sent", "sent", "failed", "cancelled", "queued", "unknown",
                                        "suppressed", "failed"])
        follow_up = create_follow_up(campaign_id=original.id)
        assert build(follow_up) == 4
        assert addresses(follow_up) == of_status(ledger, *TAKEABLE)
        # in the original, the queued row is cancelled (it will never be sent there) and every
        # taken row names the follow-up; the unknown one was not taken (not asked for)
        rows = {r.email_lower: r for r in Send.objects.filter(campaign=original)}
        taken = {a for a, r in rows.items() if r.resent_in_id == follow_up.id}
        assert taken == of_status(ledger, *TAKEABLE)
        assert rows[next(iter(of_status(ledger, "queued")))].status == "cancelled"
        assert statuses(original) == {"sent": 2, "failed": 2, "cancelled": 2, "unknown": 1,
                                      "suppressed": 1}
        # new job ids: the follow-up's own, the same subscribers
        assert {r.job_id.split(":")[1] for r in Send.objects.filter(campaign=follow_up)} == {
            str(follow_up.id)}

    def test_unknown_only_when_asked(self):
        original, ledger = paused_with(["sent", "unknown", "failed"])
        follow_up = create_follow_up(campaign_id=original.id, include_unknown=True)
        assert build(follow_up) == 2
        assert addresses(follow_up) == of_status(ledger, "unknown", "failed")

    def test_opted_out_and_unconfirmed_are_not_taken(self):
        original, ledger = paused_with(["failed", "failed", "queued", "sent"])
        opted_out, unconfirmed, queued = sorted(of_status(ledger, "failed", "queued"))
        Suppression.objects.create(account=original.account, email_lower=opted_out)
        Subscriber.objects.filter(email_lower=unconfirmed).update(status="unsubscribed")
        follow_up = create_follow_up(campaign_id=original.id)
        counted = resend_audience(original)
        assert counted.blocked == 2 and counted.total(include_unknown=False,
                                                      include_new_subscribers=False) == 1
        assert build(follow_up) == 1
        assert addresses(follow_up) == {queued}
        # a blocked row stays the original's: a later follow-up may take it once it is mailable
        assert Send.objects.filter(campaign=original, resent_in__isnull=False).count() == 1

    def test_new_subscribers_are_those_no_campaign_of_the_chain_has(self):
        original, ledger = paused_with(["sent", "failed"])
        segment = Subscriber.objects.filter(account=original.account).first().segment
        newcomer = SubscriberFactory(segment=segment, email="newcomer@example.com")
        # the same address in another segment, and a sent address under a new subscriber row
        SubscriberFactory(segment=SegmentFactory(account=original.account), email="NewComer@example.com")
        SubscriberFactory(segment=SegmentFactory(account=original.account),
                          email=next(iter(of_status(ledger, "sent"))))
        counted = resend_audience(original)
        assert counted.new_subscribers == 1
        follow_up = create_follow_up(campaign_id=original.id, include_new_subscribers=True)
        assert build(follow_up) == 2
        assert addresses(follow_up) == of_status(ledger, "failed") | {newcomer.email_lower}
        # a second follow-up of the same original finds nobody left: taken, or in the chain
        second = create_follow_up(campaign_id=original.id, include_new_subscribers=True)
        assert build(second) == 0

    @staticmethod
    def _edit_address(row: Send, email: str) -> Subscriber:
        """The row's subscriber's address edited, as the admin's change form saves it."""
        subscriber = Subscriber.objects.get(id=row.subscriber_id)
        subscriber.email = email
        subscriber.save(update_fields=["email", "email_lower", "segment"])
        return subscriber

    def test_a_subscriber_whose_address_was_edited_is_not_new(self):
        """Mailed the original at its old address, a subscriber is not among "those who joined
        since" at its new one; one whose row failed is retried at its new address (an operator's
        correction of the address that failed), and the count the confirmation page gave is what
        the build adds. (More cases: test_follow_up_corrected_address.py.)"""
        original, _ = paused_with(["sent", "failed"])
        self._edit_address(Send.objects.get(campaign=original, status="sent"), "moved@example.com")
        failed = Send.objects.get(campaign=original, status="failed")
        self._edit_address(failed, "moved-too@example.com")
        counted = resend_audience(original)
        assert counted.new_subscribers == 0
        follow_up = create_follow_up(campaign_id=original.id, include_new_subscribers=True)
        assert build(follow_up) == counted.total(include_unknown=False,
                                                 include_new_subscribers=True) == 1
        assert addresses(follow_up) == {"moved-too@example.com"}

    def test_a_new_subscriber_at_the_address_an_edited_subscriber_is_retried_at_is_not_added(self):
        """The edited subscriber's failed row is retried at its new address, which a newcomer
        has too: one row for the address (DISTINCT ON once picked the edited subscriber for it in
        build_new_subscribers, whose slot its retried row held, and the address went unmailed)."""
        original, _ = paused_with(["sent", "failed"])
        edited = self._edit_address(Send.objects.get(campaign=original, status="failed"),
                                    "b@example.com")
        SubscriberFactory(segment=SegmentFactory(account=original.account), email="b@example.com")
        follow_up = create_follow_up(campaign_id=original.id, include_new_subscribers=True)
        assert build(follow_up) == 1
        assert Send.objects.filter(campaign=follow_up, subscriber=edited,
                                   email_lower="b@example.com").exists()

    def test_a_follow_up_of_a_follow_up_never_reaches_the_first_campaigns_recipients(self):
        original, ledger = paused_with(["sent", "failed", "failed"])
        first = create_follow_up(campaign_id=original.id)
        build(first)
        Send.objects.filter(campaign=first).update(status="failed")
        Campaign.objects.filter(id=first.id).update(status="sent")
        first.refresh_from_db()
        audience(original.account, 2, prefix="late")
        second = create_follow_up(campaign_id=first.id, include_new_subscribers=True)
        assert second.resend_root_id == original.id
        assert build(second) == 4
        assert addresses(second) == of_status(ledger, "failed") | {"late0@example.com",
                                                                  "late1@example.com"}
        assert not addresses(second) & of_status(ledger, "sent")

    def test_only_finished_cancelled_or_paused_built_campaigns(self):
        running = sending_campaign(count=2)
        with pytest.raises(TransitionRefused, match="only a sent, cancelled or paused"):
            create_follow_up(campaign_id=running.id)
        with pytest.raises(TransitionRefused, match="no campaign"):
            create_follow_up(campaign_id=10**12)

    def test_a_clone_is_a_draft_with_the_same_content_for_the_whole_audience(self):
        original, _ = paused_with(["sent", "failed"])
        clone = clone_campaign(campaign_id=original.id)
        assert clone.status == "draft" and clone.resend_of_id is None
        assert (clone.subject, clone.body_text) == (original.subject, original.body_text)
        assert build(clone) == 2

    def test_a_resumed_original_never_sends_what_a_follow_up_took(self):
        from growth.sending.transports.null import NullTransport
        from growth.sending.worker import Worker

        original, ledger = paused_with(["queued", "queued", "sent", "failed"])
        follow_up = create_follow_up(campaign_id=original.id)
        build(follow_up)
        resume_campaign(campaign_id=original.id)
        Worker(worker_id="w", transport=NullTransport(), batch_size=10).cycle()
        assert Send.objects.filter(campaign=original, status="sent").count() == 1
        assert addresses(follow_up) == of_status(ledger, *TAKEABLE)
        assert statuses(follow_up) == {"sent": 3}


STATUSES = ["sent", "failed", "cancelled", "queued", "unknown", "suppressed"]


@pytest.mark.django_db
@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.sampled_from(STATUSES), st.booleans()), min_size=1, max_size=12),
       include_unknown=st.booleans())
def test_the_audience_is_exactly_the_ledgers_undelivered_mailable_rows(rows, include_unknown):
    original, ledger = paused_with([status for status, _ in rows])
    opted_out = {address for (address, (_, out)) in zip(ledger, rows, strict=True) if out}
    for address in opted_out:
        Suppression.objects.create(account=original.account, email_lower=address)
    wanted = TAKEABLE | ({"unknown"} if include_unknown else set())
    expected = of_status(ledger, *wanted) - opted_out
    counted = resend_audience(original).total(include_unknown=include_unknown,
                                              include_new_subscribers=False)
    follow_up = create_follow_up(campaign_id=original.id, include_unknown=include_unknown)
    assert build(follow_up) == counted == len(expected)
    assert addresses(follow_up) == expected
    assert not addresses(follow_up) & of_status(ledger, "sent")
    assert set(Send.objects.filter(campaign=original, resent_in=follow_up)
               .values_list("email_lower", flat=True)) == expected


@pytest.mark.django_db(transaction=True)
class TestConcurrency:
    @pytest.mark.parametrize(("mix", "joined"), [
        (["sent", "failed", "failed", "queued", "cancelled"] * 20, 30),
        # nothing to take: only the chain's lock keeps the two builds from both adding newcomers
        (["sent"] * 5, 3000),
    ], ids=["taken-and-new", "only-new"])
    def test_two_follow_ups_built_at_once_share_no_address(self, mix, joined):
        original, ledger = paused_with(mix)
        audience(original.account, joined, segment=Subscriber.objects.filter(
            account=original.account).first().segment, prefix="joined")
        follow_ups = [create_follow_up(campaign_id=original.id, include_new_subscribers=True)
                      for _ in range(2)]
        for follow_up in follow_ups:
            Campaign.objects.filter(id=follow_up.id).update(
                scheduled_for=timezone.now() - timezone.timedelta(minutes=1))
            approve_campaign(campaign_id=follow_up.id)
        Campaign.objects.start_due()
        built = concurrently(2, lambda i: Send.objects.build_recipients(
            campaign_id=follow_ups[i].id))
        first, second = (addresses(f) for f in follow_ups)
        expected = of_status(ledger, *TAKEABLE) | {f"joined{n}@example.com" for n in range(joined)}
        assert not first & second
        assert first | second == expected
        assert sum(built) == len(expected)

    @pytest.mark.parametrize("late", ["claim", "settle"])
    def test_a_late_claim_or_settle_of_the_original_wins_over_the_build(self, late):
        """The original's row is changed by a transaction still open when the build reads it:
        the build waits for it, sees the row as it is then, and leaves it out."""
        original, _ = paused_with(["queued", "failed", "unknown"])
        queued = Send.objects.get(campaign=original, status="queued")
        unknown = Send.objects.get(campaign=original, status="unknown")
        follow_up = create_follow_up(campaign_id=original.id, include_unknown=True)
        if late == "claim":  # the operator resumed the original after making the follow-up
            resume_campaign(campaign_id=original.id)
        holding, release = threading.Event(), threading.Event()

        def original_worker() -> None:
            try:
                with transaction.atomic():
                    if late == "claim":
                        claimed = Send.objects.claim(worker_id="w", batch_size=10, lease=60)
                        assert [c.id for c in claimed] == [queued.id]
                    else:  # the slow worker that held the unknown row learns it was accepted
                        Send.objects.filter(id=unknown.id).update(claimed_by="slow", attempts=1)
                        from growth.sending.transports.base import Outcome
                        settled = Send.objects.settle(
                            [Outcome(unknown.id, Outcome.SENT, "provider-1")], campaign_id=original.id,
                            worker_id="slow", attempts={unknown.id: 1}, retry_for=3600,
                            backoff_base=1, backoff_max=1)
                        assert settled == {unknown.id: "sent"}
                    holding.set()
                    release.wait(30)
            finally:
                connection.close()

        worker = threading.Thread(target=original_worker)
        worker.start()
        assert holding.wait(30)
        Campaign.objects.filter(id=follow_up.id).update(
            scheduled_for=timezone.now() - timezone.timedelta(minutes=1))
        approve_campaign(campaign_id=follow_up.id)
        Campaign.objects.start_due()
        builder = threading.Thread(target=lambda: (
            Send.objects.build_recipients(campaign_id=follow_up.id), connection.close()))
        builder.start()
        builder.join(1)
        assert builder.is_alive(), "the build should wait for the original's open transaction"
        release.set()
        worker.join(30)
        builder.join(30)
        raced = queued if late == "claim" else unknown
        other = unknown if late == "claim" else queued
        assert raced.email_lower not in addresses(follow_up)
        assert other.email_lower in addresses(follow_up)
        raced.refresh_from_db()
        assert raced.resent_in_id is None
        assert raced.status == ("sending" if late == "claim" else "sent")


CRASHING = str(Path(__file__).with_name("crashing_sender.py"))
OPTIONS = ["--batch-size", "10", "--lease", "1", "--tick", "0.1"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_builder_killed_mid_build_then_rebuilt_sends_the_rest_once(smtp_server):
    original = sending_campaign(count=30)
    rows = list(Send.objects.filter(campaign=original).order_by("id"))
    for row in rows[:6]:  # refused for good, for a policy (a 5.1.1 would suppress the address)
        smtp_server.handler.replies[row.email_lower] = ["550 5.7.1 rejected by policy"]
    env = subprocess_env(EMAIL_URL=smtp_server.url, SENDER_BACKOFF_BASE="0.1")
    done = subprocess.run(manage("run_sender", *OPTIONS, "--until-idle"), env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert statuses(original) == {"sent": 24, "failed": 6}
    sent_before = set(smtp_server.handler.keys())

    follow_up = create_follow_up(campaign_id=original.id)
    Campaign.objects.filter(id=follow_up.id).update(
        scheduled_for=timezone.now() - timezone.timedelta(minutes=1))
    approve_campaign(campaign_id=follow_up.id)
    killed = subprocess.run([sys.executable, CRASHING, "during-build", *OPTIONS, "--once"],
                            env=env, capture_output=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    # the build died with its transaction: nothing taken from the original, nothing built
    assert not Send.objects.filter(campaign=original, resent_in__isnull=False).exists()
    assert not Send.objects.filter(campaign=follow_up).exists()

    deadline = time.monotonic() + 60
    done = subprocess.run(manage("run_sender", *OPTIONS, "--until-idle"), env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert time.monotonic() < deadline
    assert statuses(follow_up) == {"sent": 6}
    keys = smtp_server.handler.keys()
    resent = set(keys) - sent_before
    assert resent == set(Send.objects.filter(campaign=follow_up).values_list("job_id", flat=True))
    assert set(keys.values()) == {1}
    sent_addresses = {a.recipient.lower() for a in smtp_server.handler.accepted}
    assert len(smtp_server.handler.accepted) == len(sent_addresses) == 30  # each address once


@pytest.mark.django_db
def test_an_unknown_row_a_follow_up_took_is_never_retried_in_the_original():
    from growth.operations.unknown_sends import retry_unknown

    original, ledger = paused_with(["unknown", "unknown"])
    follow_up = create_follow_up(campaign_id=original.id, include_unknown=True, name="Again")
    Suppression.objects.create(account=original.account, email_lower=sorted(ledger)[1])
    build(follow_up)
    ids = list(Send.objects.filter(campaign=original).order_by("email_lower").values_list("id", flat=True))
    review = retry_unknown(send_ids=ids)
    # the taken row stays unknown (the follow-up sends it); the opted-out one was not taken: it
    # may be retried, and the claim's opt-out check will stop it
    assert review.changed == 1
    assert review.skipped == {"handed to the follow-up “Again”, which sends it instead": 1}


@pytest.mark.django_db
@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_a_cancel_keeps_the_doubt_of_a_row_queued_again_after_a_lost_worker(protocol):
    """Idempotent receiver: a handed-over row whose worker was lost waits to be retried under the
    same key. A cancel ends that retry; written 'cancelled', the row read as never reached, and a
    follow-up mailed it under the follow-up's own key. It becomes 'unknown' instead (the cancel's
    confirmation page counts it), and the follow-up takes only the row nobody had."""
    from growth.admin.transitions import TRANSITIONS, effect
    from growth.models import SendLease

    original = sending_campaign(count=2, leases=protocol == "leases")
    lost, untouched = Send.objects.filter(campaign=original).order_by("id")
    if protocol == "rows":
        claimed = Send.objects.claim(worker_id="dead", batch_size=1, lease=60, hand_over=True)
        assert [c.id for c in claimed] == [lost.id]
        Send.objects.filter(id=lost.id).update(
            lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
        assert [r.status for r in Send.objects.recover_expired(idempotent=True,
                                                               max_attempts=5)] == ["queued"]
    else:
        (lease,) = SendLease.objects.claim(worker_id="dead", campaign_id=original.id,
                                           batch_size=1, lease=60, hand_over=True)
        assert [r.id for r in lease.rows] == [lost.id]
        SendLease.objects.filter(id=lease.id).update(
            expires_at=timezone.now() - timezone.timedelta(seconds=1))
        assert SendLease.objects.recover(idempotent=True, max_attempts=5).freed == 1
    assert "1 queued recipients will never get it (cancelled); 1 queued again after" in effect(
        TRANSITIONS["cancel"], original)
    cancelled = cancel_campaign(campaign_id=original.id)
    assert (cancelled.dropped, cancelled.in_doubt) == (1, 1)
    assert str(cancelled) == "1 queued recipients dropped; 1 in doubt, now unknown"
    assert Send.objects.get(id=lost.id).status == "unknown"
    assert resend_audience(original).takeable == {"cancelled": 1, "in_doubt": 1}
    follow_up = create_follow_up(campaign_id=original.id)
    assert build(follow_up) == 1
    assert addresses(follow_up) == {untouched.email_lower}


@pytest.mark.django_db
@pytest.mark.parametrize("include_in_doubt", [False, True])
def test_a_row_queued_again_after_a_lost_worker_is_in_doubt(include_in_doubt):
    """Idempotent receiver: a handed-over row whose lease ran out is queued again, to be retried
    with the same key, which the receiver would absorb. A follow-up's key is another: that
    recipient is in doubt. A row the receiver refused (transient) is not."""
    from growth.sending.transports.base import Outcome

    original = sending_campaign(count=3)
    lost, refused, untouched = Send.objects.filter(campaign=original).order_by("id")
    claimed = Send.objects.claim(worker_id="w", batch_size=2, lease=60, hand_over=True)
    assert [c.id for c in claimed] == [lost.id, refused.id]
    Send.objects.settle([Outcome(refused.id, Outcome.TRANSIENT, error="451 later")],
                        campaign_id=original.id, worker_id="w", attempts={refused.id: 1},
                        retry_for=3600, backoff_base=1, backoff_max=1)
    Send.objects.filter(id=lost.id).update(lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
    assert [r.status for r in Send.objects.recover_expired(idempotent=True, max_attempts=5)] == [
        "queued"]
    pause_campaign(campaign_id=original.id)
    counted = resend_audience(original)
    assert counted.takeable == {"queued": 2, "in_doubt": 1}
    follow_up = create_follow_up(campaign_id=original.id, include_unknown=include_in_doubt)
    expected = {refused.email_lower, untouched.email_lower}
    if include_in_doubt:
        expected.add(lost.email_lower)
    assert build(follow_up) == len(expected)
    assert addresses(follow_up) == expected


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_a_message_sent_before_the_transport_raised_is_not_sent_again_by_a_follow_up(
        smtp_settings, settings, protocol):
    """Idempotent receiver: a transport that raises part-way through a batch may have delivered
    some of it. The engine pauses the campaign and gives the rows back, to be sent again under
    their keys; they are in doubt meanwhile, and a follow-up of the paused campaign must not take
    them as never reached (its own key is another)."""
    from collections import Counter

    from growth.sending.transports.django_mail import DjangoMailTransport
    from growth.sending.worker import Worker
    from tests.scenarios import approved_campaign, run_worker

    class OneThenRaise(DjangoMailTransport):
        def send_bulk(self, deliveries):
            super().send_bulk(deliveries[:1])
            raise RuntimeError("the provider's client library broke")

    settings.SENDER_PROTOCOL = protocol
    settings.SENDER_IDEMPOTENT_TRANSPORT = True
    original = approved_campaign(count=4)
    Worker(batch_size=4, tick=0.05, until_idle=True, transport=OneThenRaise(),
           connections=1).run()
    original.refresh_from_db()
    assert original.status == "paused"
    assert len(smtp_settings.handler.accepted) == 1
    assert resend_audience(original).takeable == {"in_doubt": 4}
    follow_up = create_follow_up(campaign_id=original.id)
    assert build(follow_up) == 0
    run_worker()
    assert set(Counter(a.recipient.lower() for a in smtp_settings.handler.accepted).values()) == {1}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("protocol", ["rows", "leases"])
@pytest.mark.parametrize("stop", ["pause", "cancel"])
def test_a_message_whose_answer_was_lost_is_in_doubt_while_it_waits_to_go_again(
        smtp_settings, settings, protocol, stop):
    """Idempotent receiver: the relay had the whole message and its answer never came. It goes
    again under its key; meanwhile it may have arrived, so a follow-up (another key) must not
    take it as never reached, and a cancel leaves it unknown."""
    from tests.scenarios import approved_campaign, run_worker

    settings.SENDER_PROTOCOL = protocol
    settings.SENDER_IDEMPOTENT_TRANSPORT = True
    settings.SENDER_BACKOFF_BASE = settings.SENDER_BACKOFF_MAX = 3600  # not due again in the test
    handler = smtp_settings.handler
    answer = type(handler).handle_DATA

    async def drop_the_answer_to_person0(server, session, envelope):
        if "person0@example.com" in [r.lower() for r in envelope.rcpt_tos]:
            await answer(handler, server, session, envelope)  # it arrived...
            server.transport.abort()  # ...and the answer was lost
            return "421 4.4.2 gone"
        return await answer(handler, server, session, envelope)

    handler.handle_DATA = drop_the_answer_to_person0
    original = approved_campaign(count=3)
    run_worker(connections=1, batch_size=10, once=True, until_idle=False)
    lost = Send.objects.get(campaign=original, email_lower="person0@example.com")
    assert (lost.status, lost.attempts) == ("queued", 1)
    assert resend_audience(original).takeable == {"in_doubt": 1}
    (pause_campaign if stop == "pause" else cancel_campaign)(campaign_id=original.id)
    if stop == "cancel":
        assert Send.objects.get(id=lost.id).status == "unknown"
    follow_up = create_follow_up(campaign_id=original.id)
    assert build(follow_up) == 0
    assert [a.recipient for a in handler.accepted].count("person0@example.com") == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("protocol", ["rows", "leases"])
def test_a_row_in_doubt_whose_retry_was_refused_stays_in_doubt(smtp_settings, settings, protocol):
    """Idempotent receiver: a worker handed a row over and was lost; the retry's relay refused
    our login. That refusal says nothing of the lost attempt: a follow-up must not take the row
    and a cancel leaves it unknown."""
    from tests.scenarios import run_worker

    settings.SENDER_PROTOCOL = protocol
    settings.SENDER_IDEMPOTENT_TRANSPORT = True
    original = sending_campaign(count=3, leases=protocol == "leases")
    if protocol == "rows":
        (lost,) = Send.objects.claim(worker_id="dead", batch_size=1, lease=60, hand_over=True)
        Send.objects.filter(id=lost.id).update(
            lease_expires_at=timezone.now() - timezone.timedelta(seconds=1))
        assert Send.objects.recover_expired(idempotent=True, max_attempts=5)
    else:
        (lease,) = SendLease.objects.claim(worker_id="dead", campaign_id=original.id,
                                           batch_size=1, lease=60, hand_over=True)
        (lost,) = lease.rows
        SendLease.objects.filter(id=lease.id).update(
            expires_at=timezone.now() - timezone.timedelta(seconds=1))
        assert SendLease.objects.recover(idempotent=True, max_attempts=5).freed == 1
    smtp_settings.require_login("growth", "right")
    settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = "growth", "wrong"
    run_worker(batch_size=10)
    original.refresh_from_db()
    assert original.status == "paused"
    assert resend_audience(original).takeable == {"queued": 2, "in_doubt": 1}
    follow_up = create_follow_up(campaign_id=original.id)
    assert build(follow_up) == 2 and lost.email.lower() not in addresses(follow_up)
    cancel_campaign(campaign_id=original.id)
    assert Send.objects.get(id=lost.id).status == "unknown"
