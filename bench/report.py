"""The results as a table (ratios first), as bench/RESULTS.md, and as a chart."""

from __future__ import annotations

import statistics
from pathlib import Path

PEER_BATCH = 500  # the batch size the targets are set for
METHOD = """\
How each figure is taken (details in each module's docstring under `bench/`):

- **recipients/s** = N / seconds; the median of the repetitions is shown, with the spread
  (max − min) / median of the runs beside it when it is over 10 %.
- **CPU a recipient** (throughput family): the whole machine's busy CPU-seconds (`/proc/stat`,
  sampled every 20 ms) over each run's clock, ÷ N: the workers, PostgreSQL when it runs on the
  same machine, and the bench's own polling; another load on the machine would count too.
- **engine**: real `run_sender` processes, `SENDER_TRANSPORT=growth.sending.transports.null.NullTransport`
  (every message rendered to bytes, none sent), logging at INFO. Recipients are built (by the
  engine's build), `growth_sends` is VACUUM ANALYZEd (so every contender starts from the same
  table and statistics; in production the first claims after a big build can run on stale
  statistics: see FINDINGS.md) and the campaign paused before the workers start; timed from the
  campaign's resume to its `finished_at`, both by the database's clock. Worker start-up is not on
  the clock.
- **ceiling**: the engine's own `claim` and `settle` statements from `growth/managers/sends.sql`,
  verbatim, in a bare psycopg loop, one process per worker, autocommit (one round trip each), same
  batch size. **ceiling+hand_over** adds the engine's `hand_over` once per batch: what the engine
  does with an idempotent transport such as the null one, whose chunk is the whole batch. The
  targets are against the plain ceiling (claim + settle, as the issue defines it); the second
  column says how much of the gap the hand-over statement itself explains.
- **minimal ceiling** (`bench/minimal.py`): the simplest two-phase send on a table with only
  what the mission needs (id, campaign, address, status, `claimed_by`, lease; the primary key, a
  unique `(campaign_id, email)` and the claim's partial `(campaign_id, id) WHERE status =
  'queued'`): claim (`FOR UPDATE SKIP LOCKED`, queued → sending) then settle (→ sent), same batch
  and worker processes, committing without waiting for the flush as the engine's claim and settle
  do (the engine-statements ceiling above waits for it). What any at-most-once sender on
  PostgreSQL writes at the least; the engine's target is 0.6× it.
- **pgqueuer** (asyncpg driver, `batch_size` = the batch size, drain mode) and **procrastinate**
  (one job per fetch: no batch size; concurrency 1 per process) run async no-op tasks, one job per
  recipient, one process per worker; enqueueing is not on the clock, and their tables are VACUUM
  ANALYZEd once the jobs are in, as the engine's `growth_sends` is once its rows are built.
- **SMTP**: an aiosmtpd sink on loopback in its own process, advertising PIPELINING as real
  relays do (the engine sends each envelope in one write; smtplib cannot). `run_sender` with the
  default Django SMTP backend (plain receiver: a hand-over commit every `SENDER_HANDOFF_CHUNK` = 5
  messages; and idempotent: one per batch) against a raw `smtplib` loop sending pre-built copies of
  the engine's own message over as many connections as there are workers.
- **DKIM**: the same engine (plain receiver) and raw loop, one connection, on an audience of
  their own, unsigned and signed with a platform key (`DKIM_*` settings; RSA-2048 and Ed25519,
  dkimpy, relaxed/relaxed); the raw loop signs each copy on the clock, and the sink checks that
  every message came signed. Beside them, the median time to sign the engine's message once,
  in process.
- **SMTP with latency** (`smtp-latency`): the same sink, answering DATA after 0, 20 or 50 ms
  (`asyncio.sleep`: it serves every connection meanwhile), against one process on C connections:
  raw `smtplib` (C threads, one client each, pre-built copies of the engine's message from one
  shared queue) and one `run_sender` with `SENDER_CONNECTIONS=C`, batch 20·C (a plain receiver
  needs ≥ 5·C for each wire to get a 5-message chunk), plain and idempotent receiver. N is scaled
  so that raw smtplib takes a few seconds (whole batches, at least 3).
- **build**: `Send.objects.build_recipients` vs the same INSERT…SELECT alone vs a plain
  INSERT…SELECT of the same rows, each on an emptied `growth_sends` after a CHECKPOINT.
- **memory**: one `run_sender --until-idle` over a whole campaign (build included); peak RSS is
  the kernel's high-water mark (VmHWM), polled every 20 ms with psutil.
- **admin**: Django's test Client in process, logged-in superuser, median server time.
- **pacing**: real `run_sender` processes (SMTP, plain receiver, production pacing settings)
  against `growth.chaos.throttling.ThrottlingReceiver`, which takes Gmail's mail at most at the
  limit (a token bucket) and answers `421 4.7.28` beyond, for the whole run, and everyone else's
  at once; goodput is Gmail's messages accepted a second over the run's last two thirds ÷ the
  limit. Google's bucket is either made by the first throttle (what happens when nobody
  configured one) or configured at twice the limit. The claim's cost: EXPLAIN (ANALYZE, BUFFERS)
  of `claim_paced` and of the plain `claim` on one campaign whose first 60 % of rows belong to
  a destination out of tokens (4 more paced ones and unpaced rows follow), the median of 7
  runs after a warm-up, each rolled back; buffers are shared hit + read of the whole statement.
"""


def _median_rate(entry: dict) -> float:
    return entry["jobs"] / statistics.median(entry["seconds"])


def _spread(entry: dict) -> float:
    rates = [entry["jobs"] / s for s in entry["seconds"]]
    return (max(rates) - min(rates)) / statistics.median(rates) if len(rates) > 1 else 0.0


def _find(entries: list[dict], system: str, batch: int | None, workers: int) -> dict | None:
    for entry in entries:
        if entry["system"] == system and entry["batch"] == batch and entry["workers"] == workers:
            return entry
    return None


def _rate(entries, system, batch, workers) -> float | None:
    entry = _find(entries, system, batch, workers)
    return _median_rate(entry) if entry else None


def _cell(entries, system, batch, workers) -> str:
    entry = _find(entries, system, batch, workers)
    if entry is None:
        return "–"
    spread = _spread(entry)
    return f"{_median_rate(entry):,.0f}" + (f" (±{spread / 2:.0%})" if spread > 0.10 else "")


def _cpu_each(entries, system, batch, workers) -> float | None:
    """Median busy CPU-seconds of the machine a recipient, over a contender's runs."""
    entry = _find(entries, system, batch, workers)
    if entry is None or not entry.get("cpu_seconds"):
        return None
    return statistics.median(entry["cpu_seconds"]) / entry["jobs"]


def _cpu(through: list[dict], batches: list[int], *, cores: int | None) -> list[str]:
    """What each recipient cost the machine in CPU, beside what each contender reached."""
    if not any(e.get("cpu_seconds") for e in through):
        return []
    systems = ["engine", "ceiling", "ceiling+hand_over", "minimal ceiling", "pgqueuer"]
    out = ["", "### CPU a recipient (µs; the whole machine's busy CPU over each run's clock, medians)",
           "", "Every process counts: the workers, PostgreSQL, and the bench's own look at the clock. "
           "Where they share the cores, a contender that keeps them all busy settles cores ÷ its CPU "
           "a recipient; when two do, the engine's rate ÷ the other's is the other's CPU a "
           "recipient ÷ the engine's (the columns \"saturated\").", "",
           "| batch | workers | " + " | ".join(systems)
           + " | cores busy (engine) | saturated ÷ pgqueuer | saturated ÷ minimal ceiling |",
           "|---|---|" + "---|" * (len(systems) + 3)]
    for batch in batches:
        for w in sorted({e["workers"] for e in through}):
            each = {s: _cpu_each(through, s, batch, w) for s in systems}
            if not any(each.values()):
                continue
            engine, rate = each["engine"], _rate(through, "engine", batch, w)
            busy = (f"{engine * rate / cores:.0%}" if engine and rate and cores else "–")
            cells = [f"{v * 1e6:,.0f}" if v else "–" for v in each.values()]
            out.append(f"| {batch} | {w} | " + " | ".join(cells) + f" | {busy} | "
                       f"{_ratio(each['pgqueuer'], engine)} | {_ratio(each['minimal ceiling'], engine)} |")
    return out


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "–"


_BUCKET = {"cold": "its bucket made by the first throttle",
           "configured": "its bucket configured at 2× the limit"}


def _met(ok: bool | None) -> str:
    return "–" if ok is None else ("**met**" if ok else "**not met**")


def targets(results: dict) -> list[tuple[str, str, str, str]]:
    """(target, figures, ratio, met) rows."""
    rows = []
    through = results.get("throughput", [])
    worker_counts = sorted({e["workers"] for e in through})
    for w in worker_counts:
        engine = _rate(through, "engine", PEER_BATCH, w)
        for system, batch, floor in (("ceiling", PEER_BATCH, 0.5), ("minimal ceiling", PEER_BATCH, 0.6),
                                     ("pgqueuer", PEER_BATCH, 2.0), ("procrastinate", None, 40.0)):
            other = _rate(through, system, batch, w)
            if engine and other:
                rows.append((f"engine b{PEER_BATCH}, {w} worker(s) ≥ {floor:g}× {system}",
                             f"{engine:,.0f} vs {other:,.0f} /s", _ratio(engine, other),
                             _met(engine / other >= floor)))
    smtp = results.get("smtp", [])
    for w in sorted({e["workers"] for e in smtp}):
        raw = _rate(smtp, "smtplib", None, w)
        for mode in ("plain", "idempotent"):
            entry = next((e for e in smtp
                          if e["system"] == f"smtp engine {mode}" and e["workers"] == w), None)
            if raw and entry:
                engine = _median_rate(entry)
                rows.append((f"SMTP, {mode} receiver, {w} connection(s) ≥ 0.8× raw smtplib",
                             f"{engine:,.0f} vs {raw:,.0f} /s", _ratio(engine, raw),
                             _met(engine / raw >= 0.8)))
    rows += _latency_targets(results.get("smtp_latency"))
    build = results.get("build")
    if build:
        med = {way: statistics.median(s) for way, s in build["seconds"].items()}
        for way in ("plain", "statement"):
            rows.append((f"build {build['size']:,} ≥ 0.9× {way} INSERT…SELECT",
                         f"{med['engine']:.2f} s vs {med[way]:.2f} s", _ratio(med[way], med["engine"]),
                         _met(med[way] / med["engine"] >= 0.9)))
    memory = results.get("memory")
    if memory and len(memory["sizes"]) >= 2:
        sizes = sorted(memory["sizes"], key=int)
        small, big = memory["sizes"][sizes[0]]["peak"], memory["sizes"][sizes[-1]]["peak"]
        rows.append((f"peak RSS at {int(sizes[-1]):,} ≤ 1.2× at {int(sizes[0]):,}",
                     f"{big / 2**20:.1f} vs {small / 2**20:.1f} MiB", _ratio(big, small),
                     _met(big / small <= 1.2)))
    admin = results.get("admin")
    if admin:
        for label, page in admin["pages"].items():
            rows.append((f"admin {label} ({admin['sends']:,} sends) ≤ 300 ms", f"{page['ms']:.0f} ms",
                         "–", _met(page["ms"] <= 300 and page["status"] == 200)))
    pacing = results.get("pacing")
    if pacing:
        for variant, run in pacing["goodput"].items():
            rows.append((f"goodput to a provider throttling at {run['limit']:g}/s ≥ 0.9× its limit "
                         f"({_BUCKET[variant]})",
                         f"{run['goodput'] * run['limit']:.1f} vs {run['limit']:g} /s",
                         f"{run['goodput']:.2f}×", _met(run["goodput"] >= 0.9)))
        sizes = sorted(pacing["claims"], key=int)
        if len(sizes) >= 2:
            small, big = pacing["claims"][sizes[0]], pacing["claims"][sizes[-1]]
            for name in ("claim_paced", "claim"):
                rows.append((f"{name} at {int(sizes[-1]):,} rows reads what it does at "
                             f"{int(sizes[0]):,} (growth_sends rows; O(batch))",
                             f"{big[name]['sends_read']:,} vs {small[name]['sends_read']:,} rows, "
                             f"{big[name]['buffers']:,} vs {small[name]['buffers']:,} buffers",
                             _ratio(big[name]["sends_read"], small[name]["sends_read"]),
                             _met(big[name]["sends_read"] <= 1.1 * small[name]["sends_read"])))
    rows += _huge_targets(results.get("huge"))
    return rows


def markdown(results: dict, *, chart: str | None = None) -> str:
    config, machine = results["config"], results["machine"]
    out = ["# Benchmark results", "",
           f"`python -m bench` — N = {config['recipients']:,} recipients, median of "
           f"{config['repetitions']} runs, batch sizes {config['batch_sizes']}, workers "
           f"{config['workers']}{' (--quick)' if config.get('quick') else ''}.", "",
           "| machine | |", "|---|---|"]
    if config.get("quick"):
        out[-2:-2] = ["**A `--quick` validation run** (small N, few repetitions): it checks the harness; "
                      "the issue's figures come from `make bench` with its defaults on a quiet machine. "
                      "The load average below says how busy the machine was.", ""]
    out += [f"| {key} | {value} |" for key, value in machine.items()]
    out += ["", "## Targets (ratios measured in the same run)", "",
            "| target | figures | ratio | |", "|---|---|---|---|"]
    out += [f"| {t} | {f} | {r} | {m} |" for t, f, r, m in targets(results)]

    through = results.get("throughput", [])
    if through:
        systems = ["engine", "ceiling", "ceiling+hand_over", "minimal ceiling", "pgqueuer",
                   "procrastinate"]
        out += ["", "## Recipients settled per second", "",
                "| batch | workers | " + " | ".join(systems)
                + " | engine / ceiling | engine / ceiling+hand_over | engine / minimal ceiling "
                  "| engine / pgqueuer | engine / procrastinate |",
                "|---|---|" + "---|" * (len(systems) + 5)]
        batches = sorted({e["batch"] for e in through if e["batch"]})
        for batch in batches:
            for w in sorted({e["workers"] for e in through}):
                cells = [_cell(through, s, None if s == "procrastinate" else batch, w) for s in systems]
                engine = _rate(through, "engine", batch, w)
                ratios = [_ratio(engine, _rate(through, s, None if s == "procrastinate" else batch, w))
                          for s in ("ceiling", "ceiling+hand_over", "minimal ceiling", "pgqueuer",
                                    "procrastinate")]
                out.append(f"| {batch} | {w} | " + " | ".join(cells + ratios) + " |")
        cores = str(results["machine"].get("cores", "")).split(" ")[0]
        out += _cpu(through, batches, cores=int(cores) if cores.isdigit() else None)
        procrastinate = [e for e in through if e["system"] == "procrastinate"]
        if procrastinate:
            out += ["", f"procrastinate ran {procrastinate[0]['jobs']:,} jobs (it has no batch size; "
                        "the same figure is shown on every batch row)."]
    smtp = results.get("smtp", [])
    if smtp:
        out += ["", f"## SMTP path (recipients/s; engine batch {config['smtp_batch']})", "",
                "| connections | raw smtplib | engine, plain receiver | engine, idempotent receiver "
                "| plain / smtplib | idempotent / smtplib |", "|---|---|---|---|---|---|"]
        for w in sorted({e["workers"] for e in smtp}):
            raw = _rate(smtp, "smtplib", None, w)
            plain = _rate(smtp, "smtp engine plain", config["smtp_batch"], w)
            idem = _rate(smtp, "smtp engine idempotent", config["smtp_batch"], w)
            out.append(f"| {w} | {_cell(smtp, 'smtplib', None, w)} "
                       f"| {_cell(smtp, 'smtp engine plain', config['smtp_batch'], w)} "
                       f"| {_cell(smtp, 'smtp engine idempotent', config['smtp_batch'], w)} "
                       f"| {_ratio(plain, raw)} | {_ratio(idem, raw)} |")
    if results.get("smtp_latency"):
        out += _smtp_latency(results["smtp_latency"])
    dkim = results.get("dkim")
    if dkim:
        cost = {key: statistics.median(values) for key, values in dkim["signing_us"].items()}
        algorithms = [key for key in cost if key != "bytes"]
        out += ["", f"## DKIM on the SMTP path (recipients/s; {dkim['recipients']:,} recipients, one "
                    f"connection, plain receiver, engine batch {dkim['batch']})", "",
                f"Signing the engine's message ({cost['bytes']:,.0f} bytes) once, in process: "
                + ", ".join(f"{a} {cost[a]:,.0f} µs" for a in algorithms) + ".", "",
                "| signature | raw smtplib | engine | engine / engine unsigned "
                "| smtplib / smtplib unsigned | engine / smtplib |", "|---|---|---|---|---|---|"]
        bare_raw = _rate(smtp, "smtplib dkim unsigned", None, 1)
        bare_engine = _rate(smtp, "smtp engine dkim unsigned", dkim["batch"], 1)
        for label in ("unsigned", *algorithms):
            raw = _rate(smtp, f"smtplib dkim {label}", None, 1)
            engine = _rate(smtp, f"smtp engine dkim {label}", dkim["batch"], 1)
            out.append(f"| {label} | {_cell(smtp, f'smtplib dkim {label}', None, 1)} "
                       f"| {_cell(smtp, f'smtp engine dkim {label}', dkim['batch'], 1)} "
                       f"| {_ratio(engine, bare_engine)} | {_ratio(raw, bare_raw)} "
                       f"| {_ratio(engine, raw)} |")
    build = results.get("build")
    if build:
        med = {way: statistics.median(s) for way, s in build["seconds"].items()}
        out += ["", f"## Build ({build['size']:,} subscribers → {build['size']:,} recipients; "
                    f"account generated in {build['generated_in']:.1f} s)", "",
                "| way | seconds | recipients/s | plain / this |", "|---|---|---|---|"]
        for way in ("engine", "statement", "plain"):
            out.append(f"| {way} | {med[way]:.2f} | {build['size'] / med[way]:,.0f} "
                       f"| {_ratio(med['plain'], med[way])} |")
    memory = results.get("memory")
    if memory:
        out += ["", f"## Worker memory (run_sender --until-idle, batch {memory['batch']})", "",
                "| recipients | peak RSS | wall time |", "|---|---|---|"]
        for size, m in sorted(memory["sizes"].items(), key=lambda kv: int(kv[0])):
            out.append(f"| {int(size):,} | {m['peak'] / 2**20:.1f} MiB | {m['seconds']:.0f} s |")
    admin = results.get("admin")
    if admin:
        out += ["", f"## Admin ({admin['sends']:,}-send campaign)", "",
                "| page | median server time | SQL queries | HTTP |", "|---|---|---|---|"]
        for label, page in admin["pages"].items():
            out.append(f"| {label} (`{page['url']}`) | {page['ms']:.0f} ms | {page['queries']} "
                       f"| {page['status']} |")
    export = results.get("export")
    if export:
        out += ["", f"## Export (export_sends to /dev/null, pages of {export['page_size']:,})", "",
                "| recipients | format | rows/s | peak RSS | a middle page |", "|---|---|---|---|---|"]
        for size, entry in sorted(export["sizes"].items(), key=lambda kv: int(kv[0])):
            for fmt in ("csv", "jsonl"):
                run = entry[fmt]
                out.append(f"| {int(size):,} | {fmt} | {run['rows_per_s']:,.0f} | "
                           f"{run['peak'] / 2**20:.1f} MiB | {entry['page']['ms']:.1f} ms |")
        out += ["", "Peak RSS at the largest size ÷ at the smallest (constant memory is 1.0): "
                + ", ".join(f"{fmt} {ratio:.2f}×" for fmt, ratio in export["rss_ratio"].items())
                + f"; an empty campaign's export peaks at {export['floor']['peak'] / 2**20:.1f} MiB."]
    profile = results.get("profile")
    if profile:
        spy = profile["spy"]
        out += ["", f"## Where one worker's time goes (py-spy, batch {profile['batch']}, "
                    f"{profile['size']:,} recipients, send protocol: {spy.get('protocol', 'rows')}, "
                    f"{profile['size'] / spy['seconds']:,.0f} /s under the profiler)", "",
                "Share of the samples inside `Worker.cycle` (idle waits on PostgreSQL included).", "",
                "| phase | inclusive | self |", "|---|---|---|"]
        out += [f"| {label} | {inc:.1f} % | {own:.1f} % |" for label, inc, own in spy["phases"]
                if inc >= 0.05]
        out += ["", "Busiest frames (self):", "", "| frame | self |", "|---|---|"]
        out += [f"| `{frame}` | {share:.1f} % |" for frame, share in spy["top_self"]]
        smtp_spy = profile.get("smtp_spy")
        if smtp_spy:
            out += ["", f"The SMTP path (plain receiver, one connection, "
                        f"{profile['size'] / smtp_spy['seconds']:,.0f} /s under the profiler):", "",
                    "| phase | inclusive | self |", "|---|---|---|"]
            out += [f"| {label} | {inc:.1f} % | {own:.1f} % |" for label, inc, own in smtp_spy["phases"]
                    if inc >= 0.05]
            out += ["", "| frame | self |", "|---|---|"]
            out += [f"| `{frame}` | {share:.1f} % |" for frame, share in smtp_spy["top_self"]]
        out += ["", "Writes per recipient (WAL from `pg_current_wal_lsn()`, row updates from "
                    "`pg_stat_user_tables`, one worker):", "",
                "| run | recipients/s | WAL bytes | row updates | of which HOT |", "|---|---|---|---|---|"]
        for name, cost in profile.get("costs", {}).items():
            out.append(f"| {name} | {profile['size'] / cost['seconds']:,.0f} "
                       f"| {cost['wal_per_recipient']:,.0f} | {cost['updates_per_recipient']:.2f} "
                       f"| {cost['hot_share']:.0%} |")
        if profile.get("indexes"):
            out += ["", f"`growth_sends` has {len(profile['indexes'])} indexes; a row update that is "
                        "not HOT writes an entry into each (a partial one when its condition holds): "
                        + ", ".join(f"`{name}`" for name, _ in profile["indexes"]) + "."]
        explain = profile["explain"]
        moments = list(explain)
        out += ["", f"## Statement execution times (EXPLAIN ANALYZE, {profile['size']:,} rows, batch "
                    f"{profile['batch']}; plans in `bench/out/explain-b{profile['batch']}.txt`)", "",
                "| statement | " + " | ".join(moments) + " |", "|---|" + "---|" * len(moments)]
        for name in explain[moments[0]]:
            out.append(f"| {name} | " + " | ".join(f"{explain[m][name]:.2f} ms" for m in moments) + " |")
    pacing = results.get("pacing")
    if pacing:
        out += _pacing(pacing)
    experiments = results.get("experiments")
    if experiments:
        out += ["", "## Experiments (`--only experiments`: the recommended changes, tried on the bench "
                    "database)", ""]
        if "indexes" in experiments:
            out += [f"| growth_sends (batch {config['profile_batch']}, 1 worker) | ceiling+hand_over /s "
                        "| engine /s |", "|---|---|---|"]
            out += [f"| {variant} | {r['ceiling+hand_over']:,.0f} | {r['engine']:,.0f} |"
                    for variant, r in experiments["indexes"].items()]
        if "reported" in experiments:
            reported = experiments["reported"]
            out += ["", f"The reported flags (the engine, batch {config['profile_batch']}, 1 worker, "
                        "in turn A B B A …): "
                    + "; ".join(f"{variant}: " + ", ".join(f"{s:.2f}" for s in runs) + " s"
                                for variant, runs in reported["seconds"].items())
                    + f"; median ÷ median **{reported['ratio']:.2f}×**."]
        if "hot" in experiments:
            out += _hot(experiments["hot"], config["profile_batch"])
    if results.get("directions"):
        out += _directions(results["directions"])
    if results.get("huge"):
        out += _huge(results["huge"])
    if results.get("tallies"):
        out += _tallies(results["tallies"])
    if chart and through:
        out += ["", f"![recipients/s by batch size and worker count]({chart})"]
    out += ["", "## Method", "", METHOD,
            "What limits the engine, with the changes recommended: `bench/FINDINGS.md`. "
            "Scale-out notes: the README."]
    return "\n".join(out) + "\n"


LATENCY_FLOOR = 0.8  # engine / raw smtplib at the same delay and C


def _latency_rate(point: dict, contender: str) -> float | None:
    seconds = point["seconds"].get(contender)
    return _median_rate({"jobs": point["recipients"], "seconds": seconds}) if seconds else None


def _latency_cell(point: dict, contender: str) -> str:
    seconds = point["seconds"].get(contender)
    if not seconds:
        return "–"
    entry = {"jobs": point["recipients"], "seconds": seconds}
    spread = _spread(entry)
    rate = _median_rate(entry)
    return (f"{rate:,.0f}" if rate >= 100 else f"{rate:.1f}") + (
        f" (±{spread / 2:.0%})" if spread > 0.10 else "")


def _latency_targets(latency: dict | None) -> list[tuple[str, str, str, str]]:
    rows = []
    for point in (latency or {}).get("points", []):
        raw = _latency_rate(point, "smtplib")
        for mode in ("plain", "idempotent"):
            engine = _latency_rate(point, mode)
            if raw and engine:
                rows.append((f"SMTP, {mode} receiver answering in {point['delay_ms']} ms, "
                             f"{point['connections']} connection(s) ≥ {LATENCY_FLOOR:g}× raw smtplib",
                             f"{engine:,.1f} vs {raw:,.1f} /s", _ratio(engine, raw),
                             _met(engine / raw >= LATENCY_FLOOR)))
    return rows


def _smtp_latency(latency: dict) -> list[str]:
    rcpt = " and each RCPT" if latency.get("rcpt") else ""
    out = ["", f"## SMTP with a receiver's latency (messages/s; one process on C connections; the "
               f"receiver answers DATA{rcpt} after the delay and advertises PIPELINING, which "
               f"the engine uses and smtplib cannot; engine batch "
               f"{latency['per_connection']}·C)", "",
           "| delay | C | N | batch | raw smtplib | engine, plain receiver "
           "| engine, idempotent receiver | plain / smtplib | idempotent / smtplib "
           "| machine CPU a message: raw; plain, idempotent ÷ raw | cores busy: raw / plain / "
           "idempotent |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for point in latency["points"]:
        raw = _latency_rate(point, "smtplib")
        out.append(f"| {point['delay_ms']} ms | {point['connections']} | {point['recipients']:,} "
                   f"| {point['batch']:,} | {_latency_cell(point, 'smtplib')} "
                   f"| {_latency_cell(point, 'plain')} | {_latency_cell(point, 'idempotent')} "
                   f"| {_ratio(_latency_rate(point, 'plain'), raw)} "
                   f"| {_ratio(_latency_rate(point, 'idempotent'), raw)} "
                   f"| {_latency_cpu(point)} | {_latency_busy(point, latency.get('cores') or 1)} |")
    for chunk in latency.get("chunks") or ():
        out += _latency_variant(latency, f"plain-{chunk}", "raw",
                                f"Plain receiver with SENDER_HANDOFF_CHUNK={chunk} (a kill leaves up "
                                f"to {chunk} messages a connection in doubt)")
    if latency.get("unprepared"):
        out += _latency_variant(latency, "plain-unprepared", "raw",
                                "Plain receiver with DATABASE_PREPARED_STATEMENTS off (each "
                                "statement on the wires parsed and planned on every call)")
    if latency.get("unpipelined"):
        out += _latency_variant(latency, "plain-unpipelined", "raw",
                                "Plain receiver against the sink not advertising PIPELINING (each "
                                "envelope one command and one round trip at a time, as smtplib "
                                "sends it)")
    for load in latency.get("loads") or ():
        out += _latency_variant(latency, f"smtplib+{load:g}", "of itself alone",
                                f"Raw smtplib beside a process keeping {load:g} cores busy")
    if any("cpu_seconds" in point for point in latency["points"]):
        out += ["", "Machine CPU: every process's busy time while the contender ran (`/proc/stat`, "
                    "the sink and PostgreSQL included), the median per message; cores busy: that "
                    "time over the run's wall time and every core. A point whose cores were busy "
                    "all along measures the machine's CPU, not the receiver's latency."]
    return out


def _latency_variant(latency: dict, contender: str, against: str, title: str) -> list[str]:
    """A line of a further contender's rate at each point, over raw smtplib's."""
    return ["", f"{title}: " + "; ".join(
        f"{point['delay_ms']} ms, C = {point['connections']}: {_latency_cell(point, contender)} /s, "
        f"{_ratio(_latency_rate(point, contender), _latency_rate(point, 'smtplib'))} {against}"
        for point in latency["points"])]


def _latency_cpu(point: dict) -> str:
    cpu = point.get("cpu_seconds")
    if not cpu or not cpu.get("smtplib"):
        return "–"
    each = {name: statistics.median(runs) / point["recipients"] for name, runs in cpu.items() if runs}
    raw = each["smtplib"]
    return (f"{raw * 1e6:,.0f} µs; " + ", ".join(_ratio(each.get(name), raw)
                                                  for name in ("plain", "idempotent")))


def _latency_busy(point: dict, cores: int) -> str:
    cpu = point.get("cpu_seconds")
    if not cpu:
        return "–"
    def busy(name: str) -> str:
        wall = statistics.median(point["seconds"][name])
        return f"{statistics.median(cpu[name]) / wall / cores:.0%}" if cpu.get(name) else "–"

    return " / ".join(busy(name) for name in ("smtplib", "plain", "idempotent"))


def _hot(hot: dict, batch: int) -> list[str]:
    """The HOT settle experiment: each worker count's rounds, seconds a run by variant."""
    out = ["", f"The HOT settle (the engine, batch {batch}, in turn A B B A …; seconds a run, "
               "with the share of row updates that were HOT):", "",
           "| workers | variant | runs | HOT | CPU a recipient | as migrated ÷ HOT, time (median of "
           "rounds) |", "|---|---|---|---|---|---|"]
    for count, runs in hot.items():
        for n, (variant, seconds) in enumerate(runs["seconds"].items()):
            rates = ", ".join(f"{s:.2f} s" for s in seconds)
            costs = runs["costs"][variant]
            shares = ", ".join(f"{cost['hot_share']:.0%}" for cost in costs)
            cpu = ", ".join(f"{cost['cpu_us']:.0f} µs" for cost in costs)
            ratio = f"**{runs['ratio']:.2f}×**" if n == 0 else ""
            out.append(f"| {count} | {variant} | {rates} | {shares} | {cpu} | {ratio} |")
    return out


def _pacing(pacing: dict) -> list[str]:
    runs = pacing["goodput"]
    first = next(iter(runs.values()))
    out = ["", f"## Pacing: a provider that throttles ({first['workers']} workers, SMTP, plain receiver, "
               f"batch {first['batch']}, {first['seconds']:.0f} s a run)", "",
           "| Google's bucket | accepted | deferred (421) | deferrals per message accepted "
           "| goodput, steady part | goodput, whole run | its rate: made at → at the end "
           "| other domain: all in after |", "|---|---|---|---|---|---|---|---|"]
    for variant, run in runs.items():
        rates = [rate for _, rate, _ in run["rates"] if rate is not None]
        made = f"{run['configured']:g}" if run["configured"] else (f"{rates[0]:.2f}" if rates else "–")
        out.append(f"| {_BUCKET[variant].removeprefix('its bucket ')} | {run['accepted']:,} "
                   f"| {run['deferred']:,} | {run['deferred_per_accepted']:.2f} "
                   f"| {run['goodput']:.2f}× | {run['goodput_whole']:.2f}× "
                   f"| {made} → {rates[-1]:.2f} /s | "
                   + (f"{run['other_done_at']:.1f} s |" if run["other_done_at"] is not None else "– |"))
    out += ["", "Gmail's messages accepted in each tenth of the run: "
            + "; ".join(f"{variant} " + " ".join(str(n) for n in _tenths(run["per_second"]))
                        for variant, run in runs.items()) + "."]
    claims = pacing["claims"]
    sizes = sorted(claims, key=int)
    out += ["", f"The claim of one campaign (batch {pacing['batch']}): EXPLAIN (ANALYZE, BUFFERS), "
                f"median of {pacing.get('explain_runs', 5)} runs; the paced one claims 4 "
                "destinations' shares, its window at the front of the exhausted destination's "
                "rows (plans in `bench/out/pacing-plans.txt`).",
            "", "| rows | statement | ms | buffers | rows read (of growth_sends) | claimed "
                "| buffers per claimed row |", "|---|---|---|---|---|---|---|"]
    for size in sizes:
        for name in ("claim", "claim_paced"):
            f = claims[size][name]
            out.append(f"| {int(size):,} | {name} | {f['ms']:.2f} | {f['buffers']:,} "
                       f"| {f['rows_read']:,} ({f['sends_read']:,}) | {f['claimed']} "
                       f"| {f['buffers'] / max(f['claimed'], 1):.1f} |")
    out += ["", "| ratio | ms | buffers | growth_sends rows read | buffers per claimed row |",
            "|---|---|---|---|---|"]
    for size in sizes:
        paced, plain = claims[size]["claim_paced"], claims[size]["claim"]
        out.append(f"| claim_paced / claim at {int(size):,} | {_ratio(paced['ms'], plain['ms'])} "
                   f"| {_ratio(paced['buffers'], plain['buffers'])} "
                   f"| {_ratio(paced['sends_read'], plain['sends_read'])} "
                   f"| {_ratio(_per_row(paced), _per_row(plain))} |")
    if len(sizes) >= 2:
        for name in ("claim_paced", "claim"):
            big, small = claims[sizes[-1]][name], claims[sizes[0]][name]
            out.append(f"| {name} at {int(sizes[-1]):,} / at {int(sizes[0]):,} "
                       f"| {_ratio(big['ms'], small['ms'])} | {_ratio(big['buffers'], small['buffers'])} "
                       f"| {_ratio(big['sends_read'], small['sends_read'])} "
                       f"| {_ratio(_per_row(big), _per_row(small))} |")
    return out


def _per_row(figures: dict) -> float:
    return figures["buffers"] / max(figures["claimed"], 1)


def _tenths(per_second: list[int]) -> list[int]:
    """A run's per-second counts summed by tenth of the run."""
    step = max(len(per_second) / 10, 1)
    return [sum(per_second[round(i * step):round((i + 1) * step)]) for i in range(10)
            if round(i * step) < len(per_second)]


def chart(results: dict, path: Path) -> None:
    through = results.get("throughput", [])
    if not through:
        return
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    batches = sorted({e["batch"] for e in through if e["batch"]})
    workers = sorted({e["workers"] for e in through})
    styles = {"engine": ("#1f77b4", "-", "o"), "ceiling": ("#2ca02c", "--", "s"),
              "ceiling+hand_over": ("#98df8a", ":", "s"), "pgqueuer": ("#ff7f0e", "-.", "^"),
              "procrastinate": ("#d62728", "-.", "v"), "minimal ceiling": ("#17becf", "--", "D")}
    figure, axes = pyplot.subplots(1, len(batches), figsize=(5.5 * len(batches), 4.5), dpi=110,
                                   sharey=True, squeeze=False)
    for axis, batch in zip(axes[0], batches, strict=True):
        for system, (colour, line, marker) in styles.items():
            points = [(w, _rate(through, system, None if system == "procrastinate" else batch, w))
                      for w in workers]
            points = [(w, r) for w, r in points if r]
            if points:
                axis.plot(*zip(*points, strict=True), color=colour, linestyle=line, marker=marker,
                          label=system)
        axis.set_title(f"batch {batch}")
        axis.set_xlabel("worker processes")
        axis.set_xticks(workers)
        axis.set_yscale("log")
        axis.grid(alpha=0.3, which="both")
    axes[0][0].set_ylabel("recipients settled per second (log)")
    axes[0][-1].legend(loc="best", fontsize=8)
    figure.suptitle(f"N = {results['config']['recipients']:,}, median of "
                    f"{results['config']['repetitions']} runs — {results['machine']['cpu']}", fontsize=9)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


# -- directions (`--only directions`) and one huge campaign (`--only huge`) ----------------------

ADMIN_MS = 300  # the admin's pages and the live monitor's polls, at any campaign size
STABLE = 1.5  # a claim later in a campaign reads at most this many times the first batch's buffers


def _directions(found: dict) -> list[str]:
    from bench.directions import rate

    keys = list(found["directions"])
    workers = sorted({int(w) for runs in found["seconds"].values() for w in runs})
    out = ["", f"## Fewer writes per recipient: directions (`--only directions`; N = {found['size']:,}, "
               f"batch {found['batch']}, medians; `bench/directions.py`)", "",
           "Each direction is a table shape with the engine's claim and settle adapted to it, timed "
           "as the ceiling is (bare psycopg loop, one process per worker, handed over at the claim "
           "as with the null transport, commits not waiting for the flush); v is the engine's own "
           "statements, every other direction's settle is planned with a hash join. *Engine, "
           "projected*: 1 / (1/engine′ − 1/a + 1/direction), engine′ the engine with "
           "enable_nestloop off (its settle planned as a's; the engine itself when not measured, "
           "with v for a): the engine if all the time a direction's statements save came off its "
           "cycle. An upper bound: the engine settles on a thread beside its next claim; – where "
           "the engine outran its statements' bare loop.", "",
           "| contender | workers | recipients/s | ÷ a (as is) | ÷ minimal ceiling | engine, projected "
           "| projected ÷ pgqueuer | projected ÷ minimal ceiling |", "|---|---|---|---|---|---|---|---|"]
    for w in workers:
        engine, pgqueuer = rate(found, "engine", w), rate(found, "pgqueuer", w)
        minimal, as_is = rate(found, "minimal ceiling", w), rate(found, "a", w)
        fixed = rate(found, "engine, enable_nestloop off", w)
        # the engine's statements' time, and the bare loop of the same statements
        base_engine, base_loop = (fixed, as_is) if fixed else (engine, rate(found, "v", w) or as_is)
        for name in ("engine", "engine, enable_nestloop off", "engine on leases", "pgqueuer",
                     "minimal ceiling"):
            value = rate(found, name, w)
            if value or name not in ("engine, enable_nestloop off", "engine on leases"):
                out.append(f"| {name} | {w} | {value:,.0f} | {_ratio(value, as_is)} "
                           f"| {_ratio(value, minimal)} | – "
                           f"| {_ratio(value, pgqueuer) if name.startswith('engine') else '–'} | – |"
                           if value else f"| {name} | {w} | – | – | – | – | – | – |")
        for key in keys:
            value = rate(found, key, w)
            projected = (1 / (1 / base_engine - 1 / base_loop + 1 / value)
                         if value and base_engine and base_loop and base_engine < base_loop else None)
            out.append(f"| {key}: {found['directions'][key]} | {w} | "
                       + (f"{value:,.0f}" if value else "–")
                       + f" | {_ratio(value, as_is)} | {_ratio(value, minimal)} "
                       + (f"| {projected:,.0f} " if projected else "| – ")
                       + f"| {_ratio(projected, pgqueuer)} | {_ratio(projected, minimal)} |")
    costs = found.get("costs", {})
    if costs:
        size = found["size"]
        base = costs.get("a", {}).get("wal_per_recipient")
        out += ["", "Writes per recipient (one worker, every claim and settle under EXPLAIN (ANALYZE, "
                    "WAL): the statements' own WAL; row versions from `pg_stat_user_tables`; a row's "
                    "bytes = the tables with their indexes ÷ N, freshly filled and after the run, no "
                    "VACUUM; fill = copying the campaign's rows into the shape, indexes in place):", "",
                "| contender | WAL bytes (claim + settle) | ÷ a | row versions | of which HOT "
                "| bytes a row: fresh → after | fill, rows/s | the claim's plan: indexes; buffers at "
                "the first, middle, last batch |", "|---|---|---|---|---|---|---|---|"]
        for key, c in costs.items():
            label = f"{key}: {found['directions'][key]}" if key in found["directions"] else key
            fills = found.get("fill", {}).get(key)
            out.append(f"| {label} | {c['wal_per_recipient']:,.0f} ({c['wal_claim']:,.0f} + "
                       f"{c['wal_settle']:,.0f}) | {_ratio(c['wal_per_recipient'], base)} "
                       f"| {c['updates_per_recipient']:.2f} | {c['hot_share']:.0%} "
                       f"| {c['bytes_before'] / size:,.0f} → {c['bytes_after'] / size:,.0f} "
                       + (f"| {size / statistics.median(fills):,.0f} " if fills else "| – ")
                       + (f"| {', '.join(c['claim_indexes'])}; "
                          + " / ".join(f"{b:,}" for b in c["claim_buffers"]) + " |"
                          if "claim_indexes" in c else "| – |"))
    return out


def _huge_targets(huge: dict | None) -> list[tuple[str, str, str, str]]:
    if not huge:
        return []
    rows, size = [], f"{huge['size']:,}"
    seconds = huge["build"]["seconds"]
    rows.append((f"build of {size} ≥ 0.9× plain INSERT…SELECT", f"{seconds['engine']:.0f} s vs "
                 f"{seconds['plain']:.0f} s", _ratio(seconds["plain"], seconds["engine"]),
                 _met(seconds["plain"] / seconds["engine"] >= 0.9)))
    moments = huge["moments"]
    first = moments.get("built")
    for label, moment in moments.items():
        if label == "built" or not first:
            continue
        for name in ("claim", "claim_paced"):
            now, then = moment["claims"][name], first["claims"][name]
            if not now.get("claimed", 1):  # nothing left: not a batch's cost, and no verdict
                rows.append((f"{name} of a {size}-recipient campaign, {label}: an empty claim",
                             f"{now['buffers']:,} buffers, {now['ms']:.1f} ms (a first batch: "
                             f"{then['buffers']:,})", "–", "–"))
                continue
            rows.append((f"{name} of a {size}-recipient campaign, {label}, reads ≤ {STABLE:g}× the "
                         "first batch's buffers",
                         f"{now['buffers']:,} vs {then['buffers']:,} buffers, {now['ms']:.1f} vs "
                         f"{then['ms']:.1f} ms", _ratio(now["buffers"], then["buffers"]),
                         _met(now["buffers"] <= STABLE * then["buffers"])))
    pages = next(iter(moments.values()))["pages"]
    for page in pages:
        worst = max(moments, key=lambda m: moments[m]["pages"][page]["ms"])
        ms = moments[worst]["pages"][page]["ms"]
        ok = all(m["pages"][page]["ms"] <= ADMIN_MS and m["pages"][page]["status"] == 200
                 for m in moments.values())
        rows.append((f"admin {page} ({size} sends) ≤ {ADMIN_MS} ms at every moment",
                     f"worst {ms:,.0f} ms ({worst})", "–", _met(ok)))
    neighbours = huge.get("neighbours")
    if neighbours:
        beside, alone = neighbours["beside"]["pages"], neighbours["alone"]["pages"]
        for page, figures in beside.items():
            rows.append((f"admin {page} ({neighbours['size']:,} sends) beside {neighbours['rows_beside']:,} "
                         f"finished rows ≤ {ADMIN_MS} ms",
                         f"{figures['ms']:,.0f} ms (alone {alone[page]['ms']:,.0f} ms)",
                         _ratio(figures["ms"], alone[page]["ms"]),
                         _met(figures["ms"] <= ADMIN_MS and figures["status"] == 200)))
    export = huge.get("export")
    if export:
        floor = export["floor"]["peak"]
        for label in ("csv", "jsonl", "admin download (csv)"):
            run = export.get(label)
            if run:
                rows.append((f"export {label} of {size} rows: peak RSS ≤ 1.2× an empty campaign's",
                             f"{run['peak'] / 2**20:.0f} vs {floor / 2**20:.0f} MiB; first byte after "
                             f"{run['first_byte']:.2f} s", _ratio(run["peak"], floor),
                             _met(run["peak"] <= 1.2 * floor)))
    return rows


def _huge(huge: dict) -> list[str]:
    size = huge["size"]
    seconds, sizes = huge["build"]["seconds"], huge["build"]["bytes"]
    out = ["", f"## One campaign of {size:,} recipients (`--only huge`, batch {huge['batch']}; "
               f"send protocol: {huge.get('protocol', 'rows')}; the server's autovacuum: "
               f"{huge['autovacuum']})", ""]
    if huge["disk"]["asked"] != size:
        out += [f"**Asked for {huge['disk']['asked']:,}; {size:,} is what fits** in half the "
                f"{huge['disk']['free'] / 2**30:.0f} GiB free.", ""]
    out += [f"Account generated in {huge['generated_in']:.0f} s. Build:", "",
            "| way | seconds | rows/s | plain ÷ this |", "|---|---|---|---|"]
    for way in ("engine", "statement", "plain"):
        out.append(f"| {way} | {seconds[way]:.0f} | {size / seconds[way]:,.0f} "
                   f"| {_ratio(seconds['plain'], seconds[way])} |")
    end = huge.get("bytes_at_end", sizes)
    out += ["", f"growth_sends: {sizes['heap'] / 2**30:.2f} GiB of heap and {sizes['indexes'] / 2**30:.2f} "
                f"GiB of indexes built ({(sizes['heap'] + sizes['indexes']) / size:,.0f} bytes a row); "
                f"{end['heap'] / 2**30:.2f} + {end['indexes'] / 2**30:.2f} GiB when all are sent "
                f"(one VACUUM at half). Largest indexes at the end: "
                + ", ".join(f"`{name}` {n / 2**20:,.0f} MiB" for name, n in list(end["each"].items())[:4])
                + ".", "",
            "The claim of one campaign and the settle of the batch it took (EXPLAIN (ANALYZE, "
            "BUFFERS), median of 5 after a warm-up, rolled back; *thrown away*: rows a join paired "
            f"and its Join Filter rejected; plans in `{huge.get('plans', 'bench/out/huge-plans.txt')}`):",
            "",
            "| moment | sent | claim ms | buffers (read) | growth_sends rows read | claim_paced ms "
            "| buffers (read) | growth_sends rows read | settle ms | buffers | thrown away |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for label, moment in huge["moments"].items():
        c, p = moment["claims"]["claim"], moment["claims"]["claim_paced"]
        s = moment["claims"].get("settle")
        out.append(f"| {label} | {moment['sent']:,} | {c['ms']:.2f} | {c['buffers']:,} ({c['read']:,}) "
                   f"| {c['sends_read']:,} | {p['ms']:.2f} | {p['buffers']:,} ({p['read']:,}) "
                   f"| {p['sends_read']:,} | "
                   + (f"{s['ms']:.2f} | {s['buffers']:,} | {s['join_filtered']:,} |" if s
                      else "– | – | – |"))
    loop = huge.get("loop", [])
    if loop:
        out += ["", f"The first half, the engine's claim and settle in a bare loop (one connection; "
                    f"first claim {loop[0].get('first_claim_ms', 0):.1f} ms), by slice:", "",
                "| sent | claim ms (mean, worst) | settle ms | recipients/s |", "|---|---|---|---|"]
        out += [f"| {s['done']:,} | {s['claim_ms']:.1f}, {s['claim_max']:.0f} | {s['settle_ms']:.1f} "
                f"| {s['rate']:,.0f} |" for s in loop]
    if "vacuum_seconds" in huge:
        out += ["", f"VACUUM of growth_sends at half: {huge['vacuum_seconds']:.0f} s."]
    run = huge.get("engine")
    if run:
        rates = [point["rate"] for point in run["curve"]]
        if len(rates) >= 10:  # by tenth of the run
            rates = [statistics.mean(rates[i * len(rates) // 10:(i + 1) * len(rates) // 10])
                     for i in range(10)]
        out += ["", f"The second half, {run['workers']} `run_sender` processes (null transport): "
                    f"{run['rows']:,} in {run['seconds']:.0f} s, {run['rows'] / run['seconds']:,.0f} /s; "
                    "over the run (by tenth, or by sample when fewer): "
                    + ", ".join(f"{r:,.0f}" for r in rates) + " /s."]
    moments = huge["moments"]
    labels = list(moments)
    pages = list(next(iter(moments.values()))["pages"])
    out += ["", f"Admin pages and the live monitor (median server time of {huge['page_repetitions']} "
                "fetches after a warm-up; "
                "SQL queries):", "",
            "| page | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for page in pages:
        out.append(f"| {page} | " + " | ".join(
            f"{moments[m]['pages'][page]['ms']:,.0f} ms ({moments[m]['pages'][page]['queries']})"
            for m in labels) + " |")
    export = huge.get("export")
    if export:
        out += ["", "Export (a fresh process writing into a pipe the bench drains; rows/s after the "
                    "first byte):", "",
                "| export | first byte | rows/s | peak RSS |", "|---|---|---|---|"]
        for label in ("csv", "jsonl", "admin download (csv)"):
            if label in export:
                e = export[label]
                out.append(f"| {label} | {e['first_byte']:.2f} s | {e['rows_per_s']:,.0f} "
                           f"| {e['peak'] / 2**20:.0f} MiB |")
        out += ["", f"An empty campaign's export peaks at {export['floor']['peak'] / 2**20:.0f} MiB; a page "
                    f"from the middle of the campaign: {export['page']['ms']:.1f} ms."]
    if huge.get("neighbours"):
        out += _neighbours(huge["neighbours"])
    return out


def _neighbours(found: dict) -> list[str]:
    """The next campaign, beside the finished big one's rows and then alone on an emptied table,
    in the same run: what the finished rows cost it (what partitioning them away would buy)."""
    beside, alone = found["beside"], found["alone"]
    out = ["", f"The next campaign ({found['size']:,} recipients, a tenant of its own) beside the "
               f"{found['rows_beside']:,} rows of the finished one, then alone on an emptied "
               "growth_sends, in the same run:", "",
           "| figure | beside | alone | beside ÷ alone |", "|---|---|---|---|",
           f"| build | {beside['build_seconds']:.1f} s | {alone['build_seconds']:.1f} s "
           f"| {_ratio(beside['build_seconds'], alone['build_seconds'])} |"]
    for name in ("claim", "claim_paced"):
        b, a = beside["claims"].get(name), alone["claims"].get(name)
        if b and a:
            out.append(f"| {name} | {b['ms']:.2f} ms, {b['buffers']:,} buffers | {a['ms']:.2f} ms, "
                       f"{a['buffers']:,} buffers | {_ratio(b['buffers'], a['buffers'])} (buffers) |")
    for page, figures in beside["pages"].items():
        there = alone["pages"][page]
        out.append(f"| {page} | {figures['ms']:,.0f} ms ({figures['queries']}) | {there['ms']:,.0f} ms "
                   f"({there['queries']}) | {_ratio(figures['ms'], there['ms'])} |")
    return out


def _tallies(tallies: dict) -> list[str]:
    """What growth_sends' tally triggers cost the writes: seconds with them on ÷ off, in turn
    within each repetition of one run (1.00×: free)."""
    seconds = tallies["seconds"]
    out = ["", f"## What the tallies cost (`--only tallies`, {tallies['size']:,} recipients; "
               "triggers on and off in turn, medians)", "",
           "| figure | on | off | on ÷ off (time) |", "|---|---|---|---|"]
    for base, ratio in tallies["on_over_off"].items():
        on, off = statistics.median(seconds[f"{base} on"]), statistics.median(seconds[f"{base} off"])
        out.append(f"| {base} | {on:.2f} s | {off:.2f} s | {ratio:.2f}× |")
    return out
