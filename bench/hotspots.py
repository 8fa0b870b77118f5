"""Where the engine's time goes: py-spy on a real run_sender, EXPLAIN ANALYZE on its statements.

``spy`` attaches py-spy (sampling, idle time included: a worker waiting on PostgreSQL is idle to
the OS) to one run_sender process working through a campaign alone, and sums the samples by
function: ``self`` (the function itself was running) and ``inclusive`` (it was on the stack).

``explain`` runs the engine's statements under EXPLAIN (ANALYZE, BUFFERS) on a campaign of N
queued rows, once on the fresh table and once after half of it has been claimed and settled
(dead row versions and index entries left behind, no VACUUM yet: what a worker meets mid-way
through a campaign). Each is run inside a transaction that is rolled back.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from django.db import connection, transaction

from bench import data, engine
from growth.managers.campaigns import QUERIES as CAMPAIGN_QUERIES
from growth.managers.queries import split_settings
from growth.managers.sends import NEVER_FORGOTTEN
from growth.managers.sends import QUERIES as SEND_QUERIES
from growth.models import Campaign

# Functions whose inclusive share of the worker's time is reported (file suffix, function).
PHASES = [
    ("growth/sending/worker.py", "Worker.cycle", "a whole cycle"),
    ("growth/managers/campaigns.py", "CampaignManager.start_due", "start_due (UPDATE campaigns)"),
    ("growth/managers/sends.py", "SendManager.unbuilt_campaigns", "unbuilt_campaigns (SELECT)"),
    ("growth/sending/worker.py", "Worker._recover", "recover_expired (UPDATE)"),
    ("growth/managers/campaigns.py", "CampaignManager.sending", "the sending campaigns (SELECT)"),
    ("growth/managers/limits.py", "RateLimitManager.take_destinations",
     "paced destinations' tokens (UPDATE rate limits)"),
    ("growth/managers/sends.py", "SendManager.claim", "claim, row protocol (UPDATE ... SKIP LOCKED)"),
    ("growth/managers/leases.py", "LeaseManager.claim", "claim, lease protocol (cursor lock + lease)"),
    ("growth/managers/sends.py", "SendManager.blocked", "opt-out read before the wire (SELECT)"),
    ("growth/sending/worker.py", "Worker._render", "render (per recipient)"),
    ("growth/sending/unsubscribe.py", "LinkMaker.url", "  of which: unsubscribe link (signing)"),
    ("django/core/mail/message.py", "EmailMultiAlternatives.__init__",
     "  of which: Django EmailMessage objects"),
    ("growth/sending/mime.py", "MessageLayout.build", "  of which: MIME bytes"),
    ("growth/managers/sends.py", "SendManager.hand_over", "hand_over (UPDATE)"),
    ("growth/sending/transports/null.py", "NullTransport.send_bulk", "null transport send_bulk"),
    ("growth/managers/sends.py", "SendManager.settle", "settle (UPDATE ... FROM unnest)"),
    ("growth/managers/campaigns.py", "CampaignManager.finish", "finish (UPDATE ... NOT EXISTS)"),
    ("growth/sending/transports/django_mail.py", "DjangoMailTransport.send_bulk", "SMTP transport send_bulk"),
    ("django/core/mail/backends/smtp.py", "EmailBackend._send", "  of which: Django's SMTP backend"),
    ("django/core/mail/message.py", "sanitize_address", "    of which: sanitize_address"),
    ("smtplib.py", "SMTP.sendmail", "    of which: smtplib sendmail (the wire)"),
    ("logging/__init__.py", "Logger.info", "logging (one line per batch)"),
    ("psycopg/cursor.py", "Cursor.execute", "all statements: psycopg execute (waiting on PostgreSQL)"),
]
# the settle's policy parameters, as the engine's defaults set them (see bench/ceiling.py)
SETTLE_POLICY = {"retry_for": 48 * 3600.0, "throttle_delay": 1.0, "backoff_base": 30.0,
                 "backoff_max": 3600.0}
_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>.+?)(?::(?P<line>\d+))?\)$")


def activity() -> tuple[int, int, int]:
    """(WAL position in bytes, rows updated, of which HOT) for growth_sends, as of now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, n_tup_upd, n_tup_hot_upd "
                       "FROM pg_stat_user_tables WHERE relname = 'growth_sends'")
        wal, updated, hot = cursor.fetchone()
    return int(wal), updated, hot


def write_cost(before: tuple[int, int, int], rows: int) -> dict:
    """WAL bytes and row versions written per recipient since ``before``."""
    time.sleep(1.0)  # backends report their table statistics within a second
    wal, updated, hot = (after - first for after, first in zip(activity(), before, strict=True))
    return {"wal_per_recipient": wal / rows, "updates_per_recipient": updated / rows,
            "hot_share": hot / updated if updated else 0.0}


def indexes() -> list[tuple[str, str]]:
    """(name, definition) of growth_sends's indexes: each non-HOT row update writes to all."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'growth_sends' "
                       "ORDER BY indexname")
        return cursor.fetchall()


def ceiling_cost(*, audience, batch_size: int, hand_over: bool) -> dict:
    """The ceiling's write cost, for comparison with the engine's."""
    from bench import ceiling

    campaign_id = data.built_and_paused(audience)
    data.resume(campaign_id)
    before = activity()
    seconds = ceiling.run_built(audience=audience, batch_size=batch_size, workers=1,
                                hand_over=hand_over)
    return {"seconds": seconds, **write_cost(before, audience.size)}


def spy(*, audience, batch_size: int, out: Path, rate: int = 250, name: str = "null",
        env: dict[str, str] | None = None, leases: bool | None = None) -> dict:
    """Profile one run_sender over the audience; return the summary (and write the raw stacks).

    ``env`` overrides the worker's environment (default: the null transport); ``leases``: the
    campaign built for the lease protocol (None: as run_sender builds them, SENDER_PROTOCOL).
    """
    if leases is None:
        leases = data.on_leases()
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    campaign_id = data.built_and_paused(audience, leases=leases)
    senders = engine.start_senders(
        1, env=engine.sender_env(**(env or {"SENDER_TRANSPORT": engine.NULL})), log_dir=out / "logs",
        args=["--batch-size", str(batch_size), "--tick", str(engine.POLL)],
        name=f"spy-{name}-b{batch_size}")
    raw = out / f"pyspy-{name}-b{batch_size}.txt"
    try:
        engine.wait_started(senders)
        recorder = subprocess.Popen(
            [pyspy, "record", "--pid", str(senders[0][0].pid), "--rate", str(rate), "--idle",
             "--format", "raw", "--output", str(raw), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # py-spy attaches
        before = activity()
        started = data.resume(campaign_id)
        while (finished := data.finished_at(campaign_id)) is None:
            time.sleep(engine.POLL)
        recorder.send_signal(2)  # SIGINT: py-spy writes its output and exits
        recorder.wait(timeout=60)
    finally:
        engine.stop(senders)
    return {"seconds": finished - started, "phases": summarize(raw), "raw": str(raw),
            "protocol": "leases" if leases else "rows", **write_cost(before, audience.size)}


def summarize(raw: Path) -> list[tuple[str, float, float]]:
    """[(label, inclusive %, self %)] of the worker thread's samples inside Worker.cycle."""
    inclusive, itself, total = Counter(), Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "Worker.cycle (" not in stack or not count.isdigit():
            continue  # outside the cycle: start-up, idle waits between cycles
        frames = [_FRAME.match(f) for f in stack.split(";")]
        keys = [(m["file"], m["func"]) for m in frames if m]
        total += int(count)
        seen = set()
        for key in keys:
            if key not in seen:
                inclusive[key] += int(count)
                seen.add(key)
        if keys:
            itself[keys[-1]] += int(count)
    rows = []
    for suffix, func, label in PHASES:
        inc = sum(n for (file, f), n in inclusive.items() if f == func and file.endswith(suffix))
        own = sum(n for (file, f), n in itself.items() if f == func and file.endswith(suffix))
        rows.append((label, 100.0 * inc / max(total, 1), 100.0 * own / max(total, 1)))
    return rows


def top_self(raw: Path, limit: int = 15) -> list[tuple[str, float]]:
    """The functions most often running themselves (leaf frames), as % of samples in cycle()."""
    itself, total = Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if "Worker.cycle (" not in stack or not count.isdigit():
            continue
        total += int(count)
        itself[stack.split(";")[-1]] += int(count)
    return [(frame, 100.0 * n / max(total, 1)) for frame, n in itself.most_common(limit)]


# -- EXPLAIN ANALYZE ------------------------------------------------------------------------------

def _explain(statement: str, params: dict) -> tuple[float, str]:
    set_locals, statement = split_settings(statement)
    with connection.cursor() as cursor:
        cursor.execute(set_locals + "EXPLAIN (ANALYZE, BUFFERS) " + statement, params)
        while cursor.nextset():  # past the statement's SET LOCALs
            pass
        plan = "\n".join(row[0] for row in cursor.fetchall())
    ms = float(re.search(r"Execution Time: ([\d.]+) ms", plan).group(1))
    return ms, plan


def _statements(batch_size: int) -> list[tuple[str, float, str]]:
    """EXPLAIN ANALYZE claim, hand_over, settle, finish, outlook; roll everything back."""
    worker = "explain"
    results = []
    with transaction.atomic():
        ms, plan = _explain(SEND_QUERIES["claim_any"],
                            {"worker_id": worker, "batch_size": batch_size, "lease": 300.0,
                             "campaign_id": None, "hand_over": False, **NEVER_FORGOTTEN})
        results.append(("claim", ms, plan))
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, attempts, campaign_id, lease_expires_at FROM growth_sends"
                           " WHERE status = 'sending' AND claimed_by = %s", [worker])
            held = cursor.fetchall()
        ids = [row[0] for row in held]
        ms, plan = _explain(SEND_QUERIES["hand_over"], {
            "ids": ids, "leases": sorted({row[3] for row in held}), "worker_id": worker})
        results.append(("hand_over", ms, plan))
        ms, plan = _explain(SEND_QUERIES["settle"], {
            "ids": ids, "attempts": [row[1] for row in held], "campaign_id": held[0][2],
            "outcomes": ["sent"] * len(ids), "provider_ids": ["null"] * len(ids),
            "retry_afters": [None] * len(ids), "errors": [""] * len(ids), "worker_id": worker,
            **SETTLE_POLICY})
        results.append(("settle", ms, plan))
        sending = [c.campaign_id for c in Campaign.objects.sending()]
        for name in ("finish", "outlook", "start_due"):
            ms, plan = _explain(CAMPAIGN_QUERIES[name], {"campaign_ids": sending})
            results.append((name, ms, plan))
        ms, plan = _explain(SEND_QUERIES["recover_expired"],
                            {"campaign_ids": sending, "idempotent": True, "max_attempts": 5,
                             "limit": 10_000})
        results.append(("recover_expired", ms, plan))
        transaction.set_rollback(True)
    return results


def explain(*, audience, batch_size: int, out: Path) -> dict[str, dict[str, float]]:
    """{moment: {statement: ms}}; the plans go to out/explain-b<batch>.txt."""
    campaign_id = data.built_and_paused(audience)
    data.resume(campaign_id)
    moments = {"fresh": _statements(batch_size)}
    settle_half(audience.size // 2, batch_size)
    moments["half done"] = _statements(batch_size)
    text = []
    for moment, results in moments.items():
        for name, ms, plan in results:
            text.append(f"=== {name}, {moment} ({audience.size:,} rows, batch {batch_size}): {ms:.2f} ms\n"
                        f"{plan}\n")
    (out / f"explain-b{batch_size}.txt").write_text("\n".join(text))
    return {moment: {name: ms for name, ms, _ in results} for moment, results in moments.items()}


def settle_half(rows: int, batch_size: int) -> None:
    """Claim and settle ``rows`` rows with the engine's statements (no VACUUM afterwards)."""
    done = 0
    with connection.cursor() as cursor:
        while done < rows:
            cursor.execute(SEND_QUERIES["claim_any"],
                           {"worker_id": "half", "batch_size": batch_size, "lease": 300.0,
                            "campaign_id": None, "hand_over": False, **NEVER_FORGOTTEN})
            columns = [column.name for column in cursor.description]
            claimed = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
            ids = [row["id"] for row in claimed]
            cursor.execute(SEND_QUERIES["settle"], {
                "ids": ids, "attempts": [row["attempts"] for row in claimed],
                "campaign_id": claimed[0]["campaign_id"] if claimed else None,
                "outcomes": ["sent"] * len(ids), "provider_ids": [""] * len(ids),
                "retry_afters": [None] * len(ids), "errors": [""] * len(ids), "worker_id": "half",
                **SETTLE_POLICY})
            done += len(ids)
