"""The benchmark's report: ratios, verdicts and the chart, from made-up figures (no timing here:
the targets live in `make bench`, never in a test)."""

from __future__ import annotations

from bench import report

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
    assert rows["build 1,000 ≥ 0.9× plain INSERT…SELECT"] == ("0.95×", "**met**")
    assert rows["peak RSS at 1,000 ≤ 1.2× at 10"] == ("1.10×", "**met**")
    assert rows["admin campaign list (1,000 sends) ≤ 300 ms"][1] == "**not met**"
    goodput = "goodput to a provider throttling at 20/s ≥ 0.9× its limit"
    assert rows[f"{goodput} (its bucket made by the first throttle)"] == ("0.02×", "**not met**")
    assert rows[f"{goodput} (its bucket configured at 2× the limit)"] == ("0.99×", "**met**")
    o_batch = "at 1,000,000 rows reads what it does at 100,000 (growth_sends rows; O(batch))"
    assert rows[f"claim_paced {o_batch}"] == ("1.00×", "**met**")


def test_markdown_puts_targets_first_and_shows_noise(tmp_path):
    text = report.markdown(RESULTS, chart="results.png")
    assert text.index("## Targets") < text.index("## Recipients settled per second")
    assert "(±33%)" in text  # engine batch 20: 500 and 250 /s around a median of 375
    assert "| made by the first throttle | 30 | 15 | 0.50 | 0.02× | 0.03× | 0.20 → 0.21 /s | 5.0 s |" in text
    assert "| claim_paced / claim at 1,000,000 | 0.75× | 0.71× | 2.13× | 0.89× |" in text
    report.chart(RESULTS, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").read_bytes()[:4] == b"\x89PNG"
