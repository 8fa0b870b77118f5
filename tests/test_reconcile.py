"""Settling sends in doubt ('unknown') on evidence: a relay's log or a list of Message-IDs
(``reconcile_unknown``), an ESP's tracking event, and every verdict recorded once.

The relay logs are in tests/fixtures/mta_logs (see its README for who is in which); the rows are
made 'unknown' directly, as a dead worker with a plain receiver leaves them.
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.core.management.color import no_style
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from growth.models import Account, Campaign, FeedbackEvent, Send, SendVerdict, Subscriber, Suppression
from growth.reconcile import exim, message_ids, postfix
from growth.reconcile.evidence import MAX_READ, SAMPLE, Collector, EvidenceError, lines_of
from growth.reconcile.service import Source, read
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory
from tests.helpers import concurrently
from tests.webhook_payloads import ALL, ANYMAIL_SETTINGS, AmazonSES, Mailgun, Postmark, Resend, SendGrid

# anymail 15 still ships SendGrid's webhook, but warns that it no longer supports it
pytestmark = pytest.mark.filterwarnings("ignore::anymail.exceptions.AnymailNotSupportedWarning")

LOGS = Path(__file__).resolve().parent / "fixtures" / "mta_logs"
CAMPAIGN, OTHER_CAMPAIGN = 7301, 7302
ALICE, BOB, CAROL, DAVE, ERIN, FRANK, GRACE, HEIDI = 7401, 7402, 7403, 7404, 7405, 7406, 7407, 7411
ADDRESSES = {ALICE: "alice@example.org", BOB: "bob@example.com", CAROL: "carol@example.net",
             DAVE: "dave@example.com", ERIN: "erin@example.com", FRANK: "frank@example.org",
             GRACE: "grace@example.com", HEIDI: "heidi@example.com"}
IN_DOUBT = {ALICE, BOB, CAROL, DAVE, ERIN}  # of campaign 7301, as the fixtures' README says


@pytest.fixture(autouse=True)
def message_id_domain(settings):
    settings.MESSAGE_ID_DOMAIN = "growth.example.com"  # the fixtures' install


def collect(parse, name: str, in_doubt=IN_DOUBT) -> Collector:
    collector = Collector(campaign_id=CAMPAIGN, in_doubt=in_doubt)
    parse(lines_of(LOGS / name), collector)
    return collector


# --- the formats ------------------------------------------------------------------------------


def test_a_postfix_syslog_log_shows_what_the_relay_accepted_and_refused():
    found = collect(postfix.parse, "postfix-syslog.log")

    assert set(found.accepted) == {ALICE, CAROL}  # carol bounced later: the relay had taken it
    assert set(found.refused) == {DAVE}  # cleanup logged its Message-ID, then a milter refused it
    assert found.not_in_doubt == {FRANK}
    assert found.other_campaigns == {f"campaign:{OTHER_CAMPAIGN}:{HEIDI}"}
    assert found.not_ours == {"CAHk-=wh2x7N3qU1+fTq@mail.gmail.com",
                              "20240310000001.A11F91E0A40@relay.example.net"}
    assert found.lines == 41 and found.recognized == 39  # opendkim and CRON are other programs
    alice = found.sightings[ALICE]
    assert list(alice.handles) == ["3F2A81C0B1D"]
    assert [line.split(": ", 2)[-1][:30] for line in alice.lines] == [
        "message-id=<campaign.7301.7401", "from=<bounces@growth.example.c",  # qmgr: accepted
        "to=<alice@example.org>, relay="]
    assert "status=bounced (host mx.example.net" in found.sightings[CAROL].lines[-1]
    assert found.sightings[DAVE].handles == {"9B0E61E0A35": "refused"}
    assert ERIN not in found.sightings  # only in a resent-message-id header


def test_a_postfix_log_with_rfc3339_stamps_and_long_queue_ids_through_a_content_filter():
    found = collect(postfix.parse, "postfix-rfc3339.log")

    assert set(found.accepted) == {BOB}
    bob = found.sightings[BOB]
    assert list(bob.handles) == ["4bNQK05rZVz1xkF", "4bNQK22xgHz9vq3"]
    assert [line.split(", status=")[-1][:8] for line in bob.lines if ", status=" in line] == [
        "sent (25", "deferred", "sent (25"]
    assert set(bob.handles.values()) == {"queued"}  # qmgr took both copies
    assert bob.lines[0].startswith("2024-03-05T10:15:06.418802+01:00 relay postfix/cleanup[2202]")
    assert found.not_ours == {"9a0c3f51-77e2-4c1a-bb1e-5b2f0d1c0e64@mail.example.org"}
    evidence = bob.evidence("Postfix log postfix-rfc3339.log", "queue id")
    assert evidence.splitlines()[0] == ("Postfix log postfix-rfc3339.log, queue id 4bNQK05rZVz1xkF, "
                                        "4bNQK22xgHz9vq3:")


def test_an_exim_main_log_with_6_6_2_message_ids():
    found = collect(exim.parse, "exim-4.96-mainlog")

    assert set(found.accepted) == {ALICE, CAROL}
    assert list(found.sightings[CAROL].handles) == ["1rhPqS-0004Ac-3d"]
    assert found.sightings[CAROL].lines[-1].split()[3] == "**"  # the failure, kept as evidence
    assert found.sightings[ALICE].lines[-1].split()[3] == "=>"
    # dave was rejected after DATA (no arrival line); erin's id is only in a subject
    assert not found.refused and DAVE not in found.sightings and ERIN not in found.sightings
    assert found.other_campaigns == {f"campaign:{OTHER_CAMPAIGN}:{HEIDI}"}
    assert "E1rhPqU-0004Ae-5f@relay.example.net" in found.not_ours  # Exim's own bounce
    assert found.recognized == found.lines == 21


def test_an_exim_main_log_with_4_97_message_ids_milliseconds_zone_and_pid():
    found = collect(exim.parse, "exim-4.98-mainlog")

    assert set(found.accepted) == {BOB}
    bob = found.sightings[BOB]
    assert list(bob.handles) == ["1tAqZr-00000000Ab3-0Wbk"]
    assert [line.split()[5] for line in bob.lines] == ["<=", "==", "=>"]
    assert found.not_in_doubt == {FRANK}
    assert found.not_ours == {"20241112080243.3bf1e2@crm.tenant.example"}
    assert found.recognized == found.lines == 12


@pytest.mark.parametrize(("parse", "lines"), [
    (postfix.parse, [  # Postfix's own maillog_file (postlogd): the day padded with a zero
        "Mar 05 10:15:01 relay postfix/cleanup[2102]: 3F2A81C0B1D: "
        "message-id=<campaign.7301.7401@growth.example.com>",
        "Mar 05 10:15:01 relay postfix/qmgr[1480]: 3F2A81C0B1D: from=<bounces@growth.example.com>, "
        "size=2811, nrcpt=1 (queue active)",
        "Mar 05 10:15:02 relay postfix/smtp[2104]: 3F2A81C0B1D: to=<alice@example.org>, "
        "relay=mx1.example.org[198.51.100.7]:25, delay=0.9, delays=0/0/0.4/0.5, dsn=2.0.0, "
        "status=sent (250 2.0.0 Ok)"]),
    (exim.parse, [  # Exim's main log written through syslog
        "Mar  5 10:15:01 relay exim[3310]: 1rhPqR-0004Ab-2c <= bounces@growth.example.com "
        "H=app1.growth.example.com [192.0.2.10] P=esmtpsa S=2811 id=campaign.7301.7401@growth.example.com",
        "Mar  5 10:15:02 relay exim[3312]: 1rhPqR-0004Ab-2c => alice@example.org R=dnslookup "
        "T=remote_smtp H=mx1.example.org [198.51.100.7] C=\"250 2.0.0 Ok\""]),
], ids=["postlogd", "exim-syslog"])
def test_other_timestamps_of_the_same_formats(parse, lines):
    found = Collector(campaign_id=CAMPAIGN, in_doubt=IN_DOUBT)
    parse(lines, found)

    assert set(found.accepted) == {ALICE}
    assert found.sightings[ALICE].lines == lines


def test_a_plain_list_of_message_ids():
    found = collect(message_ids.parse, "accepted-message-ids.txt")

    assert set(found.accepted) == {ALICE, BOB}  # with and without angle brackets
    assert found.not_in_doubt == {FRANK}
    assert found.other_campaigns == {f"campaign:{OTHER_CAMPAIGN}:{HEIDI}"}
    assert found.not_ours == {"CAHk-=wh2x7N3qU1+fTq@mail.gmail.com"}
    assert found.lines == 5  # the comment and the blank line are not counted
    assert found.sightings[BOB].evidence("Message-ID list x", "") == (
        "Message-ID list x:\ncampaign.7301.7402@growth.example.com")


@pytest.mark.parametrize(("kind", "name"), [
    ("exim-log", "postfix-syslog.log"), ("postfix-log", "exim-4.96-mainlog"),
    ("message-ids", "postfix-rfc3339.log"), ("postfix-log", "accepted-message-ids.txt"),
])
def test_a_file_in_another_format_is_refused(kind, name):
    with pytest.raises(EvidenceError, match=name):
        read(Source(kind, LOGS / name), campaign_id=CAMPAIGN, in_doubt=IN_DOUBT)


def test_a_rotated_log_compressed_with_gzip_is_read_as_it_is(tmp_path):
    rotated = tmp_path / "mail.log.2.gz"
    rotated.write_bytes(gzip.compress((LOGS / "postfix-syslog.log").read_bytes()))

    found = read(Source("postfix-log", rotated), campaign_id=CAMPAIGN, in_doubt=IN_DOUBT)

    assert set(found.accepted) == {ALICE, CAROL}


# --- reconcile_unknown, end to end -----------------------------------------------------------


@dataclass
class Relay:
    """Campaign 7301 finished with five rows in doubt, frank's sent, and grace's in doubt but
    taken by a follow-up campaign; campaign 7302 has heidi's row in doubt."""

    account: Account
    campaign: Campaign
    other: Campaign
    follow_up: Campaign

    def row(self, subscriber_id: int) -> Send:
        return Send.objects.get(subscriber_id=subscriber_id,
                                campaign_id=OTHER_CAMPAIGN if subscriber_id == HEIDI else CAMPAIGN)

    def statuses(self) -> dict[int, str]:
        return dict(Send.objects.values_list("subscriber_id", "status"))


def send_row(campaign: Campaign, subscriber: Subscriber, status: str, **fields) -> Send:
    now = timezone.now()
    doubt = {"attempts": 1, "handed_over_at": now, "last_error": "lease expired after hand-over"}
    return Send.objects.create(
        campaign=campaign, account=campaign.account, subscriber=subscriber, email=subscriber.email,
        email_lower=subscriber.email_lower, status=status,
        **(doubt if status == "unknown" else {"sent_at": now}), **fields)


@pytest.fixture
def relay() -> Relay:
    account = AccountFactory()
    segment = SegmentFactory(account=account)
    people = {sid: Subscriber.objects.create(id=sid, account=account, segment=segment, email=address,
                                             status="confirmed")
              for sid, address in ADDRESSES.items()}
    now = timezone.now()
    campaign, other = (CampaignFactory(id=cid, account=account) for cid in (CAMPAIGN, OTHER_CAMPAIGN))
    # the ids the fixtures name were given by hand: rows created later must not be given them
    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), [Subscriber, Campaign]):
            cursor.execute(statement)
    follow_up = CampaignFactory(account=account)
    Campaign.objects.filter(id__in=[CAMPAIGN, OTHER_CAMPAIGN]).update(
        status="sent", recipients_built_at=now, started_at=now, finished_at=now)
    for sid in IN_DOUBT:
        send_row(campaign, people[sid], "unknown")
    send_row(campaign, people[FRANK], "sent")
    send_row(campaign, people[GRACE], "unknown", resent_in=follow_up)
    send_row(other, people[HEIDI], "unknown")
    return Relay(account, campaign, other, follow_up)


def reconcile(*args: str) -> str:
    out = io.StringIO()
    call_command("reconcile_unknown", *args, stdout=out)
    return out.getvalue()


def verdicts() -> dict[int, list[tuple[str, str]]]:
    found: dict[int, list[tuple[str, str]]] = {}
    for v in SendVerdict.objects.select_related("send").order_by("id"):
        found.setdefault(v.send.subscriber_id, []).append((v.verdict, v.decided_by))
    return found


@pytest.mark.django_db
def test_a_postfix_log_marks_sent_what_the_relay_accepted_with_its_evidence(relay):
    out = reconcile("--campaign", str(CAMPAIGN), "--postfix-log", str(LOGS / "postfix-syslog.log"))

    assert relay.statuses() == {ALICE: "sent", CAROL: "sent", BOB: "unknown", DAVE: "unknown",
                                ERIN: "unknown", FRANK: "sent", GRACE: "unknown", HEIDI: "unknown"}
    by = "reconcile_unknown:postfix-log"
    assert verdicts() == {ALICE: [("sent", by)], CAROL: [("sent", by)]}
    alice = relay.row(ALICE)
    [verdict] = SendVerdict.objects.of_send(alice.id)
    assert verdict.evidence.splitlines()[0] == "Postfix log postfix-syslog.log, queue id 3F2A81C0B1D:"
    assert "status=sent (250 2.0.0 Ok: queued as 4C1D27A0F3)" in verdict.evidence
    assert alice.sent_at is not None and alice.lease_expires_at is None
    assert out.splitlines() == [
        f"Campaign {CAMPAIGN} “{relay.campaign.name}”, Postfix log postfix-syslog.log: 41 lines read.",
        "  2 marked sent: the relay accepted them",
        "  1 refused by the relay: not marked sent",
        "  1 of this campaign's Message-IDs name no send in doubt (already settled): left alone",
        "  1 Message-IDs of other campaigns and 2 not ours: ignored",
        "  33 lines ignored (other programs, other messages)",
        "  1 taken by a follow-up campaign: never retried here",
        "  4 still unknown:",
        "    bob@example.com",
        "    dave@example.com",
        "    erin@example.com",
        "    grace@example.com",
        "--retry-rest queues them again with the same key (but those a follow-up took).",
    ]


@pytest.mark.django_db
def test_running_it_again_changes_nothing_and_records_no_second_verdict(relay):
    args = ("--campaign", str(CAMPAIGN), "--exim-log", str(LOGS / "exim-4.96-mainlog"))
    reconcile(*args)
    first = (relay.statuses(), list(SendVerdict.objects.values_list("id", "send_id", "verdict")))

    out = reconcile(*args)

    assert (relay.statuses(), list(SendVerdict.objects.values_list("id", "send_id", "verdict"))) == first
    assert "  0 marked sent: the relay accepted them" in out
    assert ("  2 of this campaign's Message-IDs name no send in doubt (already settled): left alone"
            in out)  # alice's and carol's, settled by the first run


@pytest.mark.django_db
def test_retry_rest_queues_the_others_again_but_never_a_row_a_follow_up_took(relay):
    out = reconcile("--campaign", str(CAMPAIGN), "--message-ids",
                    str(LOGS / "accepted-message-ids.txt"), "--retry-rest")

    assert relay.statuses() == {ALICE: "sent", BOB: "sent", CAROL: "queued", DAVE: "queued",
                                ERIN: "queued", FRANK: "sent", GRACE: "unknown", HEIDI: "unknown"}
    by = "reconcile_unknown:message-ids"
    retried = [("retried", "reconcile_unknown")]
    assert verdicts() == {ALICE: [("sent", by)], BOB: [("sent", by)], CAROL: retried,
                          DAVE: retried, ERIN: retried}
    carol = relay.row(CAROL)
    assert carol.job_id == f"campaign:{CAMPAIGN}:{CAROL}"  # the same key
    [verdict] = SendVerdict.objects.of_send(carol.id)
    assert "nothing in Message-ID list accepted-message-ids.txt shows" in verdict.evidence
    relay.campaign.refresh_from_db()
    assert relay.campaign.status == "sending"  # so that the worker sends them
    assert "  3 queued again with the same key" in out
    assert "  the campaign had finished, and went back to sending for them" in out
    assert out.endswith("  1 taken by a follow-up campaign: never retried here\n"
                        "  1 still unknown:\n    grace@example.com\n")


@pytest.mark.django_db
def test_the_relays_refusal_is_the_retried_verdicts_evidence(relay):
    reconcile("--campaign", str(CAMPAIGN), "--postfix-log", str(LOGS / "postfix-syslog.log"),
              "--retry-rest")

    [verdict] = SendVerdict.objects.of_send(relay.row(DAVE).id)
    assert verdict.verdict == "retried"
    assert "milter-reject: END-OF-MESSAGE" in verdict.evidence


@pytest.mark.django_db
def test_a_dry_run_changes_nothing_and_says_what_it_would_do(relay):
    before = relay.statuses()

    out = reconcile("--campaign", str(CAMPAIGN), "--exim-log", str(LOGS / "exim-4.98-mainlog"),
                    "--retry-rest", "--dry-run")

    assert relay.statuses() == before and not SendVerdict.objects.exists()
    relay.campaign.refresh_from_db()
    assert relay.campaign.status == "sent"
    lines = out.splitlines()
    assert lines[0] == "Dry run: nothing was changed."
    assert "  1 would be marked sent: the relay accepted them" in lines
    assert "  4 would be queued again with the same key" in lines  # alice, carol, dave, erin
    assert "  the campaign had finished, and would go back to sending for them" in lines
    assert lines[-2:] == ["  1 still unknown:", "    grace@example.com"]


@pytest.mark.django_db
def test_a_cancelled_campaign_gets_nothing_retried(relay):
    Campaign.objects.filter(id=CAMPAIGN).update(status="cancelled")

    out = reconcile("--campaign", str(CAMPAIGN), "--exim-log", str(LOGS / "exim-4.96-mainlog"),
                    "--retry-rest")

    assert relay.statuses()[ALICE] == "sent"  # the truth is recorded all the same
    assert {relay.statuses()[sid] for sid in (BOB, DAVE, ERIN)} == {"unknown"}
    assert "  0 queued again with the same key" in out
    assert "  none is retried: the campaign is cancelled" in out


@pytest.mark.django_db
def test_only_the_campaigns_rows_are_touched_whatever_the_file_names(relay):
    reconcile("--campaign", str(OTHER_CAMPAIGN), "--postfix-log", str(LOGS / "postfix-syslog.log"),
              "--retry-rest")

    statuses = relay.statuses()
    assert statuses.pop(HEIDI) == "sent"
    assert statuses == {ALICE: "unknown", BOB: "unknown", CAROL: "unknown", DAVE: "unknown",
                        ERIN: "unknown", FRANK: "sent", GRACE: "unknown"}
    assert set(verdicts()) == {HEIDI}


@pytest.mark.django_db
def test_an_unknown_campaign_is_an_error(relay):
    with pytest.raises(CommandError, match="No campaign 999999"):
        reconcile("--campaign", "999999", "--postfix-log", str(LOGS / "postfix-syslog.log"))


@pytest.mark.django_db
@pytest.mark.parametrize(("kind", "content", "says"), [
    ("--postfix-log", b"Mar  9 23:59:57 relay postfix/cleanup[1]: \x00\x01\x02\n", "not a text file"),
    ("--postfix-log", json.dumps({"campaign.7301.7401@x": "sent"}).encode(), "no line of it"),
    ("--exim-log", b"", "nothing in it"),
    ("--message-ids", b"<campaign.7301.7401@growth.example.com>\nalice@example.org sent\n",
     "line 2 is not a Message-ID"),
    ("--postfix-log", None, "cannot read it"),
], ids=["binary", "json", "empty", "not-a-list", "missing"])
def test_a_file_that_is_not_evidence_is_an_error_and_changes_nothing(relay, tmp_path, kind,
                                                                      content, says):
    path = tmp_path / "evidence"
    if content is not None:
        path.write_bytes(content)
    before = relay.statuses()

    with pytest.raises(CommandError, match=says) as raised:
        reconcile("--campaign", str(CAMPAIGN), kind, str(path), "--retry-rest")

    assert str(raised.value).endswith("Nothing was changed.")
    assert relay.statuses() == before and not SendVerdict.objects.exists()


@pytest.mark.django_db
def test_beyond_twenty_rows_still_unknown_are_counted_not_listed(relay, tmp_path):
    segment = SegmentFactory(account=relay.account)
    for n in range(21):
        subscriber = Subscriber.objects.create(account=relay.account, segment=segment,
                                               email=f"more{n}@example.com", status="confirmed")
        send_row(relay.campaign, subscriber, "unknown")
    listed = tmp_path / "ids.txt"
    listed.write_text(f"<campaign.{CAMPAIGN}.{ALICE}@growth.example.com>\n")

    out = reconcile("--campaign", str(CAMPAIGN), "--message-ids", str(listed))

    assert "  26 still unknown\n--retry-rest" in out and "more0@example.com" not in out


@pytest.mark.django_db
def test_the_sends_page_shows_its_verdicts(relay, admin_client):
    reconcile("--campaign", str(CAMPAIGN), "--postfix-log", str(LOGS / "postfix-syslog.log"))

    page = admin_client.get(reverse("admin:growth_send_change", args=[relay.row(ALICE).id]))

    body = page.content.decode()
    assert page.status_code == 200
    assert "reconcile_unknown:postfix-log" in body and "delivered (sent)" in body
    assert "queue id 3F2A81C0B1D:<br>" in body
    assert "to=&lt;alice@example.org&gt;" in body  # the evidence is escaped


# --- settling at once, from two places ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_settles_of_the_same_rows_record_one_verdict_each(relay):
    ids = list(Send.objects.filter(status="unknown").values_list("id", flat=True))
    evidence = dict.fromkeys(ids, "both saw it")

    moved = concurrently(4, lambda i: SendVerdict.objects.settle_unknown(
        evidence, verdict="sent" if i % 2 else "failed", decided_by=f"racer {i}"))

    winners = [send_id for ids_moved in moved for send_id in ids_moved]
    assert sorted(winners) == sorted(ids)  # each row moved once, by one of them
    assert sorted(SendVerdict.objects.values_list("send_id", flat=True)) == sorted(ids)
    for verdict in SendVerdict.objects.select_related("send"):
        assert verdict.send.status == verdict.verdict


# --- the ESP path ------------------------------------------------------------------------------


@dataclass
class Mailed:
    send: Send

    def metadata(self) -> dict[str, str]:
        return {"account_id": str(self.send.account_id), "campaign_id": str(self.send.campaign_id),
                "job_id": self.send.job_id}


def delivery(esp, address: str, metadata: dict):
    """A delivery event as each ESP posts it."""
    return {
        Postmark: {"RecordType": "Delivery", "ServerID": 23, "MessageStream": "outbound",
                   "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483", "Recipient": address,
                   "Tag": "welcome-email", "DeliveredAt": "2019-11-05T16:33:54.9070259Z",
                   "Details": "Test delivery webhook details", "Metadata": metadata},
        SendGrid: SendGrid.event(address, metadata, "delivered", "sg-delivered-1",
                                 response="250 OK"),
        Mailgun: Mailgun.signed(Mailgun.event_data(address, metadata, "delivered"),
                                "mg-delivered-1"),
        Resend: Resend.event(address, metadata, "email.delivered"),
        AmazonSES: AmazonSES.notification({
            "eventType": "Delivery", "mail": AmazonSES.mail(address, metadata),
            "delivery": {"timestamp": "2016-10-19T23:21:04.133Z", "processingTimeMillis": 11893,
                         "recipients": [address], "smtpResponse": "250 2.6.0 Message received",
                         "reportingMTA": "mta.example.com"}}, "sns-delivery-1"),
    }[esp]


@pytest.fixture
def mailed(settings) -> Mailed:
    settings.ANYMAIL = dict(ANYMAIL_SETTINGS)
    campaign = CampaignFactory()
    subscriber = Subscriber.objects.create(account=campaign.account,
                                           segment=SegmentFactory(account=campaign.account),
                                           email="Lost@Example.com", status="confirmed")
    return Mailed(send_row(campaign, subscriber, "unknown"))


def status_of(mailed: Mailed) -> str:
    return Send.objects.get(id=mailed.send.id).status


ESPS = pytest.mark.parametrize("esp", ALL, ids=lambda esp: esp.__name__)


@pytest.mark.django_db
@ESPS
def test_a_delivery_event_settles_a_send_in_doubt_sent_once(mailed, esp):
    payload = delivery(esp, "lost@example.com", mailed.metadata())

    assert esp.post(Client(), payload).status_code == 200
    assert esp.post(Client(), payload).status_code == 200  # the ESP posting again

    assert status_of(mailed) == "sent"
    [verdict] = SendVerdict.objects.of_send(mailed.send.id)
    assert (verdict.verdict, verdict.decided_by) == ("sent", f"esp:{esp.name}")
    assert verdict.evidence.startswith(f"{esp.name} delivered event ")
    assert not FeedbackEvent.objects.exists() and not Suppression.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(("esp", "payload"), [
    (Resend, lambda m: Resend.event("lost@example.com", m, "email.sent")),
    (SendGrid, lambda m: SendGrid.event("lost@example.com", m, "processed", "sg-processed-1")),
], ids=["Resend-sent", "SendGrid-processed"])
def test_the_esps_acceptance_settles_a_send_in_doubt_sent(mailed, esp, payload):
    assert esp.post(Client(), payload(mailed.metadata())).status_code == 200

    assert status_of(mailed) == "sent"
    assert SendVerdict.objects.get().decided_by == f"esp:{esp.name}"


@pytest.mark.django_db
@ESPS
def test_a_hard_bounce_settles_a_send_in_doubt_failed_and_still_suppresses(mailed, esp):
    assert esp.post(Client(), esp.hard_bounce("lost@example.com", mailed.metadata())).status_code == 200

    assert status_of(mailed) == "failed"
    [verdict] = SendVerdict.objects.of_send(mailed.send.id)
    assert (verdict.verdict, verdict.decided_by) == ("failed", f"esp:{esp.name}")
    assert verdict.evidence.startswith(f"{esp.name} bounced event ")
    assert FeedbackEvent.objects.get().send_id == mailed.send.id
    assert Suppression.objects.get().reason == "bounced"


@pytest.mark.django_db
def test_a_refusal_settles_a_send_in_doubt_failed_with_the_mta_response(mailed):
    batch = SendGrid.dropped("lost@example.com", mailed.metadata(), "Invalid", "sg-dropped-1")
    assert SendGrid.post(Client(), batch).status_code == 200

    assert status_of(mailed) == "failed"
    assert SendVerdict.objects.get().evidence.startswith("SendGrid rejected event sg-dropped-1")


@pytest.mark.django_db
@pytest.mark.parametrize("status", ["queued", "sent", "failed"])
def test_events_about_a_send_not_in_doubt_settle_nothing(mailed, status):
    Send.objects.filter(id=mailed.send.id).update(status=status, handed_over_at=None)

    Postmark.post(Client(), delivery(Postmark, "lost@example.com", mailed.metadata()))
    Postmark.post(Client(), Postmark.hard_bounce("lost@example.com", mailed.metadata()))

    assert status_of(mailed) == status
    assert not SendVerdict.objects.exists()
    assert FeedbackEvent.objects.get().event_type == "bounced"  # the bounce is feedback as before


@pytest.mark.django_db
def test_a_delivery_settles_a_send_queued_again_in_doubt_sent_but_a_bounce_leaves_it_to_go(mailed):
    """Queued again under its key with its hand-over kept (its worker was lost): a bounce says
    nothing of whether it should go (its suppression stops it at the claim); a delivery says it
    arrived, and it does not go again."""
    Send.objects.filter(id=mailed.send.id).update(status="queued")

    Postmark.post(Client(), Postmark.hard_bounce("lost@example.com", mailed.metadata()))
    assert status_of(mailed) == "queued" and not SendVerdict.objects.exists()
    Postmark.post(Client(), delivery(Postmark, "lost@example.com", mailed.metadata()))
    assert status_of(mailed) == "sent"
    assert SendVerdict.objects.get().decided_by == f"esp:{Postmark.name}"


@pytest.mark.django_db
def test_a_delivery_naming_a_send_with_another_address_settles_nothing(mailed):
    Postmark.post(Client(), delivery(Postmark, "someone.else@example.com", mailed.metadata()))

    assert status_of(mailed) == "unknown" and not SendVerdict.objects.exists()


# --- evidence that only looks like acceptance ---------------------------------------------------

PF = "Mar  9 23:59:{s:02d} relay postfix/{prog}[2102]: 3F2A81C0B1D: {what}"
QUEUED = "from=<bounces@growth.example.com>, size=2811, nrcpt=1 (queue active)"


def ours(subscriber: int, domain: str = "growth.example.com") -> str:
    return f"message-id=<campaign.{CAMPAIGN}.{subscriber}@{domain}>"


def postfix_found(*lines: str) -> Collector:
    found = Collector(campaign_id=CAMPAIGN, in_doubt=IN_DOUBT)
    postfix.parse(lines, found)
    return found


def test_a_message_whose_client_died_during_data_was_not_accepted_by_postfix():
    """cleanup logs the Message-ID while the headers come in, before the end of DATA: a worker
    killed mid-DATA (the very crash that leaves a row in doubt) leaves that line and no qmgr
    'from=': the relay never had the message, and the row was marked sent."""
    found = postfix_found(
        PF.format(s=1, prog="cleanup", what=ours(ALICE)),
        "Mar  9 23:59:31 relay postfix/submission/smtpd[2101]: lost connection after DATA "
        "(1848 bytes) from app1.growth.example.com[192.0.2.10]")
    assert ALICE not in found.accepted and ALICE not in found.refused  # still in doubt
    assert found.sightings[ALICE].handles == {"3F2A81C0B1D": "seen"}


def test_a_postfix_queue_id_used_again_is_another_message():
    """Once a message is removed, Postfix may give its short queue id to a later one."""
    found = postfix_found(
        PF.format(s=1, prog="cleanup", what=ours(ALICE)), PF.format(s=1, prog="qmgr", what=QUEUED),
        PF.format(s=3, prog="qmgr", what="removed"),
        PF.format(s=4, prog="cleanup", what=ours(BOB)), PF.format(s=4, prog="qmgr", what=QUEUED),
        PF.format(s=6, prog="qmgr", what="removed"),
        # a third message, not ours, refused under the same id: nothing to do with alice's
        PF.format(s=7, prog="cleanup", what="message-id=<other-1234@crm.example.net>"),
        PF.format(s=7, prog="cleanup", what="milter-reject: END-OF-MESSAGE from x[1.2.3.4]: spam"))
    assert set(found.accepted) == {ALICE, BOB} and not found.refused


@pytest.mark.parametrize("what", [
    ours(ALICE, domain="staging.other-install.example"),  # another install's, same shape
    f"message-id=20240305.abc@evil.example (<campaign.{CAMPAIGN}.{ALICE}@growth.example.com>)",
])
def test_a_postfix_message_id_that_only_looks_like_ours_is_not_ours(what):
    found = postfix_found(PF.format(s=1, prog="cleanup", what=what),
                          PF.format(s=1, prog="qmgr", what=QUEUED))
    assert not found.sightings and found.counted["not ours"] == 1


def test_an_exim_arrival_is_read_by_its_message_id_field_not_a_quoted_sender():
    line = (f'2024-03-05 10:15:01 1rhPqR-0004Ab-2c <= "x id=campaign.{CAMPAIGN}.{ALICE}@growth'
            '.example.com"@evil.example H=evil.example [203.0.113.9] P=esmtp S=812 '
            'id=20240305.abc@evil.example T="id=campaign.1.2@growth.example.com"')
    found = Collector(campaign_id=CAMPAIGN, in_doubt=IN_DOUBT)
    exim.parse([line], found)
    assert not found.sightings and found.not_ours == {"20240305.abc@evil.example"}


def test_a_message_id_list_saved_with_a_byte_order_mark_loses_no_line(tmp_path):
    path = tmp_path / "ids.txt"
    path.write_bytes(f"\ufeffcampaign.{CAMPAIGN}.{ALICE}@growth.example.com\n"
                     f"<campaign.{CAMPAIGN}.{BOB}@growth.example.com>\n".encode())
    found = read(Source("message-ids", path), campaign_id=CAMPAIGN, in_doubt=IN_DOUBT)
    assert set(found.accepted) == {ALICE, BOB}


def test_a_damaged_gzip_log_is_refused_as_evidence(tmp_path):
    data = bytearray(gzip.compress((LOGS / "postfix-syslog.log").read_bytes()))
    for i in range(20, 60):  # the deflate stream, not the header
        data[i] ^= 0xFF
    path = tmp_path / "mail.log.1.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(EvidenceError, match="cannot read it"):
        read(Source("postfix-log", path), campaign_id=CAMPAIGN, in_doubt=IN_DOUBT)


def test_a_line_longer_than_any_log_line_is_read_in_part_and_the_next_one_whole(tmp_path):
    path = tmp_path / "odd.log"
    path.write_bytes(b"a" * (10 * MAX_READ) + b"\n" + b"next\n")
    assert [len(line) for line in lines_of(path)] == [MAX_READ, 4]


def test_what_is_only_counted_keeps_a_sample_however_long_the_log():
    found = postfix_found(*(f"Mar  9 23:59:57 relay postfix/cleanup[2102]: {n:011X}: "
                            f"message-id=<{n}.someone@crm.example.net>" for n in range(SAMPLE + 500)))
    assert found.counted["not ours"] == SAMPLE + 500 and len(found.not_ours) == SAMPLE


@pytest.mark.django_db
def test_retry_rest_queues_again_only_rows_the_evidence_was_read_for(relay, monkeypatch):
    """Frank's row went into doubt while the file was being read (its lease expired): the file
    shows the relay accepted it, but it was not looked for there, and --retry-rest queued it
    again with "nothing shows the relay accepted it": a second message."""
    from growth.reconcile import service

    Send.objects.filter(subscriber_id=FRANK).update(status="sending", sent_at=None,
                                                    lease_expires_at=timezone.now())
    read_whole = service.read

    def read_while_a_lease_expires(*args, **kwargs):
        found = read_whole(*args, **kwargs)
        Send.objects.filter(subscriber_id=FRANK).update(
            status="unknown", lease_expires_at=None, attempts=1, handed_over_at=timezone.now())
        return found

    monkeypatch.setattr(service, "read", read_while_a_lease_expires)
    reconcile("--campaign", str(CAMPAIGN), "--message-ids", str(LOGS / "accepted-message-ids.txt"),
              "--retry-rest")
    assert relay.statuses()[FRANK] == "unknown"  # for the next reconcile, which will read it


@pytest.mark.django_db
@ESPS
@pytest.mark.parametrize("recipient", ["someone.else@example", "someone.else@[192.0.2.1]",
                                       "Someone Else <someone.else@example.com>"])
def test_an_event_for_a_recipient_that_is_not_the_sends_settles_nothing(mailed, esp, recipient):
    """One that was no address fell back to the send's own: another mailbox's delivery
    settled ours."""
    assert esp.post(Client(), delivery(esp, recipient, mailed.metadata())).status_code == 200
    assert status_of(mailed) == "unknown" and not SendVerdict.objects.exists()


@pytest.mark.django_db
def test_an_event_naming_the_recipient_with_a_display_name_settles_as_its_address(mailed):
    payload = delivery(Postmark, "Lost One <LOST@example.com>", mailed.metadata())
    assert Postmark.post(Client(), payload).status_code == 200
    assert status_of(mailed) == "sent"


@pytest.mark.django_db
def test_a_bounce_for_a_recipient_that_is_no_address_suppresses_nothing(mailed):
    payload = Postmark.hard_bounce("someone.else@example", mailed.metadata())
    assert Postmark.post(Client(), payload).status_code == 200
    assert status_of(mailed) == "unknown" and not Suppression.objects.exists()


@pytest.mark.django_db
def test_an_event_id_with_a_nul_is_recorded_not_dropped(mailed):
    batch = SendGrid.hard_bounce("lost@example.com", mailed.metadata(), event_id="sg-\x00-1")
    assert SendGrid.post(Client(), batch).status_code == 200
    assert FeedbackEvent.objects.get().event_id == "sg--1"
    assert Suppression.objects.filter(email_lower="lost@example.com").exists()


@pytest.mark.django_db(transaction=True)
def test_an_export_never_shows_a_state_that_never_existed(relay, monkeypatch):
    """One settle moves alice and erin together; an export whose pages were each their own
    statement, read across its commit, showed alice in doubt and erin sent."""
    from growth.management.commands import export_sends

    ids = list(Send.objects.filter(campaign_id=CAMPAIGN, subscriber_id__in=[ALICE, ERIN])
               .values_list("id", flat=True))
    read_pages = export_sends._Counter.pages

    def a_settle_after_the_first_page(self, pages):
        for number, page in enumerate(read_pages(self, pages)):
            yield page
            if number == 0:  # another connection settles both at once
                concurrently(1, lambda i: SendVerdict.objects.settle_unknown(
                    dict.fromkeys(ids, "seen"), verdict="sent", decided_by="racer"))

    monkeypatch.setattr(export_sends._Counter, "pages", a_settle_after_the_first_page)
    out = io.StringIO()
    call_command("export_sends", "--campaign", str(CAMPAIGN), "--format", "jsonl",
                 "--page-size", "1", stdout=out, stderr=io.StringIO())
    exported = {row["email"]: row["status"] for row in map(json.loads, out.getvalue().splitlines())}
    assert exported["alice@example.org"] == exported["erin@example.com"] == "unknown"
    assert relay.statuses()[ERIN] == "sent"  # the settle went through, after the snapshot


@pytest.mark.django_db
def test_the_reconcile_report_shows_a_campaigns_name_on_one_line_without_controls(tmp_path):
    from tests.scenarios import make_unknown, sending_campaign

    forged = "Spring\x1b]0;owned\x07\x1b[2J\n  1000 marked sent: the relay accepted them"
    campaign = sending_campaign(count=2, name=forged)
    make_unknown(1)
    ids = tmp_path / "ids.txt"
    ids.write_text("<nothing.of.ours@example.net>\n")
    out = io.StringIO()
    call_command("reconcile_unknown", "--campaign", str(campaign.id), "--message-ids", str(ids),
                 "--dry-run", stdout=out)
    text = out.getvalue()
    assert "\x1b" not in text and "\x07" not in text
    assert not any(line.startswith("  1000 marked sent") for line in text.splitlines())
