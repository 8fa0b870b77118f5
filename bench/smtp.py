"""The SMTP path: run_sender with Django's SMTP backend vs a raw smtplib loop, same sink.

The sink is aiosmtpd on loopback in its own process (so it does not share a GIL with anyone),
answering 250 to every message and counting them. The raw loop sends pre-built messages (the
engine's own rendering of one recipient, with the address swapped per recipient, built before
the clock starts) over the same number of connections as there are workers.

DKIM: the same two, on a smaller audience, unsigned and signed with the platform's key
(RSA-2048, Ed25519; the tests' keys), so that signed / unsigned is a ratio of the same run; the
raw loop signs each copy on the clock too, and the sink counts what came signed. Beside them, the
cost of signing one message in process (``signing_cost``).

The sink can also answer like a real relay, in tens of milliseconds: ``Sink.answer_after`` delays
its reply to DATA (and, when asked, to each RCPT) with ``asyncio.sleep``, so that the one sink
process keeps serving every other connection meanwhile (``bench.smtp_latency``).
"""

from __future__ import annotations

import asyncio
import smtplib
import socket
import threading
import time
from collections import deque
from pathlib import Path

from bench.procs import SPAWN, timed_pool

FROM = "news@bench.example"
SAMPLE_EMAIL = "r1@bench.example"
DKIM_KEYS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "dkim"
DKIM = {"ed25519-sha256": "ed25519.key", "rsa-sha256": "rsa2048.pem"}  # algorithm -> key file


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _sink(port: int, accepted, signed, delays, pipelining, ready, stop) -> None:
    from aiosmtpd.controller import Controller

    class Counting:
        async def handle_EHLO(self, server, session, envelope, hostname, responses):
            session.host_name = hostname
            if pipelining.value:
                responses.insert(-1, "250-PIPELINING")
            return responses

        async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
            if delays[1]:
                await asyncio.sleep(delays[1])
            envelope.rcpt_tos.append(address)
            return "250 OK"

        async def handle_DATA(self, server, session, envelope):
            if delays[0]:
                await asyncio.sleep(delays[0])
            with accepted.get_lock():
                accepted.value += 1
            if envelope.original_content.startswith(b"DKIM-Signature:"):
                with signed.get_lock():
                    signed.value += 1
            return "250 2.0.0 OK"

    controller = Controller(Counting(), hostname="127.0.0.1", port=port)
    controller.start()
    ready.set()
    stop.wait()
    controller.stop()


class Sink:
    """An aiosmtpd server in its own process; ``accepted`` counts the messages it took,
    ``signed`` those of them that came with a DKIM signature."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.accepted, self.signed = SPAWN.Value("q", 0), SPAWN.Value("q", 0)
        self._delays = SPAWN.Array("d", 2)  # seconds before the reply to DATA, to each RCPT
        self._pipelining = SPAWN.Value("b", 1)  # advertised in the reply to EHLO
        self._ready, self._stop = SPAWN.Event(), SPAWN.Event()
        self._process = SPAWN.Process(target=_sink, daemon=True,
                                      args=(self.port, self.accepted, self.signed, self._delays,
                                            self._pipelining, self._ready, self._stop))

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

    def answer_after(self, data: float, *, rcpt: float = 0.0) -> None:
        """From now on, wait ``data`` seconds before answering DATA and ``rcpt`` before answering
        each RCPT (0: at once), on every connection independently."""
        self._delays[0], self._delays[1] = data, rcpt

    def advertise_pipelining(self, on: bool) -> None:
        """From the next connection on, say (or not) in the reply to EHLO that commands may be
        pipelined (RFC 2920). It does by default, as Postfix, Exim and the big MXs do; smtplib
        never pipelines, the engine does where it is advertised."""
        self._pipelining.value = int(on)

    def reset(self) -> None:
        for counter in (self.accepted, self.signed):
            with counter.get_lock():
                counter.value = 0

    def check(self, size: int, *, dkim: str | None) -> None:
        assert self.accepted.value == size, f"sink took {self.accepted.value} of {size}"
        assert self.signed.value == (size if dkim else 0), f"{self.signed.value} of {size} signed"


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


def raw_work(index: int, ready, port: int, template: bytes, size: int, workers: int,
             dkim: str | None = None) -> int:
    """Send this worker's share of pre-built messages over one connection, each signed on the
    clock when ``dkim`` names an algorithm; return how many."""
    recipients = [f"r{n}@bench.example" for n in range(1 + index, size + 1, workers)]
    messages = [(to, template.replace(SAMPLE_EMAIL.encode(), to.encode())) for to in recipients]
    sign = _signer(dkim).sign if dkim else None
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as client:
        client.ehlo()
        ready()
        for to, message in messages:
            client.sendmail(FROM, [to], sign(message) if sign else message)
    return len(messages)


def raw_run(*, audience, workers: int, sink: Sink, dkim: str | None = None) -> float:
    template = sample_message(audience)
    sink.reset()
    result = timed_pool(workers, raw_work, sink.port, template, audience.size, workers, dkim)
    sink.check(audience.size, dkim=dkim)
    return result.seconds


def raw_threads_work(index: int, ready, port: int, template: bytes, size: int,
                     connections: int) -> int:
    """Send ``size`` pre-built messages over ``connections`` connections at once, one thread and
    one smtplib client each, every thread taking the next message from one shared queue (so that
    none idles while another has a backlog); return how many were sent."""
    messages = deque((to, template.replace(SAMPLE_EMAIL.encode(), to.encode()))
                     for to in (f"r{n}@bench.example" for n in range(1, size + 1)))
    clients = [smtplib.SMTP("127.0.0.1", port, timeout=30) for _ in range(connections)]
    for client in clients:
        client.ehlo()
    errors: list[BaseException] = []

    def drain(client: smtplib.SMTP) -> None:
        try:
            while True:
                try:
                    to, message = messages.popleft()  # atomic: no lock needed
                except IndexError:
                    return
                client.sendmail(FROM, [to], message)
        except BaseException as exc:  # re-raised on the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=drain, args=(client,)) for client in clients]
    ready()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for client in clients:  # no QUIT round trip: the engine's clock stops before it says goodbye
        client.close()
    if errors:
        raise errors[0]
    return size


last_window: tuple[float, float] = (0.0, 0.0)  # raw_threads_run's clock, epoch seconds


def raw_threads_run(*, audience, connections: int, sink: Sink) -> float:
    """Seconds for one process to send the audience over ``connections`` smtplib connections."""
    template = sample_message(audience)
    sink.reset()
    result = timed_pool(1, raw_threads_work, sink.port, template, audience.size, connections)
    sink.check(audience.size, dkim=None)
    global last_window
    last_window = (result.started, result.started + result.seconds)
    return result.seconds


def engine_run(*, audience, workers: int, batch_size: int, sink: Sink, idempotent: bool, out,
               dkim: str | None = None, connections: int | None = 1, chunk: int | None = None,
               prepared: bool = True, name: str = "smtp") -> float:
    """``dkim``: an algorithm, to sign every message with the platform's key of it;
    ``connections``: each worker's (SENDER_CONNECTIONS; 1, as the raw loop it is set against;
    None: the engine's default); ``chunk``: SENDER_HANDOFF_CHUNK (None: the default);
    ``prepared``: DATABASE_PREPARED_STATEMENTS, whatever the caller's environment says."""
    from bench import engine  # not at the top: the spawned workers here must not import Django

    sink.reset()
    env = {"EMAIL_URL": sink.url, "SENDER_IDEMPOTENT_TRANSPORT": str(idempotent).lower(),
           "DKIM_DOMAIN": "",  # unsigned unless asked, whatever the caller's environment says
           "DATABASE_PREPARED_STATEMENTS": str(prepared).lower()}
    if dkim:
        env.update(DKIM_DOMAIN="bench.example", DKIM_SELECTOR="bench", DKIM_ALGORITHM=dkim,
                   DKIM_PRIVATE_KEY_FILE=str(DKIM_KEYS / DKIM[dkim]))
    if connections is not None:
        env["SENDER_CONNECTIONS"] = str(connections)
    if chunk is not None:
        env["SENDER_HANDOFF_CHUNK"] = str(chunk)
    seconds = engine.run(
        audience=audience, batch_size=batch_size, workers=workers, out=out,
        transport="growth.sending.transports.django_mail.DjangoMailTransport", env=env,
        name=f"{name}-{'idempotent' if idempotent else 'plain'}{f'-{dkim}' if dkim else ''}")
    sink.check(audience.size, dkim=dkim)
    return seconds


def _signer(algorithm: str):
    from growth.sending import dkim

    return dkim.Signer.load(domain="bench.example", selector="bench", algorithm=algorithm,
                            private_key=(DKIM_KEYS / DKIM[algorithm]).read_bytes(), source="bench")


def signing_cost(audience, *, seconds: float = 2.0) -> dict[str, float]:
    """Microseconds to DKIM-sign one message (the engine's rendering of one recipient), per
    algorithm, in this process; "bytes": the message's size."""
    message = sample_message(audience)
    costs = {"bytes": float(len(message))}
    for algorithm in DKIM:
        signer = _signer(algorithm)
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds or count < 20:
            signer.sign(message)
            count += 1
        costs[algorithm] = (time.perf_counter() - started) / count * 1e6
    return costs
