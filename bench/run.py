"""``python -m bench``: measure every family, print the table (ratios first), write the results.

Repetitions are the outer loop (every contender once, then all again), so that a noisy moment on
the machine is spread over all of them rather than landing on one. Nothing here imports Django
models at module level: the worker processes are fresh interpreters that import this package.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATABASE = os.environ.get("BENCH_DATABASE", "zylior_bench")  # another name: runs side by side
FAMILIES = ["ceiling", "minimal", "engine", "peers", "smtp", "build", "memory", "admin", "export", "profile",
            "pacing", "smtp-latency"]
OPT_IN = ["experiments", "directions", "huge", "tallies"]  # only with --only
EXPERIMENTS = ["indexes", "reported", "hot"]  # bench/experiments.py
QUICK = {"recipients": 10_000, "repetitions": 2, "procrastinate_jobs": 2_000, "dkim_recipients": 1_000,
         "build_subscribers": 100_000, "memory_sizes": "5000,50000", "admin_sends": 100_000,
         "export_sizes": "10000,100000", "pacing_seconds": 20.0, "pacing_sizes": "10000,100000"}


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part.strip()]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"a small run to check the harness: {QUICK} unless given")
    parser.add_argument("--recipients", type=int, help="N for ceiling, engine, peers, SMTP (100,000)")
    parser.add_argument("--repetitions", type=int, help="runs of each figure; the median is kept (3)")
    parser.add_argument("--batch-sizes", default="20,500")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--procrastinate-jobs", type=int,
                        help="jobs for procrastinate (10,000: at ~100 jobs/s, N would take ~17 min a run)")
    parser.add_argument("--smtp-workers", default="1,2")
    parser.add_argument("--smtp-batch", type=int, default=500)
    parser.add_argument("--dkim-recipients", type=int,
                        help="N of the SMTP family's DKIM runs, unsigned and signed (5,000: RSA "
                             "signs ~100 messages/s)")
    parser.add_argument("--latency-delays", default="0,20,50",
                        help="smtp-latency: ms the receiver waits before answering DATA (0,20,50)")
    parser.add_argument("--latency-connections", default="1,8,32",
                        help="smtp-latency: C, raw smtplib's threads and the engine's connections")
    parser.add_argument("--latency-seconds", type=float,
                        help="smtp-latency: N is scaled for raw smtplib to take about this long "
                             "(3; --quick: 1.5)")
    parser.add_argument("--latency-repetitions", type=int,
                        help="smtp-latency: runs of each figure (--repetitions; --quick: 1)")
    parser.add_argument("--latency-batch", type=int, default=20,
                        help="smtp-latency: the engine's batch per connection, --batch-size "
                             "20·C (a plain receiver needs ≥ 5·C)")
    parser.add_argument("--latency-chunks", default="",
                        help="smtp-latency: the plain receiver again at each of these "
                             "SENDER_HANDOFF_CHUNK (e.g. 20; default: only the engine's 5)")
    parser.add_argument("--latency-loads", default="",
                        help="smtp-latency: raw smtplib again beside a process keeping this many "
                             "cores busy (e.g. 0.4,0.8,1.2)")
    parser.add_argument("--latency-unprepared", action="store_true",
                        help="smtp-latency: the plain receiver again with "
                             "DATABASE_PREPARED_STATEMENTS off (plain-unprepared)")
    parser.add_argument("--latency-unpipelined", action="store_true",
                        help="smtp-latency: the plain receiver again against a sink that does "
                             "not advertise PIPELINING (plain-unpipelined)")
    parser.add_argument("--latency-rcpt", action="store_true",
                        help="smtp-latency: delay each RCPT's reply too")
    parser.add_argument("--build-subscribers", type=int, help="the build's account (1,000,000)")
    parser.add_argument("--memory-sizes", help="recipients of the memory runs (10000,1000000)")
    parser.add_argument("--memory-batch", type=int, default=500)
    parser.add_argument("--admin-sends", type=int, help="sends of the admin's campaign (1,000,000)")
    parser.add_argument("--export-sizes", help="recipients of the exported campaigns (10000,1000000)")
    parser.add_argument("--profile-batch", type=int, default=500)
    parser.add_argument("--experiments", default=",".join(EXPERIMENTS),
                        help="experiments: which of them (bench/experiments.py)")
    parser.add_argument("--pacing-limit", type=float, default=20.0,
                        help="messages/s the throttling receiver takes for Gmail (20)")
    parser.add_argument("--pacing-seconds", type=float, help="the goodput run's length (60)")
    parser.add_argument("--pacing-workers", type=int, default=2)
    parser.add_argument("--pacing-sizes", help="rows of the campaigns whose claim is explained "
                                               "(100000,1000000)")
    parser.add_argument("--pacing-batch", type=int, default=500, help="the explained claims' batch")
    parser.add_argument("--directions", default="v,a,b,c,d,e,f,g,h",
                        help="directions: which table shapes (bench/directions.py)")
    parser.add_argument("--huge-size", type=int,
                        help="huge: the campaign's recipients (10,000,000; --quick: 200,000)")
    parser.add_argument("--only", default=",".join(FAMILIES), help=f"some of {','.join(FAMILIES + OPT_IN)}")
    parser.add_argument("--out", type=Path, default=HERE / "out", help="logs, raw profiles, JSON")
    parser.add_argument("--publish", action=argparse.BooleanOptionalAction, default=None,
                        help="write bench/RESULTS.md and bench/results.png (default: when every "
                             "family ran)")
    args = parser.parse_args(argv)
    defaults = {"recipients": 100_000, "repetitions": 3, "procrastinate_jobs": 10_000,
                "dkim_recipients": 5_000,
                "build_subscribers": 1_000_000, "memory_sizes": "10000,1000000",
                "admin_sends": 1_000_000, "export_sizes": "10000,1000000",
                "pacing_seconds": 60.0, "pacing_sizes": "100000,1000000"}
    for name, value in (QUICK if args.quick else defaults).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.only = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = set(args.only) - set(FAMILIES) - set(OPT_IN)
    if unknown:
        parser.error(f"unknown families: {', '.join(sorted(unknown))}")
    if args.publish is None:
        args.publish = args.only == FAMILIES
    return args


def setup_django() -> None:
    sys.path.insert(0, str(HERE.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zylior.settings")
    import django

    django.setup()


def fresh_database() -> None:
    """An empty, migrated database of the bench's own (as ``manage.py chaos`` makes one)."""
    from django.db import connection

    connection.settings_dict["TEST"] = {**connection.settings_dict.get("TEST", {}), "NAME": DATABASE}
    connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def measure(args: argparse.Namespace) -> dict:
    from bench import data, machine, procs

    results: dict = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                     "machine": machine.describe(), "throughput": [], "smtp": []}
    batches, workers = _ints(args.batch_sizes), _ints(args.workers)
    want = set(args.only)
    audience = None
    if want & {"ceiling", "engine", "peers", "smtp"}:
        audience = data.audience(args.recipients)
        say(f"{audience.size:,} recipients generated in {audience.seconds:.1f} s")
    series: dict[tuple, list[float]] = {}
    cpu: dict[tuple, list[float]] = {}  # the throughput family's busy CPU-seconds, each run's
    signing: list[dict[str, float]] = []  # DKIM: µs to sign one message, per repetition
    sampler = procs.CpuSampler()

    def record(system: str, batch: int | None, count: int, jobs: int, seconds: float) -> None:
        series.setdefault((system, batch, count, jobs), []).append(seconds)
        line = f"  {system:<18} batch {batch or '-':>4}  workers {count}  {jobs / seconds:>9,.0f} /s"
        window = _clocked_window(system)
        if window is not None:
            # the whole machine's: the workers', PostgreSQL's and the bench's own polling
            busy = sampler.busy_between(*window)
            cpu.setdefault((system, batch, count, jobs), []).append(busy)
            line += f"  CPU {busy / jobs * 1e6:,.0f} µs a recipient"
        say(line)

    with sampler:
        _repetitions(args, want, batches, workers, audience, record, signing)
    for (system, batch, count, jobs), seconds in series.items():
        entry = {"system": system, "batch": batch, "workers": count, "jobs": jobs, "seconds": seconds}
        if (system, batch, count, jobs) in cpu:
            entry["cpu_seconds"] = cpu[system, batch, count, jobs]
        results["smtp" if system.startswith(("smtp", "smtplib")) else "throughput"].append(entry)

    if signing:
        results["dkim"] = {"recipients": args.dkim_recipients, "batch": args.smtp_batch,
                           "signing_us": {k: [rep[k] for rep in signing] for k in signing[0]}}
    if "build" in want:
        results["build"] = _build(args)
    if "memory" in want:
        results["memory"] = _memory(args)
    if "admin" in want:
        results["admin"] = _admin(args)
    if "export" in want:
        from bench import export

        results["export"] = export.measure(_ints(args.export_sizes), out=args.out, say=say)
    if "profile" in want:
        results["profile"] = _profile(args)
    if "pacing" in want:
        results["pacing"] = _pacing(args)
    if "experiments" in want:
        results["experiments"] = _experiments(args)
    if "directions" in want:
        results["directions"] = _directions(args)
    if "tallies" in want:
        results["tallies"] = _tallies(args)
    if "huge" in want:
        from bench import huge

        results["huge"] = huge.measure(size=args.huge_size or (200_000 if args.quick else 10_000_000),
                                       out=args.out, say=say)
    if "smtp-latency" in want:
        results["smtp_latency"] = _smtp_latency(args)
    results["machine"]["load"] += f"; at the end: {machine.load()}"
    return results


def _repetitions(args, want, batches, workers, audience, record, signing) -> None:
    for rep in range(1, args.repetitions + 1):
        say(f"repetition {rep} of {args.repetitions}")
        for batch in batches:
            for count in workers:
                _throughput(want, args, audience, batch, count, record)
        if "peers" in want:
            from bench import peers

            for count in workers:
                record("procrastinate", None, count, args.procrastinate_jobs,
                       peers.procrastinate_run(jobs=args.procrastinate_jobs, workers=count))
        if "smtp" in want:
            _smtp(args, audience, record)
            signing.append(_dkim(args, record))


def _clocked_window(system: str) -> tuple[float, float] | None:
    """The clock of the run just recorded, epoch seconds: the engine's (campaign resumed to
    finished), or a pool's (the go to the last worker's end); None for the SMTP family's."""
    from bench import engine, procs

    if system == "engine":
        return engine.last_window
    if system in ("ceiling", "ceiling+hand_over", "minimal ceiling", "pgqueuer", "procrastinate"):
        return procs.last_window
    return None


def _throughput(want, args, audience, batch, count, record) -> None:
    from bench import ceiling, engine, peers

    n = args.recipients
    if "ceiling" in want:
        record("ceiling", batch, count, n,
               ceiling.run(audience=audience, batch_size=batch, workers=count, hand_over=False))
        record("ceiling+hand_over", batch, count, n,
               ceiling.run(audience=audience, batch_size=batch, workers=count, hand_over=True))
    if "minimal" in want:
        from bench import minimal

        record("minimal ceiling", batch, count, n,
               minimal.run(size=n, batch_size=batch, workers=count))
    if "engine" in want:
        record("engine", batch, count, n,
               engine.run(audience=audience, batch_size=batch, workers=count, out=args.out))
    if "peers" in want:
        record("pgqueuer", batch, count, n, peers.pgqueuer_run(jobs=n, workers=count, batch_size=batch))


def _smtp(args, audience, record) -> None:
    from bench import smtp

    with smtp.Sink() as sink:
        for count in _ints(args.smtp_workers):
            record("smtplib", None, count, audience.size,
                   smtp.raw_run(audience=audience, workers=count, sink=sink))
            for idempotent in (False, True):
                record(f"smtp engine {'idempotent' if idempotent else 'plain'}", args.smtp_batch,
                       count, audience.size,
                       smtp.engine_run(audience=audience, workers=count, batch_size=args.smtp_batch,
                                       sink=sink, idempotent=idempotent, out=args.out))


def _dkim(args, record) -> dict[str, float]:
    """The SMTP path unsigned and DKIM-signed (RSA-2048, Ed25519), engine (plain receiver, the
    default) and raw smtplib, one connection, on an audience of its own; and what signing one
    message costs in process."""
    from bench import data, smtp

    audience = data.audience(args.dkim_recipients)
    with smtp.Sink() as sink:
        for algorithm in (None, *smtp.DKIM):
            label = algorithm or "unsigned"
            record(f"smtplib dkim {label}", None, 1, audience.size,
                   smtp.raw_run(audience=audience, workers=1, sink=sink, dkim=algorithm))
            record(f"smtp engine dkim {label}", args.smtp_batch, 1, audience.size,
                   smtp.engine_run(audience=audience, workers=1, batch_size=args.smtp_batch,
                                   sink=sink, idempotent=False, out=args.out, dkim=algorithm))
    cost = smtp.signing_cost(audience)
    say("  DKIM signing, one message: " + ", ".join(f"{k} {cost[k]:,.0f} µs" for k in smtp.DKIM))
    return cost


def _smtp_latency(args) -> dict:
    """Raw smtplib and the engine (plain and idempotent receiver) on C connections each, against
    a receiver that answers DATA after a delay (``bench.smtp_latency``)."""
    from bench import smtp_latency

    return smtp_latency.measure(
        delays_ms=_ints(args.latency_delays), connections=_ints(args.latency_connections),
        seconds=args.latency_seconds or (1.5 if args.quick else 3.0),
        repetitions=args.latency_repetitions or (1 if args.quick else args.repetitions),
        per_connection=args.latency_batch, rcpt=args.latency_rcpt, out=args.out, say=say,
        chunks=_ints(args.latency_chunks),
        loads=_floats(args.latency_loads), unprepared=args.latency_unprepared,
        unpipelined=args.latency_unpipelined)


def _build(args) -> dict:
    from bench import build, data

    audience = data.audience(args.build_subscribers)
    say(f"build: {audience.size:,}-subscriber account generated in {audience.seconds:.1f} s")
    seconds: dict[str, list[float]] = {}
    for rep in range(args.repetitions):
        for way, value in build.run(audience=audience).items():
            seconds.setdefault(way, []).append(value)
        say(f"  build {rep + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in seconds.items()))
    return {"size": audience.size, "generated_in": audience.seconds, "seconds": seconds}


def _tallies(args) -> dict:
    """What growth_sends' tally triggers (migration 0015) cost: the engine (null transport) at
    each batch size and worker count, and the build, with the triggers on and off, in turn
    within each repetition. Ratios: seconds on / seconds off (1.0: free)."""
    from contextlib import nullcontext
    from statistics import median

    from bench import build, data, engine

    audience = data.audience(args.recipients)
    say(f"tallies: {audience.size:,} recipients generated in {audience.seconds:.1f} s")
    seconds: dict[str, list[float]] = {}
    for _ in range(args.repetitions):
        for batch in _ints(args.batch_sizes):
            for count in _ints(args.workers):
                for state, switch in (("on", nullcontext), ("off", data.without_tallies)):
                    with switch():
                        took = engine.run(audience=audience, batch_size=batch, workers=count,
                                          out=args.out, name=f"tallies-{state}")
                    seconds.setdefault(f"engine b{batch} w{count} {state}", []).append(took)
                    say(f"  tallies {state:<3} engine batch {batch:>4} workers {count} "
                        f"{audience.size / took:>9,.0f} /s")
        for way, took in build.run(audience=audience, tallies=True).items():
            if way in ("engine", "engine without tallies"):
                seconds.setdefault(f"build {'off' if 'without' in way else 'on'}", []).append(took)
        _tallies_on_the_wire(args, seconds)
    ratios = {}
    for key in seconds:
        if key.endswith(" on"):
            base = key[:-3]
            ratios[base] = median(seconds[key]) / median(seconds[f"{base} off"])
            say(f"  tallies: {base}: on ÷ off {ratios[base]:.2f}× the time")
    return {"size": audience.size, "seconds": seconds, "on_over_off": ratios}


def _tallies_on_the_wire(args, seconds: dict[str, list[float]]) -> None:
    """The plain SMTP path, where a statement settles and hands over 5 messages (the most
    statements a message): C connections against a receiver answering after 0 and 20 ms."""
    from contextlib import nullcontext

    from bench import data, smtp, smtp_latency

    connections = max(_ints(args.latency_connections))
    with smtp.Sink() as sink:
        for point in smtp_latency.plan(delays_ms=[0, 20], connections=[connections],
                                       seconds=args.latency_seconds or 3.0,
                                       per_connection=args.latency_batch):
            sink.answer_after(point.delay_ms / 1000, rcpt=0.0)
            audience = data.audience(point.recipients)
            for state, switch in (("on", nullcontext), ("off", data.without_tallies)):
                with switch():
                    took = smtp.engine_run(audience=audience, workers=1, batch_size=point.batch,
                                           sink=sink, idempotent=False, out=args.out,
                                           connections=connections, name=f"tallies-smtp-{state}")
                key = f"plain SMTP {point.delay_ms} ms C{connections}"
                seconds.setdefault(f"{key} {state}", []).append(took)
                say(f"  tallies {state:<3} {key}: {point.recipients / took:,.0f} /s")


def _memory(args) -> dict:
    from bench import data, engine

    sizes = {}
    for size in _ints(args.memory_sizes):
        audience = data.audience(size)
        peak, seconds = engine.peak_rss(audience=audience, batch_size=args.memory_batch, out=args.out)
        sizes[size] = {"peak": peak, "seconds": seconds}
        say(f"memory: {size:,} recipients, peak RSS {peak / 2**20:.1f} MiB ({seconds:.0f} s)")
    return {"batch": args.memory_batch, "sizes": sizes}


def _admin(args) -> dict:
    from bench import admin_pages, data

    audience = data.audience(args.admin_sends)
    campaign_id = admin_pages.big_campaign(audience)
    pages = admin_pages.run(campaign_id=campaign_id, repetitions=max(args.repetitions, 5))
    for label, page in pages.items():
        say(f"admin: {label} {page['ms']:.0f} ms, {page['queries']} queries (HTTP {page['status']})")
    return {"sends": audience.size, "pages": pages}


def _profile(args) -> dict:
    from bench import data, hotspots, smtp

    audience = data.audience(args.recipients)
    spy = hotspots.spy(audience=audience, batch_size=args.profile_batch, out=args.out)
    spy["top_self"] = hotspots.top_self(Path(spy["raw"]))
    say(f"profile: py-spy over {audience.size:,} recipients ({spy['seconds']:.1f} s)")
    with smtp.Sink() as sink:  # the SMTP path, plain receiver (the default), one connection
        smtp_spy = hotspots.spy(audience=audience, batch_size=args.profile_batch, out=args.out,
                                name="smtp", env={"EMAIL_URL": sink.url})
    smtp_spy["top_self"] = hotspots.top_self(Path(smtp_spy["raw"]))
    say(f"profile: py-spy over the SMTP path ({smtp_spy['seconds']:.1f} s)")
    costs = {"engine (py-spy run)": spy}
    for hand_over in (False, True):
        name = "ceiling+hand_over" if hand_over else "ceiling"
        costs[name] = hotspots.ceiling_cost(audience=audience, batch_size=args.profile_batch,
                                            hand_over=hand_over)
    for name, cost in costs.items():
        say(f"profile: {name}: {cost['wal_per_recipient']:,.0f} WAL bytes, "
            f"{cost['updates_per_recipient']:.2f} row updates ({cost['hot_share']:.0%} HOT) per recipient")
    explain = hotspots.explain(audience=audience, batch_size=args.profile_batch, out=args.out)
    say("profile: " + "; ".join(f"{moment}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items())
                                for moment, ms in explain.items()))
    return {"batch": args.profile_batch, "size": audience.size, "spy": spy, "smtp_spy": smtp_spy,
            "explain": explain,
            "costs": {name: {k: v for k, v in cost.items() if k not in ("phases", "raw", "top_self")}
                      for name, cost in costs.items()},
            "indexes": hotspots.indexes()}


def _pacing(args) -> dict:
    from bench import pacing

    runs = {}
    for variant, configured in (("cold", None), ("configured", 2 * args.pacing_limit)):
        run = runs[variant] = pacing.goodput(limit=args.pacing_limit, seconds=args.pacing_seconds,
                                             workers=args.pacing_workers, out=args.out,
                                             configured=configured)
        say(f"pacing: Gmail throttled at {run['limit']:g}/s, Google's bucket "
            f"{'made by the first throttle' if configured is None else f'configured at {configured:g}/s'}"
            f", {run['workers']} workers, {run['seconds']:.0f} s: {run['accepted']:,} accepted, "
            f"{run['deferred']:,} deferred; goodput {run['goodput']:.2f}× the limit (steady part), "
            f"{run['goodput_whole']:.2f}× (whole run)")
    claims = pacing.explain(sizes=_ints(args.pacing_sizes), batch=args.pacing_batch,
                            out=args.out, say=say)
    return {"goodput": runs, "batch": args.pacing_batch, "explain_runs": pacing.EXPLAIN_RUNS,
            "claims": claims}


def _experiments(args) -> dict:
    from bench import data, experiments

    which = args.experiments.split(",")
    if unknown := set(which) - set(EXPERIMENTS):
        raise SystemExit(f"--experiments: no experiment {', '.join(sorted(unknown))} "
                         f"(there are {', '.join(EXPERIMENTS)})")
    audience = data.audience(args.recipients)
    results = {}
    if "indexes" in which:
        results["indexes"] = experiments.indexes(audience=audience, batch_size=args.profile_batch,
                                                 repetitions=args.repetitions, out=args.out)
        for variant, rates in results["indexes"].items():
            say(f"experiment: {variant}: " + ", ".join(f"{k} {v:,.0f} /s" for k, v in rates.items()))
    if "reported" in which:
        reported = results["reported"] = experiments.reported(
            audience=audience, batch_size=args.profile_batch, repetitions=args.repetitions,
            out=args.out, say=say)
        for variant, runs in reported["seconds"].items():
            say(f"experiment: {variant}: " + ", ".join(f"{s:.2f}" for s in runs) + " s")
        say(f"experiment: the reported flags' time ÷ without them: {reported['ratio']:.2f}×")
    if "hot" in which:
        hot = results["hot"] = experiments.hot(
            audience=audience, batch_size=args.profile_batch, workers=_ints(args.workers),
            repetitions=args.repetitions, out=args.out, say=say)
        for count, runs in hot.items():
            say(f"experiment: HOT settle, {count} worker(s): as migrated ÷ HOT, median of the "
                f"rounds: {runs['ratio']:.2f}× (above 1: the HOT settle is faster)")
    return results


def _directions(args) -> dict:
    from bench import data, directions

    audience = data.audience(args.recipients)
    return directions.measure(audience=audience, batch_size=args.profile_batch,
                              workers=_ints(args.workers), repetitions=args.repetitions,
                              out=args.out, keys=args.directions.split(","), say=say)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    setup_django()
    fresh_database()
    say(f"fresh database {DATABASE!r}; families: {', '.join(args.only)}")
    results = measure(args)
    (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str))

    from bench import report

    text = report.markdown(results, chart="results.png")
    print("\n" + text)
    (args.out / "RESULTS.md").write_text(text)
    report.chart(results, args.out / "results.png")
    if args.publish:
        (HERE / "RESULTS.md").write_text(text)
        shutil.copy(args.out / "results.png", HERE / "results.png")
        shutil.copy(args.out / "results.json", HERE / "results.json")
        say(f"written: {HERE / 'RESULTS.md'}, {HERE / 'results.png'}")
    else:
        say(f"written: {args.out / 'RESULTS.md'} (bench/RESULTS.md left as it was: partial run)")
