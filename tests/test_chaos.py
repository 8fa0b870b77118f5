"""A CI-sized run of the chaos harness (``make chaos`` runs the full-sized one)."""

from __future__ import annotations

import pytest
from django.conf import settings

from growth.chaos.harness import ChaosConfig, run
from growth.chaos.receiver import Misbehaviour

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HANDOFF_CHUNK = 5  # SENDER_HANDOFF_CHUNK's default: what a plain-mode kill can leave in doubt
CONNECTIONS = 4  # SENDER_CONNECTIONS's default: one chunk on each wire


@pytest.mark.parametrize(("idempotent", "protocol"),
                         [(False, "rows"), (True, "rows"), (False, "leases"), (True, "leases")],
                         ids=["plain", "idempotent", "plain-leases", "idempotent-leases"])
def test_a_campaign_survives_kills_a_database_restart_bad_smtp_and_opt_outs(tmp_path, idempotent,
                                                                            protocol):
    config = ChaosConfig(
        recipients=1200, workers=3, idempotent=idempotent, lease=2.0, kill_every=0.6,
        faults=Misbehaviour(tempfail_rate=0.03, drop_rate=0.01, slow_rate=0.01, slow_delay=0.2),
        database_down_for=1.0, optout_every=0.5, optouts_per_round=3, out_dir=tmp_path,
        timeout=240, protocol=protocol)
    report = run(config)

    assert report.problems() == []
    assert report.lost == 0 and report.duplicates == 0 and report.addresses_twice == 0
    assert report.opted_out_then_delivered == 0 and report.opted_out > 0
    assert report.tally_drift == 0  # the admin's counts, exact through kills and the restart
    reached = report.accepted - report.unknown_delivered - report.opted_out_already_delivered
    assert reached + report.opted_out + report.unknown == report.expected
    assert report.kills >= 3 and report.sigterms == 1 and report.clean_exits
    assert report.tempfails > 0 and report.drops > 0 and report.retries > 0
    if settings.EMBEDDED_DATABASE:
        assert report.db_restarts == 1
    if idempotent:
        assert report.unknown == 0
    else:
        # the chunks on the wires at each kill, and each answer the receiver dropped after a
        # message's end (it may have kept the message: nobody can know)
        assert report.unknown <= report.kills * CONNECTIONS * HANDOFF_CHUNK + report.drops
    assert (tmp_path / f"chaos-{config.mode}.png").stat().st_size > 10_000
    assert (tmp_path / f"received-{config.mode}.jsonl").read_text().count("\n") >= report.accepted


def test_tallies_that_disagree_with_the_rows_fail_the_run():
    from dataclasses import MISSING, fields

    from growth.chaos.report import ChaosReport

    required = {f.name: 0 for f in fields(ChaosReport)
                if f.default is MISSING and f.default_factory is MISSING}
    report = ChaosReport(**{**required, "mode": "plain", "clean_exits": True, "tally_drift": 2})
    assert report.problems() == ["2 of the campaign's tallies disagree with its rows"]
