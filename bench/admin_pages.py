"""Admin server time with a campaign of many sends: Django's test Client, a logged-in superuser.

Whatever admin the branch has is measured: the pages are the URLs below, reversed by name, so
the same code measures the rebuilt admin after a merge (add a page to PAGES to measure it too).
Each page is fetched once to warm up, then ``repetitions`` times; the median is reported, with
the number of SQL queries of the warm-up fetch (counted apart: counting slows the timed ones).
"""

from __future__ import annotations

import statistics
import time

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse

from bench import data
from growth.models import Campaign, Send

# label -> (URL name, needs the campaign id, query string: "{id}" is the campaign id)
PAGES = {
    "campaign list": ("admin:growth_campaign_changelist", False, ""),
    "campaign page": ("admin:growth_campaign_change", True, ""),
    # what the live monitor polls every few seconds: the list's campaigns, one campaign's page
    "monitor poll (list)": ("admin:growth_campaign_monitor", False, "ids={id}"),
    "monitor poll (campaign)": ("admin:growth_campaign_monitor_one", True, ""),
}


def big_campaign(audience) -> int:
    """A sending campaign with ``audience.size`` sends, half of them already sent."""
    data.fresh_sends()
    campaign_id = data.approved_campaign(audience)
    assert Campaign.objects.start_due() == [campaign_id]
    Send.objects.build_recipients(campaign_id=campaign_id)
    with connection.cursor() as cursor:
        cursor.execute("UPDATE growth_sends SET status = 'sent', sent_at = now(), attempts = 1 "
                       "WHERE campaign_id = %s AND id %% 2 = 0", [campaign_id])
        cursor.execute("VACUUM ANALYZE growth_sends")
    return campaign_id


def run(*, campaign_id: int, repetitions: int, pages: dict | None = None) -> dict[str, dict]:
    """{page: {"ms": median server time, "queries": n, "status": HTTP status}}; ``pages`` as
    PAGES (the default)."""
    user_model = get_user_model()
    user = (user_model.objects.filter(username="bench").first()
            or user_model.objects.create_superuser("bench", "bench@bench.example", "bench"))
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    results = {}
    for label, (name, with_id, query) in (pages or PAGES).items():
        url = reverse(name, args=[campaign_id] if with_id else [])
        if query:
            url += "?" + query.format(id=campaign_id)
        counter = _QueryCounter()  # on the warm-up fetch only: counting costs time
        with connection.execute_wrapper(counter):
            client.get(url)
        times = []
        for _ in range(repetitions):
            started = time.perf_counter()
            response = client.get(url)
            times.append(time.perf_counter() - started)
        results[label] = {"ms": statistics.median(times) * 1000, "queries": counter.count,
                          "status": response.status_code, "url": url}
    return results


class _QueryCounter:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)
