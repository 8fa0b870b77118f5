"""What an operator of a worker fleet watches: the workers' Prometheus metrics and heartbeats,
the web app's campaign gauges, and JSON logs."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
import requests
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from growth.models import Campaign, WorkerHeartbeat
from tests.helpers import manage, subprocess_env
from tests.scenarios import approved_campaign, sending_campaign, statuses
from tests.smtp import free_port

SMTP = "django_mail:django.core.mail.backends.smtp.EmailBackend"


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_workers_metrics_count_what_it_sent_and_its_heartbeat_is_seen(smtp_server, tmp_path):
    campaign = approved_campaign(count=25)
    port = free_port()
    beat = tmp_path / "alive"
    worker = subprocess.Popen(
        manage("run_sender", "--batch-size", "10", "--tick", "0.1", "--worker-id", "w-metrics",
               "--metrics-port", str(port), "--heartbeat-file", str(beat)),
        env=subprocess_env(EMAIL_URL=smtp_server.url), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while Campaign.objects.get(id=campaign.id).status != "sent":
            assert time.monotonic() < deadline and worker.poll() is None
            time.sleep(0.1)
        alive = WorkerHeartbeat.objects.get(worker_id="w-metrics")
        assert alive.stopped_at is None and timezone.now() - alive.seen_at < timezone.timedelta(seconds=10)
        assert beat.exists()

        scraped = samples(requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text)
        assert scraped[("growth_messages_total", (("outcome", "sent"), ("transport", SMTP)))] == 25
        assert scraped[("growth_statement_seconds_count", (("statement", "claim"),))] >= 3
        assert scraped[("growth_statement_seconds_count", (("statement", "settle"),))] >= 3
        assert scraped[("growth_transport_message_seconds_count", (("transport", SMTP),))] == 25
        assert scraped[("growth_worker_last_beat_timestamp_seconds", ())] > time.time() - 60
        # bounded cardinality: no label names a campaign, a recipient or a worker
        label_names = {name for metric, labels in scraped if metric.startswith("growth_")
                       for name, _ in labels}
        assert label_names <= {"outcome", "transport", "statement", "to", "le"}, label_names
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    assert WorkerHeartbeat.objects.get(worker_id="w-metrics").stopped_at is not None
    assert statuses(campaign) == {"sent": 25}


@pytest.mark.django_db
def test_the_web_apps_metrics_are_the_sending_campaigns_rows_by_status(settings):
    sending_campaign(count=7)
    client = Client()
    scraped = samples(client.get("/metrics").content.decode())  # from loopback
    assert scraped[("growth_sending_campaign_rows", (("status", "queued"),))] == 7
    assert scraped[("growth_campaigns", (("status", "sending"),))] == 1

    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 404
    for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP", "X-Forwarded-Proto",
                   "X-Forwarded-Host", "Via"):  # a proxy on this host
        assert client.get("/metrics", headers={header: "203.0.113.9"}).status_code == 404, header
    # an install that says a proxy is in front: its requests may carry nothing of it
    for name, value in (("SECURE_PROXY_SSL_HEADER", ("HTTP_X_FORWARDED_PROTO", "https")),
                        ("TRUSTED_PROXY_COUNT", 1)):
        setattr(settings, name, value)
        assert client.get("/metrics").status_code == 404, name
        setattr(settings, name, None if name == "SECURE_PROXY_SSL_HEADER" else 0)
    assert client.get("/metrics").status_code == 200
    settings.METRICS_TOKEN = "s3cret"
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.django_db
def test_the_workers_page_shows_who_is_alive_and_what_a_dead_worker_holds(admin_client):
    from growth.models import Send

    sending_campaign(count=4)
    Send.objects.claim(worker_id="dead-one", batch_size=3, lease=600)
    now = timezone.now()
    WorkerHeartbeat.objects.create(worker_id="dead-one", hostname="h1", pid=1, receiver="plain",
                                   batch_size=3, started_at=now, seen_at=now - timezone.timedelta(minutes=5))
    WorkerHeartbeat.objects.create(worker_id="alive-one", hostname="h2", pid=2, receiver="plain",
                                   batch_size=3, started_at=now, seen_at=now)

    body = admin_client.get("/admin/growth/workerheartbeat/").content.decode()

    assert "growth-worker--alive" in body and "no heartbeat since" in body
    assert "<b>3</b>, held by a dead worker until their leases end" in body


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_log_format_json_gives_one_object_a_line_with_the_text_formats_fields(tmp_path):
    approved_campaign(count=5)
    result = subprocess.run(manage("run_sender", "--until-idle", "--tick", "0.1"),
                            env=subprocess_env(LOG_FORMAT="json", EMAIL_URL=f"filemail://{tmp_path}"),
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    lines = [json.loads(line) for line in result.stderr.decode().splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    [summary] = [line for line in lines if " finished: " in line["message"]]
    assert (summary["sent"], summary["total"], summary["level"]) == (5, 5, "INFO")
    assert summary["campaign_id"] and summary["worker_id"]


@pytest.mark.parametrize("seconds", [0.0, 0.0004, 0.001, 0.03, 7.5, 1e9])
def test_a_chunks_time_shared_out_is_recorded_as_that_many_observations(seconds):
    """observe_each(h, s, n) leaves what n calls of h.observe(s) leave, bucket by bucket."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from growth.observability.metrics import TRANSPORT_SECONDS, observe_each

    buckets = TRANSPORT_SECONDS._upper_bounds[:-1]
    one_by_one, at_once = CollectorRegistry(), CollectorRegistry()
    for registry in (one_by_one, at_once):
        Histogram("wire", "doc", ["transport"], buckets=buckets, registry=registry)
    for _ in range(7):
        one_by_one._names_to_collectors["wire"].labels("t").observe(seconds)
    observe_each(at_once._names_to_collectors["wire"].labels("t"), seconds, 7)

    expected, got = (samples(generate_latest(r).decode()) for r in (one_by_one, at_once))
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value), key
    assert expected[("wire_count", (("transport", "t"),))] == 7
