"""Check the send protocol's model (send_protocol.pml) exhaustively with spin, and show that the
checks bite: each known-bad change to the protocol is checked too, and must be caught.

    python verify/check.py              # what `make verify` and CI run (a few minutes)
    python verify/check.py --long       # adds 2 rows x 2 workers (tens of minutes)
    python verify/check.py --mutants    # only the mutants, with their counterexamples
    python verify/check.py --stateful   # the SQL mutants of tests/protocol_mutants.py, each
                                        # against the stateful test on the real database

spin generates a C verifier (pan.c) for each configuration; gcc compiles it; pan explores every
reachable state. "states" below is the number of distinct states stored, each one a full
snapshot of the rows, the campaign and every process.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).with_name("send_protocol.pml")
# the next protocol, before it is built: a lease per batch behind a campaign cursor (issue 17)
LEASE_MODEL = Path(__file__).with_name("lease_protocol.pml")
ROOT = MODEL.parent.parent
MODES = {"plain": [], "idempotent": ["-DIDEMPOTENT"]}
# pan: depth bound (ample: the deepest run above needs under 400), hash table of 2^26 slots
PAN_ARGS = ["-m2000000", "-w26"]
PROPERTIES = [  # how spin quotes the failed assertion -> the property in the model's header
    ("claimed_by[r]==me", "P6 another took the row from the attempt on the wire"),
    ("current_ok", "P6 a late settle overwrote the current attempt's answer"),
    ("fresh[", "P1 two deliveries of one job id with no operator retry between them"),
    ("accepted[", "P2 a row 'sent' without a delivery"),
    ("clean", "P3 a delivery after an opt-out committed before the last check"),
    ("leased[", "P4 a 'sending' row without a lease"),
    ("status[0]==", "P5 a run that stops with a row not final"),
]
LEASE_PROPERTIES = [
    ("pending_out", "P6 a late settle overwrote the current claim's answer"),
    ("fresh[", "P1 two deliveries of one job id with no operator retry between them"),
    ("accepted[", "P2 a row 'sent' without a delivery"),
    ("clean", "P3 a delivery after an opt-out committed before the last check"),
    ("c<=1", "P4 two leases hold one row"),
    ("status[k]==QUEUED", "P4 a row in a lease written by another"),
    ("status[r]==QUEUED", "P6 a row written by another while its claim is on the wire"),
    ("status[0]==", "P5 a run that stops with a row not final"),
    ("!(due[k])", "P4 a row due again while a lease holds it"),
    ("k>=cursor", "P4 a queued row no claim can reach (behind the cursor, in no lease, not due)"),
]
PROPERTIES_OF = {MODEL: PROPERTIES, LEASE_MODEL: LEASE_PROPERTIES}


@dataclass(frozen=True)
class Bound:
    rows: int
    workers: int
    crashes: int
    paced: bool = True  # the lease model: a claim may set a paced row aside

    @property
    def defines(self) -> list[str]:
        return [f"-DROWS={self.rows}", f"-DWORKERS={self.workers}",
                f"-DMAX_CRASHES={self.crashes}", *([] if self.paced else ["-DPACED=0"])]

    def __str__(self) -> str:
        return f"{self.rows} row{'s' * (self.rows > 1)}, {self.workers} workers, " \
               f"{self.crashes} crash{'es' * (self.crashes > 1)}" + ", no pacing" * (not self.paced)


SMALL = Bound(rows=1, workers=2, crashes=1)
SAFETY_BOUNDS = [SMALL, Bound(rows=1, workers=3, crashes=1), Bound(rows=1, workers=2, crashes=2)]
LONG_BOUNDS = [Bound(rows=2, workers=2, crashes=1)]
# with rows set aside, the idempotent receiver's run passed 177 million states and 14 GB without
# finishing; without, it takes 81 million and minutes (pacing is checked at SMALL)
LEASE_LONG = Bound(rows=2, workers=1, crashes=1, paced=False)

# (flag, the change, modes it is checked in, why it may survive)
MUTANTS = [
    ("MUT_SETTLE_NO_OWNER", "settle without `claimed_by = %(worker_id)s`", None),
    ("MUT_SETTLE_ANY_ATTEMPT", "settle without `attempts = r.attempt` (owner by worker id only)",
     None),
    ("MUT_HANDOVER_NO_OWNER", "hand_over without `claimed_by = %(worker_id)s`", None),
    ("MUT_CHECK_IGNORES_OPTOUT", "the last opt-out check before the wire never blocks "
     "(hand_over, plain; `blocked`, idempotent)", None),
    ("MUT_SENT_BEFORE_WIRE", "'sent' committed before the wire, as the original write-up does",
     None),
    ("MUT_RECOVER_HANDED_TO_QUEUED", "recover_expired queues handed-over rows again whatever "
     "the receiver", None),
    ("MUT_UNLOCKED_CAMPAIGN_READ", "settle and recover read the campaign without locking it "
     "(the SQL before this model)", None),
    ("MUT_CLAIM_IGNORES_OPTOUT", "the claim does not re-check opt-outs",
     "the check before the wire stops the message anyway: the claim's check saves a lease; "
     "the stateful test catches it (a claim must never lease an opted-out address)"),
]


# (flag, the change, the modes it must be caught in). The ones a de-duplicating receiver makes
# harmless are only run plain: a BFS that finds nothing explores every state, minutes each. One
# survives by design and is not run: MUT_SETTLE_NO_OWNER (a take-over issues a new lease id, so
# the id alone names the claim). MUT_CLAIM_IGNORES_OPTOUT survived too until the idempotent
# receiver's check before the wire trusted the claim's look while the opt-out clock stands still:
# there the claim's look is one the wire relies on (the plain hand-over still reads every row).
BOTH, PLAIN, IDEMPOTENT = ("plain", "idempotent"), ("plain",), ("idempotent",)
LEASE_MUTANTS = [
    ("MUT_CURSOR_UNLOCKED", "the claim reads the cursor, then moves it, without its row lock",
     BOTH),
    ("MUT_TAKEOVER_KEEPS_ID", "a take-over keeps the lease's id: the settle's DELETE matches the "
     "lease and the worker, not the claim", IDEMPOTENT),
    ("MUT_SETTLE_UNGATED", "the settle writes its rows although its DELETE matched nothing", BOTH),
    ("MUT_HANDOVER_NO_OWNER", "the hand-over stamps a lease that is not this claim's", PLAIN),
    ("MUT_CHECK_IGNORES_OPTOUT", "the last opt-out check before the wire never blocks", BOTH),
    ("MUT_RECOVER_FREES_HANDED", "an expired lease handed to a plain receiver is freed too",
     PLAIN),
    ("MUT_CANCEL_TAKES_LEASED", "cancel also cancels the queued rows of live leases", BOTH),
    ("MUT_UNLOCKED_CAMPAIGN_READ", "settle and recovery read the campaign without locking it",
     BOTH),
    ("MUT_SET_ASIDE_NOT_DUE", "a paced row the cursor passes over is not made due again", PLAIN),
    ("MUT_CLAIM_IGNORES_OPTOUT", "the claim does not read opt-outs", IDEMPOTENT),
    ("MUT_OPTOUT_NO_TICK", "an opt-out leaves the tenant's opt-out clock alone", IDEMPOTENT),
]


@dataclass
class Run:
    errors: int
    states: int
    transitions: int
    seconds: float
    assertion: str
    trace: list[str]
    complete: bool


def run(defines: list[str], *, search: str = "dfs", model: Path = MODEL) -> Run:
    """One pan run: "dfs" (exhaustive, compressed), "bfs" (stops at a shortest counterexample)
    or "liveness" (acceptance cycles under weak fairness, for the LTL formula)."""
    with tempfile.TemporaryDirectory(prefix="spin-") as work:
        copy = Path(work) / model.name
        shutil.copy(model, copy)
        subprocess.run(["spin", "-a", *defines, copy.name], cwd=work, check=True,
                       capture_output=True)
        flags, pan_args = {
            "dfs": (["-O2", "-DCOLLAPSE", "-DSAFETY", "-DNOCLAIM"], PAN_ARGS),
            "bfs": (["-O0", "-DBFS", "-DSAFETY", "-DNOCLAIM"], [*PAN_ARGS[:1], "-w22"]),
            # NFAIR: fairness needs a copy of the state space per process, 2^NFAIR at most
            "liveness": (["-O2", "-DCOLLAPSE", "-DNFAIR=4"], [*PAN_ARGS, "-a", "-f"]),
        }[search]
        subprocess.run(["gcc", "-w", *flags, "-o", "pan", "pan.c"], cwd=work, check=True,
                       capture_output=True)
        started = time.monotonic()
        out = subprocess.run(["./pan", *pan_args], cwd=work, capture_output=True,
                             text=True).stdout
        seconds = time.monotonic() - started
        found = re.search(r"errors: (\d+)", out)
        if found is None:
            raise RuntimeError(f"pan did not finish ({' '.join(defines)}):\n{out[-2000:]}")
        errors = int(found.group(1))
        trace: list[str] = []
        assertion = ""
        if errors:
            replay = subprocess.run(["spin", "-t", *defines, copy.name], cwd=work,
                                    capture_output=True, text=True).stdout
            trace, assertion = readable(replay, PROPERTIES_OF[model])
            if "acceptance cycle" in out:
                assertion = "P5 a cycle in which a row never becomes final"
    return Run(errors=errors,
               states=int(float(re.search(r"([\d.e+]+) states, stored", out).group(1))),
               transitions=int(float(re.search(r"([\d.e+]+) transitions", out).group(1))),
               seconds=seconds, assertion=assertion, trace=trace,
               complete="max search depth too small" not in out)


# As many pan runs at once as the machine has cores (each pan is one process on one core; every
# run is independent), taken in the order they were submitted. One after the other, the lease
# model's two liveness runs alone took 15 minutes on a slow machine, the idempotent one 11.
POOL = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)


def submit(jobs: list[tuple[list[str], dict]]) -> list[Future]:
    """``run(defines, **options)`` for each job, in the pool."""
    return [POOL.submit(run, defines, **options) for defines, options in jobs]


def run_all(jobs: list[tuple[list[str], dict]]) -> list[Run]:
    return [future.result() for future in submit(jobs)]


def readable(replay: str, properties: list[tuple[str, str]]) -> tuple[list[str], str]:
    """The model's own printf lines of a counterexample, and the property it broke."""
    steps, assertion = [], ""
    for line in replay.splitlines():
        text = line.strip()
        if text.startswith("spin: text of failed assertion:"):
            assertion = property_of(text, properties)
        elif text.startswith("<<<<<START OF CYCLE"):
            steps.append("(from here the run repeats for ever)")
        elif text and not text.startswith(("ltl ", "spin:", "#processes", "Never")) \
                and not re.match(r"\d+:\s+proc|[\w\[\]]+ = |\d+ processes created", text):
            steps.append(text)
    return steps, assertion


def property_of(assertion: str, properties: list[tuple[str, str]]) -> str:
    for needle, name in properties:
        if needle in assertion:
            return name
    return assertion


def line(label: str, result: Run) -> str:
    verdict = "ok" if not result.errors else f"VIOLATED: {result.assertion}"
    return (f"  {label:<58} {result.states:>11,} states {result.transitions:>12,} transitions "
            f"{result.seconds:7.1f}s  {verdict}")


def check_protocol(bounds: list[Bound], *, liveness: bool) -> bool:
    ok = True
    print("Safety (P1-P4, P6 after every step; P5 where the run stops):", flush=True)
    safety = [(bound, mode, flags) for bound in bounds for mode, flags in MODES.items()]
    results = run_all([(bound.defines + flags, {}) for bound, _, flags in safety])
    for (bound, mode, _), result in zip(safety, results, strict=True):
        print(line(f"{bound}, {mode} receiver", result), flush=True)
        ok &= not result.errors and result.complete
        if result.errors:
            print("\n".join(f"      {step}" for step in result.trace))
    if liveness:
        print("Liveness (P5 as LTL `settles`, under weak fairness):", flush=True)
        results = run_all([(SMALL.defines + flags, {"search": "liveness"})
                           for flags in MODES.values()])
        for mode, result in zip(MODES, results, strict=True):
            print(line(f"{SMALL}, {mode} receiver", result), flush=True)
            ok &= not result.errors and result.complete
    return ok


def check_mutants() -> bool:
    ok = True
    print(f"\nMutants ({SMALL}): each known-bad change alone; a check must catch it.")
    results = iter(run_all([(SMALL.defines + flags + [f"-D{flag}=1"], {"search": "bfs"})
                            for flag, _, _ in MUTANTS for flags in MODES.values()]))
    for flag, change, may_survive in MUTANTS:
        caught = {mode: next(results) for mode in MODES}
        killed = [mode for mode, result in caught.items() if result.errors]
        print(f"\n- {change}  [{flag}]")
        if not killed:
            print(f"  survives: {may_survive or 'NOT CAUGHT'}")
            ok &= may_survive is not None
            continue
        for mode, result in caught.items():
            print(f"  {mode}: " + ("caught, " + result.assertion if result.errors
                                   else "not caught in this mode"))
        print_counterexample(killed[0], caught[killed[0]])
    return ok


def print_counterexample(mode: str, result: Run) -> None:
    print(f"  shortest counterexample ({mode} receiver):")
    print("\n".join(f"      {step}" for step in result.trace))
    print(f"      -> {result.assertion}")


@dataclass
class LeaseRuns:
    """The lease model's runs, submitted to the pool (``start_leases``): started before the row
    model's, the longest of them (the idempotent receiver's liveness) overlaps all the rest."""

    checks: list[tuple[Bound, str, str]]
    results: list[Future]
    mutants: list[Future]


def start_leases(*, long: bool = False) -> LeaseRuns:
    checks = [(bound, search, mode)
              for bound, search in [(SMALL, "liveness"), (SMALL, "dfs"),
                                    *([(LEASE_LONG, "dfs")] if long else [])]
              for mode in reversed(MODES)]  # the longest first: idempotent, liveness
    results = submit([(bound.defines + MODES[mode], {"search": search, "model": LEASE_MODEL})
                      for bound, search, mode in checks])
    mutants = submit([(SMALL.defines + MODES[mode] + [f"-D{flag}=1"],
                       {"search": "bfs", "model": LEASE_MODEL})
                      for flag, _, modes in LEASE_MUTANTS for mode in modes])
    return LeaseRuns(checks, results, mutants)


def check_leases(*, long: bool = False, runs: LeaseRuns | None = None) -> bool:
    """The lease protocol's model (lease_protocol.pml): safety, the LTL formula, and its mutants.
    A lease of 2 rows needs 1 worker to stay in minutes (2 rows x 2 workers did not finish in 15
    minutes a receiver): --long."""
    runs = runs or start_leases(long=long)
    ok = True
    print(f"\nThe next protocol, a lease per batch behind a cursor ({LEASE_MODEL.name}):",
          flush=True)
    for (bound, search, mode), future in zip(runs.checks, runs.results, strict=True):
        result = future.result()
        label = f"{bound}, {mode} receiver" + (", liveness" * (search == "liveness"))
        print(line(label, result), flush=True)
        ok &= not result.errors and result.complete
        if result.errors:
            print("\n".join(f"      {step}" for step in result.trace))
    results = iter(runs.mutants)
    for flag, change, modes in LEASE_MUTANTS:
        caught = {mode: next(results).result() for mode in modes}
        print(f"\n- {change}  [{flag}]")
        for mode, result in caught.items():
            print(f"  {mode}: " + ("caught, " + result.assertion if result.errors
                                   else "NOT CAUGHT"))
        ok &= all(result.errors for result in caught.values())
        killed = [mode for mode, result in caught.items() if result.errors]
        if killed:
            print_counterexample(killed[0], caught[killed[0]])
    return ok


def check_stateful_mutants() -> bool:
    """Each SQL mutant of tests/protocol_mutants.py, in memory, under its protocol's stateful test
    (the lease protocol's on the copies of its tables): it must fail, and hypothesis' shortest
    failing sequence of steps is shown."""
    sys.path.insert(0, str(ROOT))
    from tests.protocol_mutants import LEASE_MUTANTS, SURVIVE_BY_DESIGN
    from tests.protocol_mutants import MUTANTS as SQL_MUTANTS

    ok = True
    print("\nThe SQL's mutants against the stateful tests (real database):")
    runs = [(name, mutant, "tests/test_protocol_stateful.py", "keeps_its_promises", "PROTOCOL_MUTANT")
            for name, mutant in SQL_MUTANTS.items()]
    # 1,000 examples, beyond the lease test's default 600 (200 had missed the hand-over's blind
    # opt-out check)
    runs += [(name, mutant, "tests/test_lease_protocol_stateful.py", "keep_the_promises",
              "LEASE_MUTANT") for name, mutant in LEASE_MUTANTS.items()]
    for name, (block, old, new), test, selected, variable in runs:
        if name in SURVIVE_BY_DESIGN:
            print(f"\n- {name}: {block}: {old.strip()!r} -> {new.strip()!r}\n"
                  f"  survives by design, not run: {SURVIVE_BY_DESIGN[name]}")
            continue
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", test,
             "-k", selected],
            cwd=ROOT, capture_output=True, text=True,
            env={"LEASE_EXAMPLES": "1000", **os.environ, variable: name}).stdout
        caught = " failed" in out.splitlines()[-1] if out else False
        print(f"\n- {name}: {block}: {old.strip()!r} -> {new.strip()!r}  "
              f"({time.monotonic() - started:.0f}s)")
        if not caught:
            print("  NOT CAUGHT")
            ok = False
            continue
        # pytest quotes the failure on lines starting "E": the assertion, then hypothesis'
        # shortest failing sequence of steps (state.<rule>(...)) with the machine's notes
        quoted = [line[1:].strip() for line in out.splitlines() if line.startswith("E ")]
        print("  caught: " + (quoted[0] if quoted else "the test fails"))
        steps = [line for line in quoted if line.startswith("state.") and "keeps_its" not in line]
        print("\n".join(f"      {step}" for step in steps))
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--long", action="store_true", help="also 2 rows x 2 workers")
    parser.add_argument("--mutants", action="store_true", help="only the mutants")
    parser.add_argument("--leases", action="store_true",
                        help="only the lease protocol's model (issue 17's next protocol)")
    parser.add_argument("--stateful", action="store_true",
                        help="only the SQL mutants, against the stateful test")
    args = parser.parse_args()
    for tool in ("spin", "gcc"):
        if shutil.which(tool) is None:
            print(f"{tool} is missing (Debian: apt-get install {tool})", file=sys.stderr)
            return 2
    if args.stateful:
        return 0 if check_stateful_mutants() else 1
    if args.leases:
        return 0 if check_leases(long=args.long) else 1
    ok = True
    leases = start_leases(long=args.long)  # queued first: they take longest
    if not args.mutants:
        ok &= check_protocol(SAFETY_BOUNDS + (LONG_BOUNDS if args.long else []), liveness=True)
    ok &= check_mutants()
    ok &= check_leases(runs=leases)
    print("\n" + ("every check passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
