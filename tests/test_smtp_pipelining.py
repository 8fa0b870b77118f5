"""SMTP PIPELINING (RFC 2920) on the plain SMTP path: the envelope in one write where the relay
allows it, with smtplib's exceptions (and so the engine's outcomes) for every refusal.

A scripted relay on a real socket checks the protocol itself: when it advertises PIPELINING it
answers nothing before it has the whole group (MAIL, every RCPT, DATA), so a client that waited
for a reply between commands would hang there and fail. Then the transport against aiosmtpd,
with the relay advertising PIPELINING and without: the same outcomes either way."""

from __future__ import annotations

import smtplib
import socket
import threading
import time
from collections import deque

import pytest

from growth.sending.mime import OutgoingEmail
from growth.sending.transports import Delivery, Outcome
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.transports.errors import MessageInDoubt, classify_failure, describe
from growth.sending.transports.pipelining import sendmail
from tests.test_transports import refuse

MESSAGE = b"Subject: hi\r\n\r\nline one\r\n.a line that starts with a dot\r\nend\r\n"
TIMEOUT = 5.0
CLIENT_GAVE_UP = 0.5  # seconds a client waits for the reply to a message's end (STALL)


class ScriptedRelay:
    """One connection's SMTP server on loopback, in a thread: replies scripted per command verb
    (``MAIL``, ``RCPT``, ``DATA``, ``CONTENT``: the reply after the message), each a queue
    used up in order and then 250 (354 for DATA); HANGUP closes the connection instead of
    answering, STALL answers nothing for longer than the client waits. With ``pipelining`` it
    advertises it and holds its replies until the group ends (DATA, RSET, QUIT or NOOP)."""

    def __init__(self, *, pipelining: bool, replies: dict[str, list[str]] | None = None,
                 eightbitmime: bool = False) -> None:
        self.pipelining = pipelining
        self.eightbitmime = eightbitmime
        self.replies = {verb: deque(lines) for verb, lines in (replies or {}).items()}
        self.commands: list[str] = []  # every command received, in order (verb alone if no
                                       # address)
        self.reads: list[bytes] = []  # what each read from the socket brought (the envelope's)
        self.contents: list[bytes] = []  # each message's content, as received (dot-stuffed)
        self.error: BaseException | None = None
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def client(self) -> smtplib.SMTP:
        client = smtplib.SMTP("127.0.0.1", self.port, timeout=TIMEOUT)
        client.ehlo()
        return client

    def join(self) -> None:
        self._thread.join(TIMEOUT)
        if self.error is not None:
            raise self.error

    def _reply(self, verb: str) -> str:
        queued = self.replies.get(verb)
        if queued:
            return queued.popleft()
        return "354 go ahead" if verb == "DATA" else "250 OK"

    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
            with conn:
                conn.settimeout(TIMEOUT)
                self._talk(conn)
        except BaseException as exc:  # the test's thread re-raises it
            self.error = exc
        finally:
            self._listener.close()

    def _talk(self, conn: socket.socket) -> None:
        buffer = b""
        conn.sendall(b"220 scripted ready\r\n")
        pending: list[str] = []
        while True:
            while b"\r\n" not in buffer:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                self.reads.append(chunk)
                buffer += chunk
            line, buffer = buffer.split(b"\r\n", 1)
            command = line.decode()
            verb = command.split(":")[0].split(" ")[0].upper()
            self.commands.append(command if verb in ("MAIL", "RCPT") else verb)
            if verb == "EHLO":
                features = ["250-scripted", "250-SIZE 1000000"]
                if self.pipelining:
                    features.append("250-PIPELINING")
                if self.eightbitmime:
                    features.append("250-8BITMIME")
                conn.sendall(("\r\n".join([*features, "250 HELP"]) + "\r\n").encode())
                continue
            pending.append(self._reply(verb) if verb in ("MAIL", "RCPT", "DATA") else "250 OK")
            if self.pipelining and verb in ("MAIL", "RCPT"):
                continue  # the group goes on: nothing is answered before its end
            if "HANGUP" in pending:
                return
            conn.sendall("".join(f"{reply}\r\n" for reply in pending).encode())
            data_reply, pending = pending[-1], []
            if verb == "QUIT":
                return
            if verb == "DATA" and data_reply.startswith("354"):
                while b"\r\n.\r\n" not in b"\r\n" + buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                content, buffer = (b"\r\n" + buffer).split(b"\r\n.\r\n", 1)
                self.contents.append(content[2:])
                reply = self._reply("CONTENT")
                if reply == "STALL":
                    time.sleep(CLIENT_GAVE_UP + 0.5)
                if reply in ("HANGUP", "STALL"):
                    return
                conn.sendall(f"{reply}\r\n".encode())


def send_and_quit(relay: ScriptedRelay, *recipients: str, data: bytes = MESSAGE):
    client = relay.client()
    try:
        return sendmail(client, "news@tenant.example", list(recipients), data)
    finally:
        if client.sock is not None:
            client.quit()
        relay.join()


def test_the_envelope_goes_in_one_group_and_the_content_after_its_354():
    relay = ScriptedRelay(pipelining=True)
    assert send_and_quit(relay, "a@example.com", "b@example.com") == {}
    assert relay.commands[1:] == [f"MAIL FROM:<news@tenant.example> SIZE={len(MESSAGE)}",
                                  "RCPT TO:<a@example.com>", "RCPT TO:<b@example.com>", "DATA",
                                  "QUIT"]
    # dot-stuffed on the wire, as smtplib does it
    assert relay.contents == [MESSAGE.replace(b"\r\n.a", b"\r\n..a").rstrip(b"\r\n")]


EIGHT_BIT = "Subject: hi\r\n\r\nGrüße aus Zürich\r\n".encode()


@pytest.mark.parametrize("pipelining", [True, False])
@pytest.mark.parametrize(("data", "advertised", "options"), [
    (EIGHT_BIT, True, f" SIZE={len(EIGHT_BIT)} BODY=8BITMIME"),
    (MESSAGE, True, f" SIZE={len(MESSAGE)}"),
    (EIGHT_BIT, False, f" SIZE={len(EIGHT_BIT)}"),
])
def test_eight_bit_content_is_announced_to_a_relay_that_takes_it(pipelining, data, advertised, options):
    """RFC 6152: without BODY=8BITMIME, a relay may pass the body to a server without 8BITMIME
    by converting it, which breaks its DKIM signature (RFC 6376 5.3)."""
    relay = ScriptedRelay(pipelining=pipelining, eightbitmime=advertised)
    assert send_and_quit(relay, "a@example.com", data=data) == {}
    [mail] = [command for command in relay.commands if command.upper().startswith("MAIL")]
    assert mail.lower() == f"MAIL FROM:<news@tenant.example>{options}".lower()  # smtplib's: "mail"
    assert relay.contents == [data.replace(b"\r\n.", b"\r\n..").rstrip(b"\r\n")]


def test_a_relay_that_does_not_advertise_it_gets_one_command_at_a_time():
    relay = ScriptedRelay(pipelining=False)
    assert send_and_quit(relay, "a@example.com") == {}
    envelope = [read for read in relay.reads if b"MAIL FROM" in read.upper()
                or b"RCPT TO" in read.upper()]
    assert [read.count(b"\r\n") for read in envelope] == [1, 1]  # MAIL, then RCPT, alone
    assert len(relay.contents) == 1


def test_a_refused_sender_raises_as_smtplib_does_and_the_connection_is_reset_for_the_next():
    relay = ScriptedRelay(pipelining=True, replies={
        "MAIL": ["553 5.7.1 Sender not allowed here"],
        "RCPT": ["503 5.5.1 sender first"], "DATA": ["503 5.5.1 no valid recipients"]})
    client = relay.client()
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        sendmail(client, "news@tenant.example", ["a@example.com"], MESSAGE)
    assert (refused.value.smtp_code, refused.value.smtp_error) == (553, b"5.7.1 Sender not allowed here")
    assert sendmail(client, "news@tenant.example", ["b@example.com"], MESSAGE) == {}
    client.quit()
    relay.join()
    assert [c.split(":")[0].upper() for c in relay.commands[1:]] == [
        "MAIL FROM", "RCPT TO", "DATA", "RSET", "MAIL FROM", "RCPT TO", "DATA", "QUIT"]
    assert len(relay.contents) == 1  # only the second message's


def test_a_refused_recipient_among_others_is_returned_and_the_rest_delivered():
    relay = ScriptedRelay(pipelining=True, replies={
        "RCPT": ["250 OK", "550 5.1.1 <b@example.com>: No such user"]})
    refused = send_and_quit(relay, "a@example.com", "b@example.com")
    assert refused == {"b@example.com": (550, b"5.1.1 <b@example.com>: No such user")}
    assert len(relay.contents) == 1


def test_every_recipient_refused_raises_and_no_content_goes_out():
    relay = ScriptedRelay(pipelining=True, replies={
        "RCPT": ["550 5.1.1 No such user"], "DATA": ["554 5.5.1 no valid recipients"]})
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        send_and_quit(relay, "a@example.com")
    assert refused.value.recipients == {"a@example.com": (550, b"5.1.1 No such user")}
    assert relay.commands[-2:] == ["RSET", "QUIT"]
    assert relay.contents == []


def test_a_relay_that_takes_data_with_no_recipient_gets_an_empty_message_not_ours():
    relay = ScriptedRelay(pipelining=True, replies={
        "RCPT": ["550 5.1.1 No such user"], "CONTENT": ["554 5.5.1 no valid recipients"]})
    with pytest.raises(smtplib.SMTPRecipientsRefused):
        send_and_quit(relay, "a@example.com")
    assert relay.contents == [b""]
    assert relay.commands[-2:] == ["RSET", "QUIT"]


@pytest.mark.parametrize(("replies", "error"), [
    ({"DATA": ["451 4.3.0 try again later"]}, (451, b"4.3.0 try again later")),
    ({"CONTENT": ["550 5.7.1 message refused"]}, (550, b"5.7.1 message refused")),
])
def test_a_refused_data_raises_a_data_error_as_smtplib_does(replies, error):
    relay = ScriptedRelay(pipelining=True, replies=replies)
    with pytest.raises(smtplib.SMTPDataError) as refused:
        send_and_quit(relay, "a@example.com")
    assert (refused.value.smtp_code, refused.value.smtp_error) == error
    assert relay.commands[-2:] == ["RSET", "QUIT"]


def test_a_421_closes_the_connection_as_smtplib_does():
    relay = ScriptedRelay(pipelining=True, replies={
        "MAIL": ["421 4.7.0 Try again later, closing connection"]})
    client = relay.client()
    with pytest.raises(smtplib.SMTPSenderRefused):
        sendmail(client, "news@tenant.example", ["a@example.com"], MESSAGE)
    assert client.sock is None
    relay.join()
    assert "RSET" not in relay.commands


# -- the transport, as the engine uses it (a prebuilt message), against aiosmtpd ----------------

def outgoing(*recipients: str) -> list[Delivery]:
    deliveries = []
    for n, rcpt in enumerate(recipients, start=1):
        message = OutgoingEmail(subject="Hi", body="Body", from_email="news@tenant.example",
                                to=[rcpt])
        message.extra_headers["Message-ID"] = f"<campaign.1.{n}@test>"
        message.prebuilt = (f"Message-ID: <campaign.1.{n}@test>\r\nIdempotency-Key: "
                            f"campaign:1:{n}\r\nSubject: Hi\r\n\r\n.Body\r\n").encode()
        deliveries.append(Delivery(n, f"campaign:1:{n}", message))
    return deliveries


@pytest.fixture(params=[True, False], ids=["pipelining", "one-at-a-time"])
def relay(request, smtp_settings):
    smtp_settings.handler.pipelining = request.param
    return smtp_settings


def test_the_transport_delivers_prebuilt_messages_whole(relay):
    with DjangoMailTransport() as transport:
        outcomes = transport.send_bulk(outgoing("a@example.com", "b@example.com"))
    assert [(o.kind, o.provider_message_id) for o in outcomes] == [
        ("sent", "<campaign.1.1@test>"), ("sent", "<campaign.1.2@test>")]
    assert relay.handler.keys() == {"campaign:1:1": 1, "campaign:1:2": 1}
    assert [a.message.get_payload() for a in relay.handler.accepted] == [".Body\r\n", ".Body\r\n"]


def test_the_transports_outcomes_are_the_same_either_way(relay):
    pipelining = relay.handler.pipelining
    refuse(relay, rcpt={"nobody@example.com": "550 5.1.1 <nobody@example.com>: No such user"})
    relay.handler.pipelining = pipelining
    relay.handler.replies = {"later@example.com": ["451 4.3.0 try again later"]}
    with DjangoMailTransport() as transport:
        outcomes = transport.send_bulk(outgoing(
            "nobody@example.com", "later@example.com", "fine@example.com"))
    assert [(o.kind, o.error) for o in outcomes] == [
        ("permanent", "550 5.1.1 <nobody@example.com>: No such user"),
        ("transient", "451 4.3.0 try again later"),
        ("sent", "")]
    assert relay.handler.keys() == {"campaign:1:3": 1}


def test_a_refused_sender_refuses_us_either_way(relay):
    pipelining = relay.handler.pipelining
    refuse(relay, mail="553 5.7.1 Sender not allowed here")
    relay.handler.pipelining = pipelining
    with DjangoMailTransport() as transport:
        outcomes = transport.send_bulk(outgoing("a@example.com", "b@example.com"))
    assert [(o.kind, o.error) for o in outcomes] == [
        ("refused", "553 5.7.1 Sender not allowed here")] * 2
    assert relay.handler.mail_commands == 1  # the second is not tried


@pytest.mark.parametrize("pipelining", [True, False])
@pytest.mark.parametrize("lost", ["HANGUP", "STALL"])
def test_no_reply_after_the_messages_end_leaves_it_in_doubt(pipelining, lost):
    """The relay had the whole message, final dot included, and its answer never came (the
    connection closed, or the reply timed out): it may have accepted it (RFC 1047). Not a
    transient failure, whose retry a plain receiver would take as a second message."""
    relay = ScriptedRelay(pipelining=pipelining, replies={"CONTENT": [lost]})
    client = relay.client()
    client.sock.settimeout(CLIENT_GAVE_UP)
    with pytest.raises(MessageInDoubt) as doubt:
        sendmail(client, "news@tenant.example", ["a@example.com"], MESSAGE)
    relay.join()
    assert len(relay.contents) == 1
    assert client.sock is None  # closed: the next message needs a new connection
    assert classify_failure(doubt.value).kind == Outcome.IN_DOUBT
    assert "no reply after the message's end" in describe(doubt.value)


@pytest.mark.parametrize("pipelining", [True, False])
def test_a_connection_lost_before_the_content_is_a_transient_failure(pipelining):
    relay = ScriptedRelay(pipelining=pipelining, replies={"DATA": ["HANGUP"]})
    client = relay.client()
    with pytest.raises(smtplib.SMTPServerDisconnected) as lost:
        sendmail(client, "news@tenant.example", ["a@example.com"], MESSAGE)
    relay.join()
    assert relay.contents == []
    assert classify_failure(lost.value).kind == Outcome.TRANSIENT
