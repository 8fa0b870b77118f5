"""The SMTP path: run_sender with Django's SMTP backend vs a raw smtplib loop, same sink.

The sink is aiosmtpd on loopback in its own process (so it does not share a GIL with anyone),
answering 250 to every message and counting them. The raw loop sends pre-built messages (the
engine's own rendering of one recipient, with the address swapped per recipient, built before
the clock starts) over the same number of connections as there are workers.
"""

from __future__ import annotations

import smtplib
import socket

from bench.procs import SPAWN, timed_pool

FROM = "news@bench.example"
SAMPLE_EMAIL = "r1@bench.example"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sink(port: int, accepted, ready, stop) -> None:
    from aiosmtpd.controller import Controller

    class Counting:
        async def handle_DATA(self, server, session, envelope):
            with accepted.get_lock():
                accepted.value += 1
            return "250 2.0.0 OK"

    controller = Controller(Counting(), hostname="127.0.0.1", port=port)
    controller.start()
    ready.set()
    stop.wait()
    controller.stop()


class Sink:
    """An aiosmtpd server in its own process; ``accepted`` counts the messages it took."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.accepted = SPAWN.Value("q", 0)
        self._ready, self._stop = SPAWN.Event(), SPAWN.Event()
        self._process = SPAWN.Process(target=_sink, daemon=True,
                                      args=(self.port, self.accepted, self._ready, self._stop))

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def __enter__(self) -> Sink:
        self._process.start()
        while not self._ready.wait(0.2):
            if not self._process.is_alive():
                raise RuntimeError("the SMTP sink did not start")
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()

    def reset(self) -> None:
        with self.accepted.get_lock():
            self.accepted.value = 0


def sample_message(audience) -> bytes:
    """The engine's rendering of one recipient of a campaign like the benchmarked one."""
    from bench import data
    from growth.models import Campaign
    from growth.sending.rendering import CampaignContent, CampaignRenderer

    campaign = Campaign.objects.select_related("account").get(id=data.approved_campaign(audience))
    Campaign.objects.cancel(campaign_id=campaign.id)  # only its content is wanted
    message = CampaignRenderer(CampaignContent.of(campaign)).render(
        job_id=f"campaign:{campaign.id}:1", email=SAMPLE_EMAIL, subscriber_id=1)
    return message.message().as_bytes()


def raw_work(index: int, ready, port: int, template: bytes, size: int, workers: int) -> int:
    """Send this worker's share of pre-built messages over one connection; return how many."""
    recipients = [f"r{n}@bench.example" for n in range(1 + index, size + 1, workers)]
    messages = [(to, template.replace(SAMPLE_EMAIL.encode(), to.encode())) for to in recipients]
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.ehlo()
        ready()
        for to, message in messages:
            client.sendmail(FROM, [to], message)
    return len(messages)


def raw_run(*, audience, workers: int, sink: Sink) -> float:
    template = sample_message(audience)
    sink.reset()
    result = timed_pool(workers, raw_work, sink.port, template, audience.size, workers)
    assert sink.accepted.value == audience.size, f"sink took {sink.accepted.value} of {audience.size}"
    return result.seconds


def engine_run(*, audience, workers: int, batch_size: int, sink: Sink, idempotent: bool, out) -> float:
    from bench import engine  # not at the top: the spawned workers here must not import Django

    sink.reset()
    seconds = engine.run(
        audience=audience, batch_size=batch_size, workers=workers, out=out,
        transport="growth.sending.transports.django_mail.DjangoMailTransport",
        env={"EMAIL_URL": sink.url, "SENDER_IDEMPOTENT_TRANSPORT": str(idempotent).lower()},
        name=f"smtp-{'idempotent' if idempotent else 'plain'}")
    assert sink.accepted.value == audience.size, f"sink took {sink.accepted.value} of {audience.size}"
    return seconds
