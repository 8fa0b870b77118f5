"""Deliberate bugs in the send protocol's SQL, for checking that a test can catch them.

A mutant replaces one piece of text in one loaded statement, in memory only (the ``.sql`` files
are never touched): ``mutated(name)`` patches the statement for the duration of a ``with`` block.
A mutant whose text is no longer found exactly once in its statement raises, so an edit of the
SQL cannot turn a mutant into a silent no-op.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager

# The settle's judgement of the receiver's answer that another message holds our key
# (sends._settled_outcome, which both protocols' settles share), and a mutant of it.
_KEY_TAKEN_IN_DOUBT = "WHEN r.outcome IN ('in_doubt', 'key_taken', 'forgotten') THEN 'unknown'"
_KEY_TAKEN_RETRIED = ("WHEN r.outcome = 'key_taken' THEN 'queued'\n"
                      "    WHEN r.outcome IN ('in_doubt', 'forgotten') THEN 'unknown'")

# name: ("<file>.<block>" of growth/managers/<file>.sql, text found in the loaded statement,
#        the text that replaces it)
MUTANTS: dict[str, tuple[str, str, str]] = {
    "settle_ignores_owner": (
        "sends.settle", "\n   AND s.claimed_by = %(worker_id)s", ""),
    "settle_ignores_attempt": (
        "sends.settle", "\n   AND s.attempts = r.attempt", ""),
    "settle_ignores_claim": (
        "sends.settle", "\n   AND s.claimed_by = %(worker_id)s\n   AND s.attempts = r.attempt", ""),
    "hand_over_ignores_owner": (
        "sends.hand_over", "\n   AND s.claimed_by = %(worker_id)s", ""),
    "blocked_never_blocks": (
        "sends.blocked", "AND ((SELECT sub.status", "AND false AND ((SELECT sub.status"),
    "claim_ignores_opt_outs": (
        "sends.claim", "AND ((SELECT sub.status", "AND false AND ((SELECT sub.status"),
    "recover_requeues_for_plain_receiver": (
        "sends.recover_expired", "WHEN %(idempotent)s AND s.attempts", "WHEN s.attempts"),
    "build_ignores_created_at": (
        "sends.build_recipients", "ORDER BY s.email_lower, s.created_at, s.id",
        "ORDER BY s.email_lower, s.id"),
    "hand_over_marks_sent": (
        "sends.hand_over", "ELSE 'sending' END", "ELSE 'sent' END"),
    # the receiver holds another message under the key, and the row is queued again (due at
    # once) as if it were a failure to retry, not left 'unknown' for an operator
    "settle_retries_key_taken": (
        "sends.settle", _KEY_TAKEN_IN_DOUBT, _KEY_TAKEN_RETRIED),
}

# Mutants that no test can catch, with why; verify/check.py --stateful names them and runs none.
SURVIVE_BY_DESIGN: dict[str, str] = {
    "hand_over_ignores_owner": (
        "the hand-over also requires the row 'sending' under its claim's own lease, to the "
        "microsecond, and only a claim gives a row a lease, naming its worker in the same "
        "statement: the owner adds nothing unless two workers' leases end in one microsecond"),
}


# The lease protocol's (growth/managers/leases.sql), on the copies its stateful test runs
# (tests/lease_statements.py, the names of bench.directions.statements()): each must make
# tests/test_lease_protocol_stateful.py fail (LEASE_MUTANT=<name>; verify/check.py --stateful).
LEASE_MUTANTS: dict[str, tuple[str, str, str]] = {
    # a late settle (its lease taken over) writes the rows another worker now holds
    "lease_settle_ignores_its_lease": (
        "leases.settle", "(s.id IN (SELECT unnest(send_ids) FROM ended)\n", "(true\n"),
    # a plain receiver's last check before the wire sees no opt-out
    "lease_hand_over_ignores_opt_outs": (
        "leases.hand_over", "AS blocked\n", "AND false AS blocked\n"),
    # a receiver that de-duplicates: the look before the wire trusts the claim's, though the
    # tenant's opt-outs moved since
    "lease_check_trusts_a_moved_clock": (
        "sends.opt_outs_moved", "<> %(seen)s::bigint AS moved",
        "<> %(seen)s::bigint AND false AS moved"),
    # a lease handed to a plain receiver is taken over and sent again
    "lease_recover_frees_handed_for_plain_receiver": (
        "leases.recover", "(%(idempotent)s AND l.takeovers + 1", "(l.takeovers + 1"),
    # a claim walks from the campaign's first row, not from its cursor
    "lease_claim_ignores_the_cursor": (
        "leases.claim", "(%(campaign_id)s, (SELECT claimed_to FROM cursor))",
        "(%(campaign_id)s, 0)"),
    # a receiver that de-duplicates holds another message under the key, and the lease's settle
    # queues the row again instead of leaving it 'unknown' for an operator
    "lease_settle_retries_key_taken": (
        "leases.settle", _KEY_TAKEN_IN_DOUBT, _KEY_TAKEN_RETRIED),
}


@contextmanager
def mutated(name: str | None) -> Iterator[None]:
    """Run the block under the mutant ``name`` (nothing changes for None or "")."""
    if not name:
        yield
        return
    block, old, new = MUTANTS[name]
    module, statement = block.split(".")
    with _patched(importlib.import_module(f"growth.managers.{module}").QUERIES.statements,
                  statement, old, new, name=name):
        yield


@contextmanager
def lease_mutated(name: str | None, statements: dict[str, str]) -> Iterator[None]:
    """As :func:`mutated`, for a lease mutant on ``statements`` (the copies' SQL by name)."""
    if not name:
        yield
        return
    block, old, new = LEASE_MUTANTS[name]
    with _patched(statements, block, old, new, name=name):
        yield


@contextmanager
def _patched(statements: dict[str, str], key: str, old: str, new: str, *,
             name: str) -> Iterator[None]:
    original = statements[key]
    found = original.count(old)
    if found != 1:
        raise LookupError(f"mutant {name!r}: {old!r} occurs {found} times in {key}, not once")
    statements[key] = original.replace(old, new)
    try:
        yield
    finally:
        statements[key] = original
