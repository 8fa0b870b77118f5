"""Export: ``manage.py export_sends`` over a finished campaign of N recipients, CSV and JSON Lines.

Each export is a fresh process (``--output`` /dev/null: the export's own work, not the disk's);
its peak resident memory is the kernel's ``ru_maxrss`` for that one child, read with
``os.wait4`` (``RUSAGE_CHILDREN`` would be the largest of every child the bench ever reaped:
run_sender workers included). rows/s is from the command's own clock (reading, formatting,
writing; not Python's and Django's start-up, which ``seconds`` includes). An export of an empty
campaign gives the floor: the interpreter and Django alone. Constant memory means the peak at
the largest N over the peak at the smallest is about 1.

The campaign is built by the engine's own build, then marked finished in one UPDATE: 5 % failed
(with an SMTP error that needs quoting in CSV), 1 % unknown, the rest sent with a provider id; one
send in 50 has two ESP events (a bounce and a complaint), so the feedback join does real work.
Each size also records the plan and timing of one page from the middle of the campaign (EXPLAIN
ANALYZE), to show a page deep in the campaign costs what the first one does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from django.db import connection

from bench import data
from bench.engine import MANAGE_PY, sender_env
from growth.managers.ledger import PAGE_SIZE, QUERIES
from growth.models import Campaign, Send

FORMATS = ["csv", "jsonl"]
_SUMMARY = re.compile(r": ([\d,]+) rows exported as \w+ in ([\d.]+) s")

FINISH_SQL = """
UPDATE growth_sends
   SET status = CASE WHEN id %% 20 = 0 THEN 'failed' WHEN id %% 100 = 1 THEN 'unknown'
                     ELSE 'sent' END,
       attempts = CASE WHEN id %% 20 = 0 THEN 5 ELSE 1 END,
       sent_at = CASE WHEN id %% 20 = 0 OR id %% 100 = 1 THEN NULL ELSE now() END,
       provider_message_id = CASE WHEN id %% 20 = 0 THEN '' ELSE md5(id::text) END,
       last_error = CASE WHEN id %% 20 = 0
                         THEN '550 5.1.1 <' || email || '>: Recipient address rejected: "User '
                              || 'unknown in virtual mailbox table", giving up'
                         ELSE '' END,
       updated_at = now()
 WHERE campaign_id = %(campaign_id)s
"""
FEEDBACK_SQL = """
INSERT INTO growth_feedback_events (esp, event_id, event_type, reject_reason, email_lower,
                                    account_id, campaign_id, send_id, unattributed_because,
                                    suppressed, description, mta_response, occurred_at)
SELECT 'postmark', 'bench-' || s.id || '-' || e.type, e.type, '', s.email_lower, s.account_id,
       s.campaign_id, s.id, '', true, e.description, e.response, now() - e.ago
  FROM growth_sends s,
       (VALUES ('bounced', 'The server was unable to deliver your message',
                '550 5.1.1 The email account that you tried to reach does not exist',
                interval '2 hours'),
               ('complained', 'The recipient marked the message as spam', '',
                interval '1 hour')) AS e(type, description, response, ago)
 WHERE s.campaign_id = %(campaign_id)s AND s.id %% 50 = 0
"""


def finished_campaign(audience) -> int:
    """A campaign of ``audience.size`` recipients, built and finished as described above."""
    data.fresh_sends()
    campaign_id = data.approved_campaign(audience)
    assert Campaign.objects.start_due() == [campaign_id], "another campaign was due"
    assert Send.objects.build_recipients(campaign_id=campaign_id) == audience.size
    with connection.cursor() as cursor:
        cursor.execute(FINISH_SQL, {"campaign_id": campaign_id})
        cursor.execute(FEEDBACK_SQL, {"campaign_id": campaign_id})
        cursor.execute("UPDATE growth_campaigns SET status = 'sent', finished_at = now() "
                       "WHERE id = %s", [campaign_id])
    data.fold_tallies()  # as the workers would within seconds
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE growth_sends")
        cursor.execute("VACUUM ANALYZE growth_feedback_events")
    return campaign_id


def export_once(campaign_id: int, fmt: str) -> dict:
    """Run one ``export_sends`` process; its rows, seconds (own clock and wall) and peak RSS."""
    command = [sys.executable, str(MANAGE_PY), "export_sends", "--campaign", str(campaign_id),
               "--format", fmt, "--output", os.devnull]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=sender_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)  # this child's own high-water mark
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    summary = process.stderr.read()
    process.stderr.close()
    found = _SUMMARY.search(summary)
    if process.returncode != 0 or not found:
        raise RuntimeError(f"export_sends exited {process.returncode}: {summary[-2000:]}")
    rows, seconds = int(found[1].replace(",", "")), float(found[2])
    return {"rows": rows, "seconds": seconds, "wall": wall, "peak": usage.ru_maxrss * 1024,
            "rows_per_s": rows / seconds if seconds else None}


def middle_page(campaign_id: int, size: int) -> dict:
    """EXPLAIN ANALYZE of one page starting halfway through the campaign."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT email_lower FROM growth_sends WHERE campaign_id = %s "
                       "ORDER BY email_lower OFFSET %s LIMIT 1", [campaign_id, size // 2])
        after = cursor.fetchone()[0]
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + QUERIES["campaign_page"],
                       {"campaign_id": campaign_id, "after": after, "page": PAGE_SIZE})
        plan = [row[0] for row in cursor.fetchall()]
    ms = next(float(m[1]) for line in plan if (m := re.search(r"Execution Time: ([\d.]+) ms", line)))
    return {"ms": ms, "uses_address_index": any("send_unique_address" in line for line in plan),
            "sorts": any("Sort" in line for line in plan), "plan": plan}


def measure(sizes: list[int], *, out: Path, say) -> dict:
    """{"floor": an empty campaign's export, "sizes": {N: {format: figures, "page": ...}},
    "rss_ratio": peak at the largest N / at the smallest, per format}; the middle pages' plans
    also go to ``out``/export-plans.txt."""
    empty = Campaign.objects.create(account_id=data.audience(min(sizes)).account_id,
                                    name="Bench export, no recipients")
    floor = export_once(empty.id, "csv")
    say(f"export: floor (no rows): peak RSS {floor['peak'] / 2**20:.1f} MiB, {floor['wall']:.2f} s")
    results: dict = {"page_size": PAGE_SIZE, "floor": floor, "sizes": {}}
    for size in sizes:
        audience = data.audience(size)
        started = time.perf_counter()
        campaign_id = finished_campaign(audience)
        entry: dict = {"prepared_in": time.perf_counter() - started,
                       "page": middle_page(campaign_id, size)}
        say(f"export: {size:,} recipients ready in {entry['prepared_in']:.0f} s; a middle page: "
            f"{entry['page']['ms']:.1f} ms, send_unique_address "
            f"{'used' if entry['page']['uses_address_index'] else 'NOT used'}"
            f"{', with a Sort' if entry['page']['sorts'] else ''}")
        for fmt in FORMATS:
            run = entry[fmt] = export_once(campaign_id, fmt)
            assert run["rows"] == size, f"exported {run['rows']} rows of {size}"
            say(f"export: {size:,} {fmt}: {run['rows_per_s']:,.0f} rows/s, peak RSS "
                f"{run['peak'] / 2**20:.1f} MiB ({run['wall']:.1f} s with start-up)")
        results["sizes"][size] = entry
    small, large = results["sizes"][min(sizes)], results["sizes"][max(sizes)]
    results["rss_ratio"] = {fmt: large[fmt]["peak"] / small[fmt]["peak"] for fmt in FORMATS}
    say("export: peak RSS at " + f"{max(sizes):,} / at {min(sizes):,}: "
        + ", ".join(f"{fmt} {ratio:.2f}×" for fmt, ratio in results["rss_ratio"].items()))
    data.fresh_sends()
    plans = [line for size, entry in results["sizes"].items()
             for line in (f"-- {size:,} recipients, a page from the middle", *entry["page"]["plan"], "")]
    (out / "export-plans.txt").write_text("\n".join(plans))
    return results
