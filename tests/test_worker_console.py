"""What run_sender prints for the operator at the terminal: progress every few seconds (not per
batch), pauses, resumes and cancels it notices, idleness, a summary per finished campaign, and a
warning at start when the messages reach nobody."""

from __future__ import annotations

import logging
import re
import threading

import pytest

from growth.models import Campaign, Suppression
from growth.sending import console as console_module
from growth.sending.console import Console
from growth.sending.transports.null import NullTransport
from growth.sending.worker import Worker
from tests import scenarios
from tests.helpers import wait_for
from tests.scenarios import approved_campaign, pausing_once, sending_campaign

pytestmark = pytest.mark.django_db(transaction=True)

CONSOLE = "growth.sending.console"


@pytest.fixture(autouse=True)
def info_logs(caplog):
    caplog.set_level(logging.INFO, logger="growth")
    return caplog


def lines(caplog, level: int = logging.INFO) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == CONSOLE and r.levelno == level]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_worker(**options) -> Worker:
    return scenarios.run_worker(**{"worker_id": "w1", **options})


def test_a_progress_line_every_few_seconds_with_rate_and_eta_and_none_when_nothing_moved(caplog):
    campaign = sending_campaign(count=10, name="Spring news")
    clock = Clock()
    console = Console(worker_id="w1", every=5, clock=clock)
    console.sending([campaign.id])
    console.progress()  # a campaign seen for the first time: at once, no rate yet
    assert lines(caplog) == [f"campaign {campaign.id} “Spring news”: 0/10 sent (0.0%), 10 to go"]

    Worker(worker_id="w1", transport=NullTransport(), batch_size=4).cycle()
    clock.now += 2
    console.progress()  # too soon
    assert len(lines(caplog)) == 1
    clock.now += 3
    console.progress()
    assert lines(caplog)[-1] == (f"campaign {campaign.id} “Spring news”: 4/10 sent (40.0%), "
                                 "6 to go, 0.8/s, ETA 8s")
    clock.now += 5
    console.progress()  # nothing moved: no line
    assert len(lines(caplog)) == 2
    record = next(r for r in reversed(caplog.records) if r.name == CONSOLE)
    assert (record.campaign_id, record.sent, record.total, record.queued) == (campaign.id, 4, 10, 6)


def test_a_campaign_name_reaches_the_terminal_as_one_line_of_text(caplog):
    """A tenant types the name; the operator's terminal would act on ESC sequences in it."""
    campaign = sending_campaign(count=2, name="Spring\x1b]0;owned\x07 news\r\n\x9bfake")
    console = Console(worker_id="w1", every=5, clock=Clock())
    console.sending([campaign.id])
    console.progress()
    assert lines(caplog) == [f"campaign {campaign.id} “Spring ]0;owned news fake”: 0/2 sent "
                             "(0.0%), 2 to go"]


def test_looks_at_the_progress_are_spaced_by_what_they_cost(caplog, monkeypatch):
    """Counting a huge campaign takes a while, on the worker's loop: looks are spaced so that
    they take at most 5 % of its time (a 2 s count: the next look 40 s later, not 5)."""
    campaign = sending_campaign(count=10, name="Spring news")
    clock = Clock()
    console = Console(worker_id="w1", every=5, clock=clock)
    counting = console_module._counts

    def slow_count(campaign_ids):
        clock.now += 2  # what counting 10,000,000 rows costs, give or take
        return counting(campaign_ids)

    monkeypatch.setattr(console_module, "_counts", slow_count)
    console.sending([campaign.id])
    console.progress()
    looked_at = clock.now
    Worker(worker_id="w1", transport=NullTransport(), batch_size=4).cycle()
    clock.now = looked_at + 30
    console.progress()  # 30 s after a 2 s look: too soon
    assert len(lines(caplog)) == 1
    clock.now = looked_at + 38  # the look started 2 s before it ended: 40 s after that start
    console.progress()
    assert len(lines(caplog)) == 2 and "4/10 sent" in lines(caplog)[-1]


def test_pause_resume_and_cancel_are_noticed_with_the_figures(caplog):
    campaign = sending_campaign(count=10, name="Spring news")
    console = Console(worker_id="w1", clock=Clock())
    console.sending([campaign.id])
    Worker(worker_id="w1", transport=NullTransport(), batch_size=4).cycle()

    assert Campaign.objects.pause(campaign_id=campaign.id)
    console.sending([])
    console.sending([])  # said once
    assert lines(caplog) == [f"campaign {campaign.id} “Spring news” paused; 4/10 sent (40.0%), "
                             "6 waiting for a resume"]
    assert Campaign.objects.resume(campaign_id=campaign.id)
    console.sending([campaign.id])
    assert lines(caplog)[-1] == f"campaign {campaign.id} “Spring news” resumed: 6 to go"
    assert Campaign.objects.cancel(campaign_id=campaign.id).dropped == 6
    console.sending([])
    assert re.fullmatch(rf"campaign {campaign.id} “Spring news” cancelled: 10 recipients: 4 sent, "
                        r"0 failed, 0 suppressed, 0 unknown, 6 cancelled; took \d+s, .+ sent/s on "
                        r"average", lines(caplog)[-1])
    console.sending([])
    assert len(lines(caplog)) == 3  # a cancelled campaign is forgotten


def test_a_pause_during_the_run_is_noted_by_the_worker(smtp_settings, caplog):
    campaign = approved_campaign(count=20, name="Spring news")

    run_worker(transport=pausing_once(campaign))
    # noticed when it happens, while what was claimed before it may still be on the wires
    paused = [line for line in lines(caplog) if " paused; " in line]
    assert len(paused) == 1 and re.fullmatch(
        rf"campaign {campaign.id} “Spring news” paused; (\d+)/20 sent \([\d.]+%\), (\d+) waiting "
        "for a resume", paused[0])


def test_a_run_prints_progress_and_a_summary_at_the_finish_not_a_line_per_batch(smtp_settings, caplog):
    campaign = sending_campaign(count=30, name="Spring news")
    smtp_settings.handler.replies = {"person1@example.com": ["550 5.7.1 Rejected by policy"]}
    Suppression.objects.suppress(account_id=campaign.account_id, email_lower="person2@example.com",
                                 reason="unsubscribed")  # opted out after the build
    run_worker()
    said = lines(caplog)
    progress = [line for line in said if line.startswith(f"campaign {campaign.id} “Spring news”: ")]
    assert progress and len(progress) < 30 / 7  # one look per few seconds, not one per batch
    summary = [line for line in said if " finished: " in line]
    assert len(summary) == 1
    assert re.fullmatch(rf"campaign {campaign.id} “Spring news” finished: 30 recipients: 28 sent, "
                        r"1 failed, 1 suppressed, 0 unknown; took \d+s, [\d.,]+ sent/s on average",
                        summary[0])
    assert said[-1] == "idle: no campaign is sending or due (--until-idle: stopping)"
    batch_lines = [r for r in caplog.records if r.levelno >= logging.INFO and "claimed" in r.getMessage()]
    assert batch_lines == []


def test_the_worker_notes_when_it_goes_idle_and_when_it_wakes(caplog):
    worker = Worker(worker_id="w1", batch_size=50, tick=0.05, transport=NullTransport())
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        wait_for(lambda: any(line.startswith("idle: ") for line in lines(caplog)))
        assert "idle: no campaign is sending or due; looking again in 0s" in lines(caplog)
        campaign = approved_campaign(count=5, name="Spring news")
        wait_for(lambda: any(" finished: " in line for line in lines(caplog)))
    finally:
        worker.stop()
        thread.join(30)
    said = lines(caplog)
    awake = [i for i, line in enumerate(said) if re.fullmatch(
        r"awake after \d+s idle: a campaign is sending or due", line)]
    finished = [i for i, line in enumerate(said)
                if line.startswith(f"campaign {campaign.id} “Spring news” finished")]
    assert len(awake) == 1 and len(finished) == 1 and awake[0] < finished[0]
    assert said[-1].startswith("idle: ")  # idle again once it is done, said once
    assert sum(line.startswith("idle: ") for line in said) == 2


@pytest.mark.parametrize(("backend", "says"), [
    ("django.core.mail.backends.console.EmailBackend", "(EMAIL_URL=consolemail://) prints every "
                                                       "message to this console"),
    ("django.core.mail.backends.filebased.EmailBackend", "(EMAIL_URL=filemail://) writes every "
                                                         "message to a file in "),
    ("django.core.mail.backends.locmem.EmailBackend", "keeps every message in this process's memory"),
])
def test_a_backend_that_reaches_nobody_is_warned_about_at_start(settings, tmp_path, caplog, backend,
                                                                says):
    settings.EMAIL_BACKEND = backend
    settings.EMAIL_FILE_PATH = str(tmp_path)
    run_worker()  # the transport from the settings, as run_sender has it
    (warning,) = lines(caplog, logging.WARNING)
    assert warning.startswith("this is not a real send: the email backend ")
    assert says in warning and "no recipient receives anything" in warning
    if "filebased" in backend:
        assert str(tmp_path) in warning
    assert lines(caplog)[0].startswith("worker w1 started (batch 7, lease 30s, plain receiver, "
                                       "django_mail:")


def test_a_real_mail_server_gets_no_warning(smtp_settings, caplog):
    run_worker()
    assert lines(caplog, logging.WARNING) == []
    assert any(line.startswith("worker w1 started") for line in lines(caplog))

