"""The audit after a chaos run: what the receiver got, against what the database says."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import F, Sum

from growth.chaos.fleet import Event
from growth.chaos.optouts import OptOut
from growth.chaos.receiver import ABSORBED, ACCEPTED, DROPPED, TEMPFAIL, Received
from growth.models import Send, SendTally


@dataclass
class ChaosReport:
    mode: str
    expected: int  # distinct addresses that should get the campaign
    rows_built: int
    accepted: int  # distinct keys the receiver delivered
    lost: int  # expected, but neither delivered, nor held as unknown, nor opted out
    duplicates: int  # keys delivered twice
    addresses_twice: int  # addresses delivered twice (under any key)
    absorbed: int  # resends the receiver absorbed on their key (idempotent mode)
    opted_out: int
    opted_out_then_delivered: int
    opted_out_already_delivered: int  # delivered before the opt-out (e.g. by a killed worker)
    unknown: int
    unknown_delivered: int  # unknown rows the receiver did get: the doubt was real both ways
    failed: int
    retries: int  # attempts beyond the first, over all rows
    tempfails: int
    drops: int
    kills: int
    sigterms: int
    clean_exits: bool
    db_restarts: int
    wall_time: float  # seconds
    tally_drift: int = 0  # (status, minute) tallies that disagree with the rows after the run
    unknown_keys: list[str] = field(default_factory=list)
    lost_keys: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.expected / self.wall_time if self.wall_time else 0.0

    def problems(self) -> list[str]:
        """What makes this run a failure (empty: a pass)."""
        problems = []
        if self.lost:
            problems.append(f"{self.lost} recipients lost")
        if self.opted_out_then_delivered:
            problems.append(f"{self.opted_out_then_delivered} delivered after their opt-out")
        if self.duplicates:
            problems.append(f"{self.duplicates} keys delivered twice")
        if self.addresses_twice:
            problems.append(f"{self.addresses_twice} addresses delivered twice")
        if self.rows_built != self.expected:
            problems.append(f"{self.rows_built} rows built for {self.expected} expected recipients")
        if not self.clean_exits:
            problems.append("a SIGTERMed worker did not exit 0")
        if self.tally_drift:
            problems.append(f"{self.tally_drift} of the campaign's tallies disagree with its rows")
        return problems

    def table(self) -> str:
        rows = [
            ("mode", self.mode),
            ("expected recipients", f"{self.expected:,}"),
            ("accepted by the receiver", f"{self.accepted:,}"),
            ("lost", f"{self.lost:,}"),
            ("duplicates (same key delivered twice)", f"{self.duplicates:,}"),
            ("same address delivered twice", f"{self.addresses_twice:,}"),
            ("resends absorbed by the receiver", f"{self.absorbed:,}"),
            ("opted out during the run", f"{self.opted_out:,}"),
            ("opted out, then delivered", f"{self.opted_out_then_delivered:,}"),
            ("  delivered before their opt-out", f"{self.opted_out_already_delivered:,}"),
            ("unknown rows (for an operator)", f"{self.unknown:,}"),
            ("  of which the receiver did get", f"{self.unknown_delivered:,}"),
            ("failed rows", f"{self.failed:,}"),
            ("retries", f"{self.retries:,}"),
            ("4xx answers / dropped connections", f"{self.tempfails:,} / {self.drops:,}"),
            ("SIGKILLs / SIGTERMs / database restarts",
             f"{self.kills} / {self.sigterms} / {self.db_restarts}"),
            ("tallies that disagree with the rows", f"{self.tally_drift:,}"),
            ("wall time", f"{self.wall_time:,.1f} s"),
            ("recipients per second", f"{self.rate:,.0f}"),
        ]
        width = max(len(label) for label, _ in rows)
        lines = [f"| {'what':<{width}} | {'figure':>12} |", f"|{'-' * (width + 2)}|{'-' * 13}:|"]
        lines += [f"| {label:<{width}} | {value:>12} |" for label, value in rows]
        return "\n".join(lines)


def audit(*, mode: str, campaign_id: int, expected_keys: set[str], received: list[Received],
          optouts: list[OptOut], events: list[Event], clean_exits: list[int],
          wall_time: float) -> ChaosReport:
    rows = dict(Send.objects.filter(campaign_id=campaign_id).values_list("job_id", "status"))
    by_status: dict[str, set[str]] = {}
    for key, status in rows.items():
        by_status.setdefault(status, set()).add(key)
    delivered = Counter(r.key for r in received if r.verdict == ACCEPTED)
    addresses = Counter(r.rcpt.lower() for r in received if r.verdict == ACCEPTED)
    opted_out = {o.key for o in optouts}
    locked_at = {o.key: o.locked_at for o in optouts}
    after_opt_out = {r.key for r in received
                     if r.key in locked_at and r.at > locked_at[r.key]
                     and r.verdict in (ACCEPTED, ABSORBED)}
    unknown = by_status.get("unknown", set())
    accounted = set(delivered) | unknown | opted_out
    lost = expected_keys - accounted
    retries = (Send.objects.filter(campaign_id=campaign_id, attempts__gt=1)
               .aggregate(n=Sum(F("attempts") - 1))["n"] or 0)
    verdicts = Counter(r.verdict for r in received)
    return ChaosReport(
        mode=mode,
        expected=len(expected_keys),
        rows_built=len(rows),
        accepted=len(delivered),
        lost=len(lost),
        duplicates=sum(1 for n in delivered.values() if n > 1),
        addresses_twice=sum(1 for n in addresses.values() if n > 1),
        absorbed=verdicts[ABSORBED],
        opted_out=len(opted_out),
        opted_out_then_delivered=len(after_opt_out),
        opted_out_already_delivered=len((opted_out & set(delivered)) - after_opt_out),
        unknown=len(unknown),
        unknown_delivered=len(unknown & set(delivered)),
        failed=len(by_status.get("failed", ())),
        retries=retries,
        tempfails=verdicts[TEMPFAIL],
        drops=verdicts[DROPPED],
        kills=sum(1 for e in events if e.kind == "kill"),
        sigterms=sum(1 for e in events if e.kind == "sigterm"),
        clean_exits=all(code == 0 for code in clean_exits),
        db_restarts=sum(1 for e in events if e.kind == "db-restart"),
        wall_time=wall_time,
        # the counts every admin page reads, kept by triggers through every kill and restart
        tally_drift=len(SendTally.objects.differences([campaign_id])),
        unknown_keys=sorted(unknown),
        lost_keys=sorted(lost),
    )
