"""Fast test data: INSERT ... SELECT generate_series, never ORM loops (1M subscribers in seconds).

One account per audience size. Its segments hold exactly ``size`` mailable addresses, plus the
rows the build must skip (the same addresses typed differently in a second segment, pending
subscribers, suppressed addresses), so the engine's build and claim do their real work.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.utils import timezone

from growth.models import Campaign, Send, SendTally
from growth.operations.campaigns import approve_campaign

BODY_TEXT = """Hello {{ email }},

Here is what is new at Acme Books this month: three new titles, a reading group and a sale.

Unsubscribe with one click: {{ unsubscribe_url }}
"""
BODY_HTML = """<html><body>
<h1>New at Acme Books</h1>
<p>Hello {{ email }}, here is what is new this month: three new titles, a reading group and a sale.</p>
<p><a href="{{ unsubscribe_url }}">Unsubscribe</a></p>
</body></html>"""

ACCOUNT_SQL = """
WITH account AS (
    INSERT INTO growth_accounts (name, slug, from_email, from_name)
    VALUES (%(name)s, %(slug)s, 'news@bench.example', 'Bench Books')
    RETURNING id
)
INSERT INTO growth_segments (account_id, name)
SELECT account.id, segment FROM account, (VALUES ('main'), ('other')) AS names(segment)
RETURNING account_id, id
"""

# Primary rows first, in one statement: they get the lower ids, so the build picks them.
SUBSCRIBERS_SQL = """
INSERT INTO growth_subscribers (account_id, segment_id, email, email_lower, status)
SELECT %(account)s, %(main)s, 'r' || g || '@bench.example', 'r' || g || '@bench.example', 'confirmed'
  FROM generate_series(1, %(size)s) g
"""
SKIPPED_SQL = """
INSERT INTO growth_subscribers (account_id, segment_id, email, email_lower, status)
SELECT %(account)s, %(other)s, 'R' || g || '@BENCH.example', 'r' || g || '@bench.example', 'confirmed'
  FROM generate_series(1, %(size)s, 20) g                        -- 5%%: the same person twice
UNION ALL
SELECT %(account)s, %(main)s, 'p' || g || '@bench.example', 'p' || g || '@bench.example', 'pending'
  FROM generate_series(1, %(size)s / 50) g                       -- 2%%: never confirmed
UNION ALL
SELECT %(account)s, %(other)s, 's' || g || '@bench.example', 's' || g || '@bench.example', 'confirmed'
  FROM generate_series(1, %(size)s / 50) g                       -- 2%%: suppressed, below
"""
SUPPRESSIONS_SQL = """
INSERT INTO growth_suppressions (account_id, email_lower, reason)
SELECT %(account)s, 's' || g || '@bench.example', 'bounced' FROM generate_series(1, %(size)s / 50) g
"""


@dataclass(frozen=True, slots=True)
class Audience:
    account_id: int
    size: int  # mailable addresses: what a build of this account's campaign creates
    seconds: float  # how long generating it took


_audiences: dict[int, Audience] = {}


def audience(size: int) -> Audience:
    """An account with ``size`` mailable addresses (made once per size and process)."""
    if size not in _audiences:
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM growth_accounts WHERE slug = %s", [f"bench-{size}"])
            made = cursor.fetchone()
            if made:  # by an earlier process on this database
                _audiences[size] = Audience(made[0], size, 0.0)
                return _audiences[size]
            cursor.execute(ACCOUNT_SQL, {"name": f"Bench {size}", "slug": f"bench-{size}"})
            (account, main), (_, other) = sorted(cursor.fetchall(), key=lambda row: row[1])
            params = {"account": account, "main": main, "other": other, "size": size}
            for statement in (SUBSCRIBERS_SQL, SKIPPED_SQL, SUPPRESSIONS_SQL):
                cursor.execute(statement, params)
            cursor.execute("ANALYZE growth_subscribers; ANALYZE growth_suppressions")
        _audiences[size] = Audience(account, size, time.perf_counter() - started)
    return _audiences[size]


def approved_campaign(audience: Audience, *, html: bool = True) -> int:
    """A new campaign over the whole account, approved and due now; return its id."""
    campaign = Campaign.objects.create(
        account_id=audience.account_id, name=f"Bench {audience.size}",
        subject="What is new at Acme, {{ email }}", body_text=BODY_TEXT,
        body_html=BODY_HTML if html else "",
        scheduled_for=timezone.now() - timezone.timedelta(seconds=1))
    approve_campaign(campaign_id=campaign.id)
    return campaign.id


def fresh_sends() -> None:
    """Empty growth_sends and cancel whatever campaign is left unfinished, so that every run
    starts from the same table and indexes and its workers see only its own campaign."""
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE growth_sends CASCADE")  # and what refers to it (feedback events)
        cursor.execute("UPDATE growth_campaigns SET status = 'cancelled', finished_at = now() "
                       "WHERE status IN ('draft', 'approved', 'sending', 'paused')")


def on_leases() -> bool:
    """Campaigns are built for the lease protocol, as run_sender builds them (SENDER_PROTOCOL):
    their claims and settles are then that protocol's (leases.sql)."""
    return settings.SENDER_PROTOCOL == "leases"


def built_and_paused(audience: Audience, *, html: bool = True, leases: bool = False) -> int:
    """A campaign whose recipients are built (by the engine's own statement; ``leases``: for the
    lease protocol), paused; its id.

    Built and ANALYZEd before any worker starts, so that every contender starts from the same
    table; paused, so that workers can start (Django imports, connections) before the clock does.
    """
    fresh_sends()
    campaign_id = approved_campaign(audience, html=html)
    assert Campaign.objects.start_due() == [campaign_id], "another campaign was due"
    created = Send.objects.build_recipients(campaign_id=campaign_id, leases=leases)
    assert created == audience.size, f"built {created} recipients, expected {audience.size}"
    assert Campaign.objects.pause(campaign_id=campaign_id)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE growth_sends")
    return campaign_id


def resume(campaign_id: int) -> float:
    """Start the clock: paused -> sending; return the database's time of it (epoch seconds)."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE growth_campaigns SET status = 'sending', updated_at = clock_timestamp() "
                       "WHERE id = %s AND status = 'paused' RETURNING extract(epoch FROM updated_at)",
                       [campaign_id])
        row = cursor.fetchone()
    assert row, f"campaign {campaign_id} was not paused"
    return float(row[0])


def finished_at(campaign_id: int) -> float | None:
    """The database's time the campaign became 'sent' (epoch seconds), or None if it is not."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM finished_at) FROM growth_campaigns "
                       "WHERE id = %s AND status = 'sent'", [campaign_id])
        row = cursor.fetchone()
    return float(row[0]) if row else None


def fold_tallies() -> int:
    """Fold every tally delta, as the workers' housekeeping would within seconds (a data set made
    by bulk statements, with no worker running, leaves them all unfolded); return how many."""
    folded = 0
    while moved := SendTally.objects.fold():
        folded += moved
    return folded


def counts(campaign_id: int) -> dict[str, int]:
    """The campaign's rows per status, counted over the rows (not the tallies, which are off in
    the runs that measure what they cost)."""
    return SendTally.objects.recount([campaign_id]).get(campaign_id, {})


TALLY_TRIGGERS = ("growth_sends_tally_insert", "growth_sends_tally_update",
                  "growth_sends_tally_delete")


@contextmanager
def without_tallies():
    """growth_sends' tally triggers off, for every session (what they cost, measured against
    the same run with them on). The tallies are wrong meanwhile and after: the next
    ``fresh_sends`` (a TRUNCATE, whose trigger stays on) empties them."""
    def switch(to: str) -> None:
        with connection.cursor() as cursor:
            for trigger in TALLY_TRIGGERS:
                cursor.execute(f"ALTER TABLE growth_sends {to} TRIGGER {trigger}")

    switch("DISABLE")
    try:
        yield
    finally:
        switch("ENABLE")


def conninfo() -> str:
    """A libpq connection string for the bench database (for processes without Django)."""
    from psycopg.conninfo import make_conninfo

    db = connection.settings_dict
    return make_conninfo(dbname=db["NAME"], host=db["HOST"] or None, port=db["PORT"] or None,
                         user=db["USER"] or None, password=db["PASSWORD"] or None)
