"""The recipient build for a large account: the engine's build vs the bare statements.

Three timings per repetition, each on an emptied growth_sends after a CHECKPOINT (so a
checkpoint triggered by the previous one's WAL does not land on the next):

  engine     Send.objects.build_recipients: transaction, advisory lock, "still unbuilt?", the
             INSERT ... SELECT DISTINCT ON ... ON CONFLICT, mark built, commit
  statement  the same INSERT ... SELECT alone, in autocommit: the engine around it removed
  plain      a plain INSERT ... SELECT of the same rows (the account's confirmed primary
             subscribers): no de-duplication, no suppression or segment checks, no ON CONFLICT.
             What writing these rows into growth_sends and its indexes costs at the least.
  engine without tallies   (``tallies=True`` only) the engine's build with growth_sends' tally
             triggers off: what keeping the counts costs a build (migration 0015)
"""

from __future__ import annotations

import time

from django.db import connection

from bench import data
from growth.managers.sends import QUERIES
from growth.models import Campaign, Send

PLAIN_SQL = """
INSERT INTO growth_sends (campaign_id, account_id, subscriber_id, email, email_lower)
SELECT %(campaign_id)s, s.account_id, s.id, s.email, s.email_lower
  FROM growth_subscribers s
  JOIN growth_segments g ON g.id = s.segment_id AND g.name = 'main'
 WHERE s.account_id = %(account_id)s AND s.status = 'confirmed' AND s.email_lower LIKE 'r%%'
"""


def _started_campaign(audience) -> int:
    data.fresh_sends()
    with connection.cursor() as cursor:
        cursor.execute("CHECKPOINT")
    campaign_id = data.approved_campaign(audience)
    assert Campaign.objects.start_due() == [campaign_id]
    return campaign_id


def _timed_sql(statement: str, params: dict) -> tuple[float, int]:
    with connection.cursor() as cursor:
        started = time.perf_counter()
        cursor.execute(statement, params)
        return time.perf_counter() - started, cursor.rowcount


def run(*, audience, tallies: bool = False) -> dict[str, float]:
    """Seconds for each way of building the audience's recipients (one repetition)."""
    seconds = {}
    campaign_id = _started_campaign(audience)
    started = time.perf_counter()
    created = Send.objects.build_recipients(campaign_id=campaign_id)
    seconds["engine"] = time.perf_counter() - started
    assert created == audience.size, f"engine built {created} of {audience.size}"

    campaign_id = _started_campaign(audience)
    seconds["statement"], created = _timed_sql(QUERIES["build_recipients"], {"campaign_id": campaign_id})
    assert created == audience.size, f"the statement built {created} of {audience.size}"

    campaign_id = _started_campaign(audience)
    seconds["plain"], created = _timed_sql(
        PLAIN_SQL, {"campaign_id": campaign_id, "account_id": audience.account_id})
    assert created == audience.size, f"the plain INSERT built {created} of {audience.size}"
    Campaign.objects.cancel(campaign_id=campaign_id)

    if tallies:
        campaign_id = _started_campaign(audience)
        with data.without_tallies():
            started = time.perf_counter()
            created = Send.objects.build_recipients(campaign_id=campaign_id)
            seconds["engine without tallies"] = time.perf_counter() - started
        assert created == audience.size, f"engine without tallies built {created} of {audience.size}"
        Campaign.objects.cancel(campaign_id=campaign_id)
    return seconds
