"""A follow-up ("resend to the rest") retries a recipient the original did not reach at the
subscriber's CURRENT address: an operator who corrected a typo in the admin wants the follow-up to
go to the corrected address, with the same suppression check, the same one-row-per-address rule
and never to an address the chain has already mailed."""

from __future__ import annotations

import pytest
from django.utils import timezone

from growth.models import Campaign, Send, Subscriber, Suppression
from growth.operations.campaigns import resume_campaign
from growth.operations.follow_ups import create_follow_up, resend_audience
from tests.factories import SegmentFactory, SubscriberFactory
from tests.test_follow_ups import addresses, build, paused_with


def edit_address(row: Send, email: str, *, other_segment: bool = False) -> Subscriber:
    """The row's subscriber's address corrected, as the admin's change form saves it
    (``other_segment``: moved to a segment of its own too, where another subscriber row of its
    segment has that address: one address per segment)."""
    subscriber = Subscriber.objects.get(id=row.subscriber_id)
    subscriber.email = email
    if other_segment:
        subscriber.segment = SegmentFactory(account=subscriber.account)
    subscriber.save(update_fields=["email", "email_lower", "segment"])
    return subscriber


def total(original: Campaign, **options) -> int:
    return resend_audience(original).total(include_unknown=options.get("include_unknown", False),
                                           include_new_subscribers=options.get(
                                               "include_new_subscribers", False))


@pytest.mark.django_db
class TestCorrectedAddress:
    def test_a_failed_recipient_is_retried_at_its_corrected_address(self):
        original, _ = paused_with(["sent", "failed"])
        failed = Send.objects.get(campaign=original, status="failed")
        subscriber = edit_address(failed, "Fixed@Example.com")
        counted = total(original)
        follow_up = create_follow_up(campaign_id=original.id)
        assert build(follow_up) == counted == 1
        row = Send.objects.get(campaign=follow_up)
        assert (row.subscriber_id, row.email, row.email_lower) == (
            subscriber.id, subscriber.email, subscriber.email_lower)
        assert failed.email_lower not in addresses(follow_up)
        # and that is where the follow-up's claim sends it
        claimed = Send.objects.claim(worker_id="w", batch_size=10, lease=60,
                                     campaign_id=follow_up.id)
        assert [c.email for c in claimed] == [subscriber.email]

    def test_a_typo_that_bounced_and_was_suppressed_does_not_block_the_corrected_address(self):
        """A hard bounce of the typo suppresses the typo (suppress_bounced); the corrected
        address is not suppressed and must get the follow-up."""
        original, _ = paused_with(["sent", "failed"])
        failed = Send.objects.get(campaign=original, status="failed")
        Suppression.objects.create(account=original.account, email_lower=failed.email_lower)
        subscriber = edit_address(failed, "fixed@example.com")
        counted = resend_audience(original)
        assert counted.blocked == 0
        follow_up = create_follow_up(campaign_id=original.id)
        assert build(follow_up) == counted.total(include_unknown=False,
                                                 include_new_subscribers=False) == 1
        assert addresses(follow_up) == {subscriber.email_lower}

    def test_a_corrected_address_that_is_suppressed_is_not_mailed(self):
        original, _ = paused_with(["sent", "failed"])
        failed = Send.objects.get(campaign=original, status="failed")
        edit_address(failed, "optedout@example.com")
        Suppression.objects.create(account=original.account, email_lower="optedout@example.com")
        counted = resend_audience(original)
        assert counted.blocked == 1
        follow_up = create_follow_up(campaign_id=original.id)
        assert build(follow_up) == counted.total(include_unknown=False,
                                                 include_new_subscribers=False) == 0
        # left to the original, as any blocked row: a later follow-up may take it
        assert Send.objects.get(id=failed.id).resent_in_id is None

    def test_corrected_to_an_address_the_original_sent_to_is_not_mailed_again(self):
        original, _ = paused_with(["sent", "failed"])
        sent = Send.objects.get(campaign=original, status="sent")
        failed = Send.objects.get(campaign=original, status="failed")
        edit_address(failed, sent.email, other_segment=True)
        counted = total(original)
        follow_up = create_follow_up(campaign_id=original.id)
        assert build(follow_up) == counted == 0
        assert addresses(follow_up) == set()

    def test_corrected_to_an_address_an_earlier_campaign_of_the_chain_sent_to(self):
        """The chain: sent by the first campaign, retried (and failed again) by a first
        follow-up, then corrected to the address the first campaign had sent to."""
        original, _ = paused_with(["sent", "failed"])
        sent = Send.objects.get(campaign=original, status="sent")
        first = create_follow_up(campaign_id=original.id)
        assert build(first) == 1
        Send.objects.filter(campaign=first).update(status="failed")
        Campaign.objects.filter(id=first.id).update(status="sent")
        first.refresh_from_db()
        edit_address(Send.objects.get(campaign=first), sent.email, other_segment=True)
        counted = total(first)
        second = create_follow_up(campaign_id=first.id)
        assert build(second) == counted == 0
        assert addresses(second) == set()

    def test_two_recipients_corrected_to_one_address_get_one_message(self):
        original, _ = paused_with(["failed", "failed", "failed"])
        a, b, c = Send.objects.filter(campaign=original).order_by("id")
        edit_address(a, b.email, other_segment=True)
        follow_up = create_follow_up(campaign_id=original.id)
        assert build(follow_up) == 2
        assert addresses(follow_up) == {b.email_lower, c.email_lower}
        # neither row of that address is left for another follow-up to mail again
        assert build(create_follow_up(campaign_id=original.id)) == 0

    def test_corrected_to_the_address_of_a_newcomer_is_mailed_once(self):
        original, _ = paused_with(["sent", "failed"])
        failed = Send.objects.get(campaign=original, status="failed")
        edit_address(failed, "b@example.com")
        SubscriberFactory(segment=SegmentFactory(account=original.account), email="b@example.com")
        follow_up = create_follow_up(campaign_id=original.id, include_new_subscribers=True)
        assert build(follow_up) == 1
        assert addresses(follow_up) == {"b@example.com"}


def newcomer(original: Campaign, email: str) -> Subscriber:
    """A subscriber who joined the original's audience after its build."""
    return SubscriberFactory(segment=SegmentFactory(account=original.account), email=email)


def onto_another_recipient(original: Campaign, rows: list[Send]) -> None:
    edit_address(rows[0], rows[1].email, other_segment=True)


def both_onto_one_new_address(original: Campaign, rows: list[Send]) -> None:
    for row in rows:
        edit_address(row, "shared@example.com", other_segment=True)


def onto_a_newcomer(original: Campaign, rows: list[Send]) -> None:
    newcomer(original, "newcomer@example.com")
    edit_address(rows[0], "newcomer@example.com")


# the original's rows (in id order) and the edit that makes two of them, or one of them and a
# newcomer, share an address
COLLISIONS = {
    "onto-another-recipient": (["failed", "cancelled"], onto_another_recipient),
    "in-doubt-onto-another-recipient": (["unknown", "failed"], onto_another_recipient),
    "both-onto-one-new-address": (["failed", "queued"], both_onto_one_new_address),
    "onto-a-newcomer": (["failed"], onto_a_newcomer),
    "in-doubt-onto-a-newcomer": (["unknown"], onto_a_newcomer),
}


@pytest.mark.django_db
@pytest.mark.parametrize("new_subscribers", [False, True], ids=["", "new"])
@pytest.mark.parametrize("unknown", [False, True], ids=["", "unknown"])
@pytest.mark.parametrize("collision", COLLISIONS)
def test_the_confirmation_counts_the_rows_the_build_creates_when_addresses_collide(
        collision, unknown, new_subscribers):
    """One row per address: two recipients taken at one address now, or one at a newcomer's,
    are one message, on the confirmation page as in the build."""
    statuses, collide = COLLISIONS[collision]
    original, _ = paused_with(statuses)
    collide(original, list(Send.objects.filter(campaign=original).order_by("id")))
    options = {"include_unknown": unknown, "include_new_subscribers": new_subscribers}
    counted = total(original, **options)
    follow_up = create_follow_up(campaign_id=original.id, **options)
    assert build(follow_up) == counted



def unconfirmed(row: Send) -> Subscriber:
    """The row's subscriber back to pending (asked to confirm its address again, say)."""
    subscriber = Subscriber.objects.get(id=row.subscriber_id)
    subscriber.status = Subscriber.Status.PENDING
    subscriber.save(update_fields=["status"])
    return subscriber


def confirmed_again(subscriber: Subscriber) -> None:
    subscriber.status = Subscriber.Status.CONFIRMED
    subscriber.save(update_fields=["status"])


@pytest.mark.django_db
def test_an_address_a_follow_up_mailed_for_a_corrected_subscriber_is_not_mailed_again():
    """A's row failed and A was unconfirmed when B, corrected to A's address, was mailed there
    by a first follow-up. A confirmed again, a second follow-up of the original must not take
    A's row, whose address is as it was: the chain has mailed it."""
    original, _ = paused_with(["failed", "failed"])
    a, b = Send.objects.filter(campaign=original).order_by("id")
    pending = unconfirmed(a)
    edit_address(b, a.email, other_segment=True)
    first = create_follow_up(campaign_id=original.id)
    assert build(first) == 1 and addresses(first) == {a.email_lower}
    Send.objects.filter(campaign=first).update(status="sent", sent_at=timezone.now())
    confirmed_again(pending)
    counted = resend_audience(original)
    assert counted.blocked == 1
    second = create_follow_up(campaign_id=original.id)
    assert build(second) == counted.total(include_unknown=False,
                                          include_new_subscribers=False) == 0


@pytest.mark.django_db
def test_an_address_still_queued_in_the_original_is_not_taken_for_a_corrected_subscriber():
    """A's row is queued in the paused original and A unconfirmed: the follow-up leaves the row
    there, and a resume sends it once A is confirmed again. B, corrected to A's address, must not
    be mailed there by the follow-up too."""
    original, _ = paused_with(["queued", "failed"])
    a, b = Send.objects.filter(campaign=original).order_by("id")
    pending = unconfirmed(a)
    edit_address(b, a.email, other_segment=True)
    counted = resend_audience(original)
    follow_up = create_follow_up(campaign_id=original.id)
    assert build(follow_up) == counted.total(include_unknown=False,
                                             include_new_subscribers=False) == 0
    confirmed_again(pending)
    resume_campaign(campaign_id=original.id)
    claimed = Send.objects.claim(worker_id="w", batch_size=10, lease=60, campaign_id=original.id)
    assert [c.email for c in claimed] == [a.email]
