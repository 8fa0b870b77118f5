"""Run one chaos experiment on the current database and audit it."""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.db import OperationalError, connection, connections, transaction
from django.db.models import Min
from django.utils import timezone

from growth.audience.addresses import parse_address
from growth.chaos.chart import draw
from growth.chaos.fleet import Event, Fleet, database_url
from growth.chaos.optouts import OptOutDriver, PublicSite
from growth.chaos.pgbouncer import PgBouncer
from growth.chaos.receiver import ChaosReceiver, Misbehaviour
from growth.chaos.report import ChaosReport, audit
from growth.job_ids import job_id
from growth.models import Account, Campaign, Segment, Subscriber, Suppression
from growth.operations.campaigns import approve_campaign

logger = logging.getLogger(__name__)

POLL = 0.1  # seconds between looks at the run


@dataclass
class ChaosConfig:
    recipients: int = 50_000
    workers: int = 3
    idempotent: bool = False
    batch_size: int = 20
    lease: float = 3.0  # seconds
    kill_every: float = 3.0  # seconds between SIGKILLs (a worker needs ~1 s to start)
    faults: Misbehaviour = field(default_factory=lambda: Misbehaviour(
        tempfail_rate=0.01, drop_rate=0.002, slow_rate=0.005, slow_delay=0.3))
    restart_database: bool = True  # only possible when the server is the embedded one
    database_down_for: float = 2.0  # seconds
    optout_every: float = 1.0  # seconds
    optouts_per_round: int = 4
    out_dir: Path = Path(".data/chaos")
    chart: bool = True
    seed: int = 7
    timeout: float = 1800.0  # seconds
    pgbouncer: bool = False  # the workers reach PostgreSQL through PgBouncer, transaction pooling
    protocol: str = "leases"  # the send protocol the workers build the campaign for (SENDER_PROTOCOL)

    @property
    def mode(self) -> str:
        return "idempotent" if self.idempotent else "plain"


def run(config: ChaosConfig) -> ChaosReport:
    config.out_dir.mkdir(parents=True, exist_ok=True)
    campaign_id, expected_keys = _set_up(config)
    receiver = ChaosReceiver(config.out_dir / f"received-{config.mode}.jsonl",
                             dedup=config.idempotent, faults=config.faults, seed=config.seed).start()
    site = PublicSite().start()
    optouts = OptOutDriver(campaign_id, site=site, seed=config.seed)
    bouncer = PgBouncer() if config.pgbouncer else None
    fleet = Fleet(config.workers, env=_worker_env(config, receiver, bouncer), log_dir=config.out_dir,
                  args=["--batch-size", str(config.batch_size), "--lease", str(config.lease),
                        "--tick", "0.2"], seed=config.seed)
    events: list[Event] = []
    started = time.time()
    try:
        fleet.start()
        _drive(config, campaign_id, len(expected_keys), receiver, fleet, optouts, events)
    finally:
        fleet.stop()
        site.stop()
        receiver.stop()
        if bouncer is not None:
            bouncer.stop()
    wall_time = time.time() - started
    connections.close_all()
    report = audit(mode=config.mode, campaign_id=campaign_id, expected_keys=expected_keys,
                   received=receiver.received, optouts=optouts.done,
                   events=fleet.events + events, clean_exits=fleet.clean_exits,
                   wall_time=wall_time)
    if config.chart:
        draw(config.out_dir / f"chaos-{config.mode}.png", received=receiver.received,
             events=fleet.events + events, started=started,
             title=f"{report.expected:,} recipients, {config.workers} workers, {config.mode} "
                   f"receiver: {report.kills} SIGKILLs, {report.db_restarts} database restart")
    return report


def _drive(config, campaign_id, expected, receiver, fleet, optouts, events) -> None:
    """Kill, terminate, restart the database and opt people out until the campaign is sent."""
    deadline = time.monotonic() + config.timeout
    next_kill = time.monotonic() + config.kill_every
    next_optout = time.monotonic() + config.optout_every
    terminated = restarted = False
    while not _finished(campaign_id):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the campaign did not finish in {config.timeout:.0f} s; "
                               f"{_where_it_stands(campaign_id, receiver, fleet)}")
        progress = receiver.delivered_count() / expected
        now = time.monotonic()
        if now >= next_kill:
            fleet.kill_random()
            next_kill = now + config.kill_every
        if not terminated and progress > 0.3:
            terminated = fleet.terminate_one() is not None
        if not restarted and progress > 0.5 and _can_restart_database(config):
            restarted = True
            _restart_database(config, events)
        if now >= next_optout:
            _quietly(lambda: optouts.round(config.optouts_per_round))
            next_optout = now + config.optout_every
        time.sleep(POLL)


def _where_it_stands(campaign_id: int, receiver, fleet) -> str:
    """What a run that timed out leaves to read: the campaign, its rows, and each worker's last
    lines."""
    campaign = _quietly(lambda: Campaign.objects.filter(id=campaign_id)
                        .values("status", "pause_reason").first())
    rows = _quietly(lambda: Campaign.objects.progress([campaign_id]).get(campaign_id))
    tails = {name: fleet.last_lines(name) for name in fleet.names()}
    return (f"campaign {campaign}, rows {rows}, {receiver.delivered_count()} delivered; "
            f"workers' last lines: {tails}")


def _finished(campaign_id: int) -> bool:
    status = _quietly(lambda: Campaign.objects.status_of(campaign_id=campaign_id))
    return status == Campaign.Status.SENT


def _quietly(call):
    """The harness's own database calls ride out the outage it causes."""
    try:
        return call()
    except OperationalError:
        connection.close()
        return None


def _can_restart_database(config: ChaosConfig) -> bool:
    return config.restart_database and settings.EMBEDDED_DATABASE


def _restart_database(config: ChaosConfig, events: list[Event]) -> None:
    from zylior import embedded_db

    events.append(Event(time.time(), "db-restart", f"down {config.database_down_for:.0f}s"))
    # In a thread: the fleet goes on being killed while the database is down.
    threading.Thread(target=embedded_db.restart,
                     args=(settings.DATA_DIR, config.database_down_for), daemon=True).start()


def _worker_env(config: ChaosConfig, receiver: ChaosReceiver,
                bouncer: PgBouncer | None) -> dict[str, str]:
    through = {"DATABASE_URL": bouncer.database_url(), "DATABASE_POOL_MODE": "transaction"} \
        if bouncer is not None else {"DATABASE_URL": database_url(connection.settings_dict)}
    return {
        **through,
        "EMAIL_URL": receiver.url,
        "SENDER_IDEMPOTENT_TRANSPORT": "true" if config.idempotent else "false",
        "SENDER_PROTOCOL": config.protocol,
        "SENDER_BACKOFF_BASE": "0.2",
        "SENDER_BACKOFF_MAX": "2",
        # 4xx are frequent here and retried until the horizon (48 h by default); kills are
        # frequent too: a row may be on the wire in several killed workers in a row
        "SENDER_MAX_ATTEMPTS": "30",
        "DESTINATIONS_DNS": "off",  # the recipients' domains are made up
        "EMAIL_TIMEOUT": "10",
        "LOG_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }


@transaction.atomic
def _set_up(config: ChaosConfig) -> tuple[int, set[str]]:
    """A tenant whose segments hold exactly ``recipients`` mailable addresses, plus the same
    addresses again in a second segment, unconfirmed and suppressed ones; an approved campaign
    due now. Return its id and the job ids the build must produce."""
    rng = random.Random(config.seed)
    tag = f"chaos-{int(time.time())}"
    account = Account.objects.create(name=f"Chaos {tag}", slug=tag, from_email="chaos@example.com")
    main, other = (Segment.objects.create(account=account, name=name) for name in ("main", "other"))
    primary, extra = [], []
    for n in range(config.recipients):
        address = parse_address(f"r{n}@chaos.example")
        primary.append(_subscriber(account, main, address.email, "confirmed"))
        if rng.random() < 0.05:  # the same person in the other segment, typed differently
            extra.append(_subscriber(account, other, address.email.upper(), "confirmed"))
    unmailable = max(1, config.recipients // 50)
    for n in range(unmailable):
        extra.append(_subscriber(account, main, f"pending{n}@chaos.example", "pending"))
        extra.append(_subscriber(account, other, f"suppressed{n}@chaos.example", "confirmed"))
    # Primary rows first: they get the lower ids, so they are the ones the build picks.
    Subscriber.objects.bulk_create(primary, batch_size=5000)
    Subscriber.objects.bulk_create(extra, batch_size=5000)
    Suppression.objects.bulk_create(
        [Suppression(account=account, email_lower=f"suppressed{n}@chaos.example", reason="bounced")
         for n in range(unmailable)], batch_size=5000)
    campaign = Campaign.objects.create(
        account=account, name=f"Chaos {config.mode}", subject="Chaos test for {{ email }}",
        body_text="Hello {{ email }}.\n\nUnsubscribe: {{ unsubscribe_url }}\n",
        scheduled_for=timezone.now() - timezone.timedelta(seconds=1))
    approve_campaign(campaign_id=campaign.id)
    first_rows = (Subscriber.objects.filter(account=account, status="confirmed")
                  .exclude(email_lower__startswith="suppressed")
                  .values("email_lower").annotate(first=Min("id")).values_list("first", flat=True))
    return campaign.id, {job_id(campaign.id, sid) for sid in first_rows}


def _subscriber(account, segment, email, status) -> Subscriber:
    address = parse_address(email)
    return Subscriber(account=account, segment=segment, email=address.email,
                      email_lower=address.email_lower, status=status)
