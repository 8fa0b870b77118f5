"""``run_sender`` that SIGKILLs itself at one named point of the cycle, for crash tests.

    python tests/crashing_sender.py <point> [run_sender options]

Points: during-build (rows inserted, not committed), after-claim (claim committed, nothing handed
over), after-send (a chunk accepted by the transport, not settled).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zylior.settings")


def die(*args, **kwargs):
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from growth.managers import sends

    point, options = sys.argv[1], sys.argv[2:]
    if point == "during-build":
        real_rowcount = sends.QUERIES.rowcount

        def insert_then_die(name, **params):
            real_rowcount(name, **params)
            die()

        sends.QUERIES.rowcount = insert_then_die
    elif point == "after-claim":
        from growth.sending import worker

        worker.Worker._deliver = die
    elif point == "after-send":  # the settle, alone or with the wire's next hand-over
        from growth.managers import leases

        real_hand_overs = sends.SendManager.settle_and_hand_over_many
        sends.SendManager.settle = lambda self, outcomes, **kw: die() if outcomes else {}
        leases.LeaseManager.settle = lambda self, lease_id, outcomes, **kw: die() if outcomes else {}
        sends.SendManager.settle_and_hand_over_many = lambda self, requests: (
            die() if any(request.outcomes for request in requests)
            else real_hand_overs(self, requests))
        real_lease_hand_overs = leases.LeaseManager.settle_and_hand_over_many
        leases.LeaseManager.settle_and_hand_over_many = lambda self, requests: (
            die() if any(request.settle for request in requests)
            else real_lease_hand_overs(self, requests))
    else:
        raise SystemExit(f"unknown point {point!r}")
    call_command("run_sender", *options)


if __name__ == "__main__":
    main()
