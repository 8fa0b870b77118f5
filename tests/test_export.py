"""Export of who got what: CSV (formulas neutralised) and JSON Lines, read in keyset pages, from
the admin, the tenant UI and ``export_sends``; scoped by tenant."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from growth.audience.address_files import FORMULA_STARTS, spreadsheet_value
from growth.job_ids import message_id
from growth.ledger.export import COLUMNS
from growth.managers.ledger import QUERIES
from growth.models import Campaign, FeedbackEvent, Membership, Send
from tests.factories import AccountFactory, CampaignFactory
from tests.scenarios import member, operator, sending_campaign

pytestmark = pytest.mark.django_db

SENT_AT = datetime(2025, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
HOSTILE = [  # (email, last_error, provider_message_id)
    ("=HYPERLINK(\"http://evil.example\",\"x\")@example.com",
     'timeout, then "550 5.1.1 no such user",\nthen a new line\r\nand CRLF', "=cmd|' /C calc'!A0"),
    ("+1@example.com", "+1", "-2"),
    ("-x@example.com", "@SUM(A1:A9)", "@provider"),
    ("tab@example.com", "\tstarts with a tab", "\rstarts with a CR"),
    ("jöhn.ü@exämple.com", "Zeichen: ü, ß, 😀 and a line separator\u2028here", "id,with,commas"),
    ("plain@example.com", "", ""),
]


def export_csv(campaign: Campaign, *, page_size: int = 5000) -> str:
    out = io.StringIO()
    call_command("export_sends", campaign=campaign.id, format="csv", page_size=page_size,
                 stdout=out, stderr=io.StringIO())
    return out.getvalue()


def export_jsonl(campaign: Campaign, **options) -> list[dict]:
    out = io.StringIO()
    call_command("export_sends", campaign=campaign.id, format="jsonl", stdout=out,
                 stderr=io.StringIO(), **options)
    return [json.loads(line) for line in out.getvalue().split("\n") if line]


def read_csv(text: str) -> list[dict[str, str]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader)
    assert header == COLUMNS
    return [dict(zip(header, row, strict=True)) for row in reader]


def hostile_campaign(account=None) -> Campaign:
    """A campaign whose rows hold every kind of value a spreadsheet or a CSV reader trips on."""
    campaign = sending_campaign(count=len(HOSTILE), **({"account": account} if account else {}))
    rows = Send.objects.filter(campaign=campaign).order_by("id")
    for row, (email, error, provider_id) in zip(rows, HOSTILE, strict=True):
        Send.objects.filter(id=row.id).update(
            email=email, email_lower=email.lower(), last_error=error, provider_message_id=provider_id,
            status="sent" if not error else "failed", attempts=3, sent_at=SENT_AT)
    return campaign


def expected(campaign: Campaign) -> dict[str, dict]:
    """The ledger as the ORM reads it, by address: what every export must say."""
    found = {}
    for row in Send.objects.filter(campaign=campaign):
        found[row.email] = {
            "email": row.email, "status": row.status, "attempts": row.attempts,
            "sent_at": row.sent_at.isoformat() if row.sent_at else None,
            "last_error": row.last_error, "job_id": row.job_id,
            "message_id": message_id(row.job_id), "provider_message_id": row.provider_message_id,
            "resent_in_id": row.resent_in_id}
    return found


def feedback(send: Send, event_type: str, *, at: datetime, mta_response: str = "",
             description: str = "", esp: str = "postmark") -> FeedbackEvent:
    return FeedbackEvent.objects.create(
        esp=esp, event_id=f"{event_type}-{send.id}-{at.timestamp()}", event_type=event_type,
        email_lower=send.email_lower, account_id=send.account_id, campaign_id=send.campaign_id,
        send=send, mta_response=mta_response, description=description, occurred_at=at)


# --- the formats ------------------------------------------------------------------------------

def test_every_field_round_trips_through_pythons_csv_module_hostile_values_included():
    campaign = hostile_campaign()
    rows = read_csv(export_csv(campaign))
    want = expected(campaign)
    assert len(rows) == len(want) == len(HOSTILE)
    for row in rows:
        values = {column: spreadsheet_value(cell) for column, cell in row.items()}
        ours = want[values["email"]]
        for column in ("email", "status", "last_error", "job_id", "message_id",
                       "provider_message_id", "sent_at"):
            assert values[column] == (ours[column] or ""), column
        assert int(values["attempts"]) == 3
        assert values["resent_in_id"] == "" and values["feedback"] == "" and values["feedback_at"] == ""
        assert datetime.fromisoformat(values["sent_at"]) == SENT_AT


def test_csv_cells_that_a_spreadsheet_would_run_start_with_a_quote_and_nothing_else_changes():
    campaign = hostile_campaign()
    cells = [cell for row in read_csv(export_csv(campaign)) for cell in row.values()]
    originals = {value for entry in HOSTILE for value in entry}
    for cell in cells:
        assert not cell.startswith(FORMULA_STARTS), cell
    neutralised = {cell for cell in cells if cell.startswith("'")}
    assert neutralised == {"'" + value for value in originals if value.startswith(FORMULA_STARTS)}
    assert len(neutralised) == 10
    assert "jöhn.ü@exämple.com" in cells and "id,with,commas" in cells  # as they were


def test_jsonl_parses_line_by_line_with_raw_values_and_iso_times():
    campaign = hostile_campaign()
    Send.objects.filter(campaign=campaign, email="plain@example.com").update(
        status="queued", attempts=0, sent_at=None)
    lines = export_jsonl(campaign)
    want = expected(campaign)
    assert len(lines) == len(HOSTILE)
    for line in lines:
        assert list(line) == COLUMNS
        ours = want[line["email"]]
        assert {k: line[k] for k in ours} == ours  # raw: no leading quote, ints and nulls as such
    plain = next(line for line in lines if line["email"] == "plain@example.com")
    assert plain["sent_at"] is None and plain["attempts"] == 0 and plain["resent_in_id"] is None
    hostile = next(line for line in lines if line["email"].startswith("=HYPERLINK"))
    assert datetime.fromisoformat(hostile["sent_at"]) == SENT_AT


def test_jsonl_lines_survive_readers_that_split_on_unicode_line_ends():
    campaign = hostile_campaign()
    out = io.StringIO()
    call_command("export_sends", campaign=campaign.id, format="jsonl", stdout=out, stderr=io.StringIO())
    lines = out.getvalue().splitlines()  # also splits on U+2028, U+0085...
    assert len(lines) == len(HOSTILE)
    assert any("\u2028" in json.loads(line)["last_error"] for line in lines)


def test_the_follow_up_a_row_was_handed_to_is_exported():
    campaign = sending_campaign(count=2)
    follow_up = CampaignFactory(account=campaign.account)
    handed = Send.objects.filter(campaign=campaign).order_by("id").first()
    Send.objects.filter(id=handed.id).update(resent_in=follow_up, status="failed")
    by_email = {line["email"]: line for line in export_jsonl(campaign)}
    assert by_email[handed.email]["resent_in_id"] == follow_up.id
    assert [line["resent_in_id"] for e, line in by_email.items() if e != handed.email] == [None]
    csv_rows = {row["email"]: row for row in read_csv(export_csv(campaign))}
    assert csv_rows[handed.email]["resent_in_id"] == str(follow_up.id)


# --- ESP feedback -----------------------------------------------------------------------------

def test_feedback_on_each_send_its_event_types_and_latest_response():
    campaign = sending_campaign(count=4)
    bounced, described, quiet, other = Send.objects.filter(campaign=campaign).order_by("email_lower")
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    feedback(bounced, "deferred", at=t0, mta_response="451 4.7.1 try again later")
    feedback(bounced, "bounced", at=t0 + timedelta(hours=1), mta_response="550 5.1.1 no such user")
    feedback(bounced, "complained", at=t0 + timedelta(hours=2))  # no words of its own
    feedback(bounced, "bounced", at=t0 + timedelta(minutes=30), esp="resend",
             mta_response="older, from another ESP")
    feedback(described, "rejected", at=t0, description="=Blocked, \"policy\"\nline two")
    # about the same address but attributed to no send: not this send's feedback
    FeedbackEvent.objects.create(esp="postmark", event_id="stray", event_type="bounced",
                                 email_lower=quiet.email_lower, occurred_at=t0)
    feedback(other, "opened", at=t0)

    lines = {line["email"]: line for line in export_jsonl(campaign)}
    assert lines[bounced.email]["feedback"] == "bounced; complained; deferred"
    assert lines[bounced.email]["feedback_detail"] == "550 5.1.1 no such user"
    assert datetime.fromisoformat(lines[bounced.email]["feedback_at"]) == t0 + timedelta(hours=2)
    assert lines[described.email]["feedback"] == "rejected"
    assert lines[described.email]["feedback_detail"] == "=Blocked, \"policy\"\nline two"
    assert (lines[quiet.email]["feedback"], lines[quiet.email]["feedback_detail"],
            lines[quiet.email]["feedback_at"]) == ("", "", None)
    assert lines[other.email]["feedback"] == "opened"

    rows = {row["email"]: row for row in read_csv(export_csv(campaign))}
    assert rows[bounced.email]["feedback"] == "bounced; complained; deferred"
    assert rows[described.email]["feedback_detail"] == "'=Blocked, \"policy\"\nline two"


# --- keyset pages -----------------------------------------------------------------------------

ADDRESSES = ["a-b@x.example", "ab@x.example", "a_b@x.example", "A.b@x.example", "ä@x.example",
             "Z@x.example", "z0@x.example", "0@x.example", "~@x.example", "aa@x.example",
             "ab-@x.example", "b@x.example", "ß@x.example"]


@pytest.mark.parametrize("page_size", [1, 2, 5, len(ADDRESSES) - 1, len(ADDRESSES),
                                       len(ADDRESSES) + 1])
def test_pages_of_any_size_give_every_row_exactly_once(page_size):
    campaign = sending_campaign(count=len(ADDRESSES))
    sending_campaign(count=5)  # another campaign's rows stay out
    for row, email in zip(Send.objects.filter(campaign=campaign).order_by("id"), ADDRESSES, strict=True):
        Send.objects.filter(id=row.id).update(email=email, email_lower=email.lower())

    pages = list(Send.ledger.pages(campaign_id=campaign.id, size=page_size))
    keys = [row.email_lower for page in pages for row in page]
    assert sorted(keys) == sorted(e.lower() for e in ADDRESSES)  # each once, none missing
    assert all(len(page) == page_size for page in pages[:-1]) and 0 < len(pages[-1]) <= page_size
    assert read_csv(export_csv(campaign, page_size=page_size)) == read_csv(export_csv(campaign))


def test_an_empty_campaign_exports_a_header_only():
    campaign = CampaignFactory()
    assert read_csv(export_csv(campaign)) == []
    assert export_jsonl(campaign) == []


def test_a_page_walks_the_campaigns_address_index_without_sorting():
    campaign = sending_campaign(count=3000)
    sending_campaign(count=3000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE growth_sends")
        cursor.execute("EXPLAIN " + QUERIES["campaign_page"],
                       {"campaign_id": campaign.id, "after": "person1500@example.com", "page": 500})
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Index Scan using send_unique_address on growth_sends" in plan, plan
    # (a Sort inside the per-send feedback aggregate is of that send's events only)
    assert not re.search(r"Sort Key: \S*email_lower", plan), plan
    assert "Seq Scan on growth_sends" not in plan, plan


# --- the management command -------------------------------------------------------------------

def test_the_command_refuses_an_unknown_campaign_clearly():
    with pytest.raises(CommandError, match="There is no campaign with id 987654321"):
        call_command("export_sends", campaign=987654321, stdout=io.StringIO())


def test_the_command_writes_a_file_and_says_how_many_rows(tmp_path):
    campaign = hostile_campaign()
    target, err = tmp_path / "out.csv", io.StringIO()
    call_command("export_sends", "--campaign", str(campaign.id), "--format", "csv",
                 "--output", str(target), stdout=io.StringIO(), stderr=err)
    assert target.read_bytes().decode("utf-8") == export_csv(campaign)
    assert f"campaign {campaign.id}: {len(HOSTILE)} rows exported as csv" in err.getvalue()


# --- the admin --------------------------------------------------------------------------------

def admin_export_url(campaign) -> str:
    return f"/admin/growth/campaign/{campaign.id}/export/"


def test_the_admin_streams_a_campaigns_csv(client, staff, tenant):
    campaign = hostile_campaign(tenant)
    assert reverse("admin:growth_campaign_export", args=[campaign.id]) == admin_export_url(campaign)
    response = client.get(admin_export_url(campaign))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="campaign-{campaign.id}-sends.csv"'
    body = b"".join(response.streaming_content).decode()
    assert body == export_csv(campaign)
    assert len(read_csv(body)) == len(HOSTILE)


def test_the_admin_export_of_another_tenants_or_no_campaign_is_a_404(client, staff, tenant, other_tenant):
    theirs = sending_campaign(count=1, account=other_tenant)
    assert client.get(admin_export_url(theirs)).status_code == 404
    assert client.get("/admin/growth/campaign/987654321/export/").status_code == 404
    assert client.get("/admin/growth/campaign/abc/export/").status_code == 404


def test_exporting_is_a_view_permission_of_the_campaign_and_its_sends(client, tenant):
    campaign = sending_campaign(count=1, account=tenant)
    viewer = operator(viewer_of=(tenant,), perms=["view_campaign", "view_send"])
    client.force_login(viewer)  # a viewer membership, view permissions only: it may export
    assert client.get(admin_export_url(campaign)).status_code == 200
    for perms in (["view_campaign"], ["view_send"], []):
        client.force_login(operator(tenant, perms=perms))
        assert client.get(admin_export_url(campaign)).status_code == 403, perms
    client.force_login(member(tenant))  # not staff: the admin's login page
    response = client.get(admin_export_url(campaign))
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_admin_export_is_get_only(client, staff, tenant):
    campaign = sending_campaign(count=1, account=tenant)
    assert client.post(admin_export_url(campaign)).status_code == 405


# --- the tenant UI ----------------------------------------------------------------------------

def app_url(name: str, account, *args) -> str:
    return reverse(f"growth:tenant:{name}", args=[account.slug, *args])


def test_a_tenant_lists_its_own_campaigns_with_their_downloads(client, tenant, other_tenant):
    ours = sending_campaign(count=1, account=tenant, name="Spring sale")
    draft = CampaignFactory(account=tenant, name="Not yet built")
    sending_campaign(count=1, account=other_tenant, name="Globex launch")
    client.force_login(member(tenant, role="viewer"))
    body = client.get(app_url("campaigns", tenant)).content.decode()
    assert "Spring sale" in body and "Not yet built" in body and "Globex launch" not in body
    assert app_url("campaign-export", tenant, ours.id) in body
    assert app_url("campaign-export", tenant, draft.id) not in body  # nothing to download yet


def test_a_tenant_downloads_its_own_campaigns_csv(client, tenant):
    campaign = hostile_campaign(tenant)
    client.force_login(member(tenant, role="viewer"))  # a read: viewers may
    response = client.get(app_url("campaign-export", tenant, campaign.id))
    assert response.status_code == 200 and response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="campaign-{campaign.id}-sends.csv"'
    assert b"".join(response.streaming_content).decode() == export_csv(campaign)


def test_another_tenants_campaign_is_a_404_in_the_app_however_it_is_asked_for(client, tenant, other_tenant):
    theirs = sending_campaign(count=1, account=other_tenant)
    client.force_login(member(tenant))
    assert client.get(app_url("campaign-export", tenant, theirs.id)).status_code == 404
    assert client.get(app_url("campaign-export", other_tenant, theirs.id)).status_code == 404
    assert client.get(app_url("campaigns", other_tenant)).status_code == 404
    assert client.get(app_url("campaign-export", tenant, 987654321)).status_code == 404


def test_the_app_export_needs_a_login(client, tenant):
    campaign = sending_campaign(count=1, account=tenant)
    for url in (app_url("campaigns", tenant), app_url("campaign-export", tenant, campaign.id)):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/app/login/")


def test_a_member_of_two_accounts_exports_each_under_its_own_name_only(client):
    first, second = AccountFactory(), AccountFactory()
    user = member(first)
    Membership.objects.create(user=user, account=second)
    campaign = sending_campaign(count=1, account=second)
    client.force_login(user)
    assert client.get(app_url("campaign-export", second, campaign.id)).status_code == 200
    assert client.get(app_url("campaign-export", first, campaign.id)).status_code == 404
