"""The benchmark's report: ratios, verdicts and the chart, from made-up figures (no timing here:
the targets live in `make bench`, never in a test)."""

from __future__ import annotations

import os
import time

from bench import procs, report

RESULTS = {
    "config": {"recipients": 1000, "repetitions": 2, "batch_sizes": "20,500", "workers": "1,2",
               "smtp_batch": 500, "profile_batch": 500, "quick": True},
    "machine": {"cpu": "test CPU", "load": "0.00"},
    "throughput": [
        {"system": "engine", "batch": 500, "workers": 1, "jobs": 1000, "seconds": [1.0, 1.0]},
        {"system": "ceiling", "batch": 500, "workers": 1, "jobs": 1000, "seconds": [0.5, 0.4]},
        {"system": "pgqueuer", "batch": 500, "workers": 1, "jobs": 1000, "seconds": [2.0, 2.0]},
        {"system": "procrastinate", "batch": None, "workers": 1, "jobs": 100, "seconds": [4.0, 4.0]},
        {"system": "engine", "batch": 20, "workers": 2, "jobs": 1000, "seconds": [2.0, 4.0]},
    ],
    "smtp": [
        {"system": "smtplib", "batch": None, "workers": 1, "jobs": 1000, "seconds": [1.0, 1.0]},
        {"system": "smtp engine plain", "batch": 500, "workers": 1, "jobs": 1000, "seconds": [2.0, 2.0]},
    ],
    "smtp_latency": {
        "delays_ms": [0, 50], "connections": [1, 32], "per_connection": 20, "rcpt": False,
        "seconds_target": 4.0,
        "points": [
            {"delay_ms": 50, "connections": 1, "batch": 20, "recipients": 80,
             "seconds": {"smtplib": [4.0, 4.0], "plain": [4.4, 4.6], "idempotent": [4.2, 4.2]}},
            {"delay_ms": 50, "connections": 32, "batch": 640, "recipients": 2560,
             "seconds": {"smtplib": [4.0, 4.0], "plain": [8.0, 4.0], "idempotent": [5.0, 5.0]},
             "cpu_seconds": {"smtplib": [2.56, 2.56], "plain": [5.12, 5.12], "idempotent": [3.84, 3.84]}},
        ],
        "cores": 2,
    },
    "build": {"size": 1000, "generated_in": 0.1,
              "seconds": {"engine": [1.0, 1.0], "statement": [1.0, 1.0], "plain": [0.95, 0.95]}},
    "memory": {"batch": 500, "sizes": {"10": {"peak": 100, "seconds": 1},
                                       "1000": {"peak": 110, "seconds": 2}}},
    "admin": {"sends": 1000, "pages": {"campaign list": {"ms": 350.0, "queries": 5, "status": 200,
                                                         "url": "/admin/"}}},
    "pacing": {
        "batch": 500,
        "goodput": {
            "cold": {"limit": 20.0, "configured": None, "seconds": 60.0, "workers": 2, "batch": 20,
                     "accepted": 30, "deferred": 15, "other_done_at": 5.0, "goodput": 0.02,
                     "goodput_whole": 0.025, "deferred_per_accepted": 0.5, "per_second": [1] * 60,
                     "rates": [(0.1, 0.2, "throttled: 421 4.7.28"), (5.0, 0.21, "good answers")]},
            "configured": {"limit": 20.0, "configured": 40.0, "seconds": 60.0, "workers": 2,
                           "batch": 20, "accepted": 1190, "deferred": 60, "other_done_at": 5.5,
                           "goodput": 0.99, "goodput_whole": 0.99, "deferred_per_accepted": 0.05,
                           "per_second": [20] * 60, "rates": [(0.1, 32.0, "throttled: 421")]},
        },
        "claims": {
            "100000": {"claim": {"ms": 10.0, "buffers": 17000, "rows_read": 2000,
                                 "sends_read": 1500, "claimed": 500},
                       "claim_paced": {"ms": 9.0, "buffers": 12000, "rows_read": 3600,
                                       "sends_read": 3200, "claimed": 400}},
            "1000000": {"claim": {"ms": 12.0, "buffers": 21000, "rows_read": 2000,
                                  "sends_read": 1500, "claimed": 500},
                        "claim_paced": {"ms": 9.0, "buffers": 15000, "rows_read": 3600,
                                        "sends_read": 3200, "claimed": 400}},
        },
    },
}


def test_targets_are_ratios_in_the_same_run():
    rows = {target: (ratio, met) for target, _, ratio, met in report.targets(RESULTS)}
    assert rows["engine b500, 1 worker(s) ≥ 0.5× ceiling"] == ("0.45×", "**not met**")
    assert rows["engine b500, 1 worker(s) ≥ 2× pgqueuer"] == ("2.00×", "**met**")
    assert rows["engine b500, 1 worker(s) ≥ 40× procrastinate"] == ("40.00×", "**met**")
    assert rows["SMTP, plain receiver, 1 connection(s) ≥ 0.8× raw smtplib"] == ("0.50×", "**not met**")
    latency = "SMTP, {} receiver answering in 50 ms, {} connection(s) ≥ 0.8× raw smtplib"
    assert rows[latency.format("plain", 1)] == ("0.89×", "**met**")  # 80 / 4.5 s vs 80 / 4 s
    assert rows[latency.format("idempotent", 32)] == ("0.80×", "**met**")
    assert rows[latency.format("plain", 32)] == ("0.67×", "**not met**")  # median of 8 s and 4 s
    assert rows["build 1,000 ≥ 0.9× plain INSERT…SELECT"] == ("0.95×", "**met**")
    assert rows["peak RSS at 1,000 ≤ 1.2× at 10"] == ("1.10×", "**met**")
    assert rows["admin campaign list (1,000 sends) ≤ 300 ms"][1] == "**not met**"
    goodput = "goodput to a provider throttling at 20/s ≥ 0.9× its limit"
    assert rows[f"{goodput} (its bucket made by the first throttle)"] == ("0.02×", "**not met**")
    assert rows[f"{goodput} (its bucket configured at 2× the limit)"] == ("0.99×", "**met**")
    o_batch = "at 1,000,000 rows reads what it does at 100,000 (growth_sends rows; O(batch))"
    assert rows[f"claim_paced {o_batch}"] == ("1.00×", "**met**")


def test_each_contender_s_cpu_a_recipient_and_what_it_bounds():
    results = {**RESULTS, "machine": {**RESULTS["machine"], "cores": "2 logical, 1 physical"},
               "throughput": [
                   {**entry, "cpu_seconds": {"engine": [0.10, 0.14], "pgqueuer": [0.12, 0.12],
                                             "minimal ceiling": [0.05, 0.05]}[entry["system"]]}
                   for entry in [*RESULTS["throughput"],
                                 {"system": "minimal ceiling", "batch": 500, "workers": 1,
                                  "jobs": 1000, "seconds": [0.5, 0.5]}]
                   if entry["system"] in ("engine", "pgqueuer", "minimal ceiling")]}
    text = report.markdown(results)
    # engine b500: 1,000 recipients at 1,000/s on 2 cores, 0.12 s of CPU (the median of 0.10 and
    # 0.14): 120 µs a recipient, 6 % of the cores; pgqueuer's 120 µs and the minimal ceiling's 50
    assert "| 500 | 1 | 120 | – | – | 50 | 120 | 6% | 1.00× | 0.42× |" in text
    assert "| 20 | 2 | 120 | – | – | – | – | 2% | – | – |" in text  # 333 recipients/s there
    assert "### CPU a recipient" not in report.markdown(RESULTS)  # runs made before it was measured


def test_the_cpu_sampler_counts_the_cores_kept_busy():
    with procs.CpuSampler() as sampler:
        time.sleep(0.1)
        started = time.time()
        while time.time() - started < 0.5:  # this process keeps one core busy
            pass
        ended = time.time()
        time.sleep(0.1)
    assert 0.4 <= sampler.busy_between(started, ended) <= 0.5 * (os.cpu_count() or 1) + 0.1
    assert sampler.busy_between(ended + 10, ended + 20) == 0.0  # nothing sampled then


def test_markdown_puts_targets_first_and_shows_noise(tmp_path):
    text = report.markdown(RESULTS, chart="results.png")
    assert text.index("## Targets") < text.index("## Recipients settled per second")
    assert "(±33%)" in text  # engine batch 20: 500 and 250 /s around a median of 375
    assert "| made by the first throttle | 30 | 15 | 0.50 | 0.02× | 0.03× | 0.20 → 0.21 /s | 5.0 s |" in text
    assert "| claim_paced / claim at 1,000,000 | 0.75× | 0.71× | 2.13× | 0.89× |" in text
    # the machine's CPU a message (1 ms raw; twice and 1.5 times that) and its cores' busy share
    assert "| 1,000 µs; 2.00×, 1.50× | 32% / 43% / 38% |" in text
    assert ("| 50 ms | 32 | 2,560 | 640 | 640 | 427 (±33%) | 512 | 0.67× | 0.80× |"
            in text)  # plain: 320 and 640 /s, N over the median of 8 and 4 s
    report.chart(RESULTS, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"


def _claim(ms: float, buffers: int) -> dict:
    return {"ms": ms, "buffers": buffers, "read": 0, "sends_read": 1500, "claimed": 500}


DIRECTIONS = {
    "batch": 500, "size": 1000, "directions": {"a": "as is", "e": "c + d"}, "indexes": [],
    "seconds": {"engine": {"1": [1.0]}, "pgqueuer": {"1": [0.5]}, "minimal ceiling": {"1": [0.25]},
                "a": {"1": [0.5]}, "e": {"1": [0.25]}},
    "fill": {"a": [0.1], "e": [0.2]},
    "costs": {
        "a": {"wal_per_recipient": 1500.0, "wal_claim": 800.0, "wal_settle": 700.0,
              "updates_per_recipient": 2.0, "hot_share": 0.0, "bytes_before": 400_000,
              "bytes_after": 900_000},
        "e": {"wal_per_recipient": 750.0, "wal_claim": 375.0, "wal_settle": 375.0,
              "updates_per_recipient": 2.0, "hot_share": 0.5, "bytes_before": 500_000,
              "bytes_after": 700_000},
    },
}
HUGE = {
    "size": 10_000_000, "batch": 500, "autovacuum": "off", "page_repetitions": 3, "generated_in": 300.0,
    "disk": {"free": 80 * 2**30, "needed": 30 * 10**9, "asked": 10_000_000},
    "build": {"seconds": {"engine": 400.0, "statement": 380.0, "plain": 320.0},
              "bytes": {"heap": 2**31, "indexes": 2**31, "each": {"send_unique_address": 2**29}}},
    "moments": {
        "built": {"sent": 0, "pages": {"campaign list": {"ms": 120.0, "queries": 8, "status": 200}},
                  "claims": {"claim": _claim(5.0, 20_000), "claim_paced": _claim(6.0, 21_000),
                             "settle": {"ms": 80.0, "buffers": 22_000, "read": 0,
                                        "join_filtered": 249_500}}},
        "half sent": {"sent": 5_000_000,
                      "pages": {"campaign list": {"ms": 450.0, "queries": 8, "status": 200}},
                      "claims": {"claim": _claim(30.0, 40_000), "claim_paced": _claim(7.0, 21_000)}},
        "all sent": {"sent": 10_000_000,
                     "pages": {"campaign list": {"ms": 200.0, "queries": 8, "status": 200}},
                     "claims": {"claim": {**_claim(40.0, 19_000), "claimed": 0},
                                "claim_paced": {**_claim(40.0, 19_000), "claimed": 0}}},
    },
    "loop": [{"done": 500_000, "claim_ms": 5.0, "claim_max": 9.0, "settle_ms": 80.0, "rate": 5000.0,
              "batches": 1000, "first_claim_ms": 4.0}],
    "vacuum_seconds": 120.0,
    "engine": {"workers": 2, "rows": 5_000_000, "seconds": 500.0,
               "curve": [{"at": 5.0, "sent": 50_000, "rate": 10_000.0}]},
    "export": {"floor": {"peak": 100 * 2**20}, "page": {"ms": 2.0},
               "csv": {"first_byte": 0.5, "seconds": 100.0, "bytes": 1, "lines": 10_000_001,
                       "peak": 110 * 2**20, "rows_per_s": 100_000.0}},
}


def test_minimal_ceiling_directions_and_a_huge_campaign():
    results = {**RESULTS, "directions": DIRECTIONS, "huge": HUGE,
               "throughput": [*RESULTS["throughput"], {"system": "minimal ceiling", "batch": 500,
                                                       "workers": 1, "jobs": 1000, "seconds": [0.5, 0.5]}]}
    rows = {target: (figures, ratio, met) for target, figures, ratio, met in report.targets(results)}
    assert rows["engine b500, 1 worker(s) ≥ 0.6× minimal ceiling"][1:] == ("0.50×", "**not met**")
    assert rows["build of 10,000,000 ≥ 0.9× plain INSERT…SELECT"][1:] == ("0.80×", "**not met**")
    later = "of a 10,000,000-recipient campaign, half sent, reads ≤ 1.5× the first batch's buffers"
    assert rows[f"claim {later}"][1:] == ("2.00×", "**not met**")
    assert rows[f"claim_paced {later}"][1:] == ("1.00×", "**met**")
    # nothing left to claim: no batch's cost, so no verdict (19,000 buffers under 1.5 times 20,000 hid it)
    assert rows["claim of a 10,000,000-recipient campaign, all sent: an empty claim"] == (
        "19,000 buffers, 40.0 ms (a first batch: 20,000)", "–", "–")
    assert rows["admin campaign list (10,000,000 sends) ≤ 300 ms at every moment"] == (
        "worst 450 ms (half sent)", "–", "**not met**")
    assert rows["export csv of 10,000,000 rows: peak RSS ≤ 1.2× an empty campaign's"][1:] == (
        "1.10×", "**met**")
    text = report.markdown(results)
    assert ("| 500 | 1 | 1,000 | 2,222 (±11%) | – | 2,000 | 500 | 25 | 0.45× | – | 0.50× | 2.00× "
            "| 40.00× |") in text
    # e: 4,000 /s, twice a; the engine projected: 1 / (1/1,000 - 1/2,000 + 1/4,000)
    assert "| e: c + d | 1 | 4,000 | 2.00× | 1.00× | 1,333 | 0.67× | 0.33× |" in text
    assert "| e: c + d | 750 (375 + 375) | 0.50× | 2.00 | 50% | 500 → 700 | 5,000 | – |" in text
    assert ("| half sent | 5,000,000 | 30.00 | 40,000 (0) | 1,500 | 7.00 | 21,000 (0) | 1,500 "
            "| – | – | – |") in text
    assert ("| built | 0 | 5.00 | 20,000 (0) | 1,500 | 6.00 | 21,000 (0) | 1,500 | 80.00 | 22,000 "
            "| 249,500 |") in text
    assert "plans in `bench/out/huge-plans.txt`)" in text  # a run that did not say where


def test_the_huge_report_names_the_plans_file_its_run_wrote():
    text = report.markdown({**RESULTS, "huge": {**HUGE, "plans": "/tmp/elsewhere/huge-plans.txt"}})
    assert "plans in `/tmp/elsewhere/huge-plans.txt`)" in text


def _moment(page_ms: float, claim_buffers: int) -> dict:
    return {"sent": 0, "pages": {"campaign list": {"ms": page_ms, "queries": 8, "status": 200}},
            "claims": {"claim": _claim(4.0, claim_buffers), "claim_paced": _claim(5.0, 1_000)}}


def test_the_next_campaign_beside_a_finished_big_one_and_what_the_tallies_cost():
    neighbours = {"size": 200_000, "rows_beside": 10_000_000,
                  "beside": {"build_seconds": 12.0, **_moment(450.0, 3_000)},
                  "alone": {"build_seconds": 10.0, **_moment(30.0, 1_500)}}
    tallies = {"size": 100_000,
               "seconds": {"engine b500 w1 on": [2.0, 2.2], "engine b500 w1 off": [2.0, 2.0],
                           "build on": [5.0], "build off": [5.0]},
               "on_over_off": {"engine b500 w1": 1.05, "build": 1.0}}
    results = {**RESULTS, "huge": {**HUGE, "neighbours": neighbours}, "tallies": tallies}
    rows = {target: (figures, ratio, met) for target, figures, ratio, met in report.targets(results)}
    assert rows["admin campaign list (200,000 sends) beside 10,000,000 finished rows ≤ 300 ms"] == (
        "450 ms (alone 30 ms)", "15.00×", "**not met**")
    text = report.markdown(results)
    assert "| build | 12.0 s | 10.0 s | 1.20× |" in text
    assert "| claim | 4.00 ms, 3,000 buffers | 4.00 ms, 1,500 buffers | 2.00× (buffers) |" in text
    assert "| campaign list | 450 ms (8) | 30 ms (8) | 15.00× |" in text
    assert "## What the tallies cost (`--only tallies`, 100,000 recipients" in text
    assert "| engine b500 w1 | 2.10 s | 2.00 s | 1.05× |" in text
    assert "| build | 5.00 s | 5.00 s | 1.00× |" in text


def test_further_contenders_of_the_latency_family_and_the_reported_flags_experiment():
    point = {"delay_ms": 20, "connections": 32, "batch": 640, "recipients": 2560,
             "seconds": {"smtplib": [2.0, 2.0], "plain": [4.0, 4.0], "idempotent": [2.5, 2.5],
                         "plain-20": [2.5, 2.5], "smtplib+0.8": [2.0, 2.5, 2.5],
                         "plain-unprepared": [5.0, 5.0]}}
    results = {**RESULTS, "smtp_latency": {**RESULTS["smtp_latency"], "points": [point],
                                           "chunks": [20], "loads": [0.8], "unprepared": True},
               "experiments": {"reported": {"seconds": {"with": [10.0, 12.0], "without": [11.0, 11.0]},
                                            "ratio": 1.0}}}
    text = report.markdown(results)
    assert ("Plain receiver with SENDER_HANDOFF_CHUNK=20 (a kill leaves up to 20 messages a "
            "connection in doubt): 20 ms, C = 32: 1,024 /s, 0.80× raw") in text
    assert ("Plain receiver with DATABASE_PREPARED_STATEMENTS off (each statement on the wires "
            "parsed and planned on every call): 20 ms, C = 32: 512 /s, 0.40× raw") in text
    assert ("Raw smtplib beside a process keeping 0.8 cores busy: 20 ms, C = 32: 1,024 (±12%) /s, "
            "0.80× of itself alone") in text
    assert "with: 10.00, 12.00 s; without: 11.00, 11.00 s; median ÷ median **1.00×**" in text


def test_the_hot_settle_experiment_reports_each_worker_counts_rounds_and_the_median_ratio():
    cost = {"hot_share": 0.83, "wal_per_recipient": 400.0, "cpu_us": 50.0}
    plain = {"hot_share": 0.0, "wal_per_recipient": 900.0, "cpu_us": 60.0}
    hot = {1: {"seconds": {"as migrated": [4.0, 4.4], "HOT settle (fillfactor 50)": [4.4, 4.0]},
               "costs": {"as migrated": [plain, plain], "HOT settle (fillfactor 50)": [cost, cost]},
               "ratio": 1.0}}
    text = report.markdown({**RESULTS, "experiments": {"hot": hot}})
    assert "| 1 | as migrated | 4.00 s, 4.40 s | 0%, 0% | 60 µs, 60 µs | **1.00×** |" in text
    assert "| 1 | HOT settle (fillfactor 50) | 4.40 s, 4.00 s | 83%, 83% | 50 µs, 50 µs |  |" in text
