"""SMTP PIPELINING (RFC 2920): MAIL, every RCPT and DATA in one write, their replies read after.

A relay that advertises PIPELINING (Postfix, Exim, Sendmail, Gmail's and Microsoft's MXs do)
lets a client send a message's envelope in one round trip instead of 2 + one per recipient, as
every bulk mailer does. smtplib has no pipelining, so ``sendmail`` here does what
``smtplib.SMTP.sendmail`` does, raising the same exceptions for the same replies (the transport's
``classify_failure`` reads them), with the envelope pipelined when the server said it may be. A
server that did not advertise it gets smtplib's own ``sendmail``, one command at a time.

RFC 2920 rules this follows: DATA is the last command of the group and the content waits for
its 354; every reply of the group is read before anything else is said, even after a refusal;
a server that answers 354 although it accepted no recipient gets an empty message it must refuse
(a lone "."), never the content.

On both paths the content and its final reply are sent and read here, not by smtplib, so that a
connection lost after the content's final dot is told apart from one lost before: the server may
have accepted that message (RFC 1047), which a plain receiver must not be sent again
(``MessageInDoubt``).
"""

from __future__ import annotations

import smtplib
from collections.abc import Sequence

from growth.sending.transports.errors import MessageInDoubt, describe

_ACCEPTED_RCPT = (250, 251)


def sendmail(client: smtplib.SMTP, sender: str, recipients: Sequence[str],
             data: bytes) -> dict[str, tuple[int, bytes]]:
    """Send ``data`` (bytes with CRLF line ends) from ``sender`` to ``recipients`` on the open
    ``client``; return the refused recipients as ``smtplib.SMTP.sendmail`` does."""
    client.ehlo_or_helo_if_needed()
    # RFC 6152: 8-bit content is announced, or a relay may take it for 7-bit; one that passes it
    # to a server without 8BITMIME then converts it, which breaks its DKIM signature
    options = (([f"SIZE={len(data)}"] if client.has_extn("size") else [])
               + (["BODY=8BITMIME"] if not data.isascii() and client.has_extn("8bitmime") else []))
    if not client.has_extn("pipelining"):
        return _one_command_at_a_time(client, sender, recipients, data, options)
    group = [f"MAIL FROM:{smtplib.quoteaddr(sender)}{''.join(f' {o}' for o in options)}",
             *(f"RCPT TO:{smtplib.quoteaddr(recipient)}" for recipient in recipients),
             "DATA"]
    client.send("".join(f"{command}\r\n" for command in group))

    mail = client.getreply()
    refused = {}
    for recipient in recipients:
        code, text = client.getreply()
        if code not in _ACCEPTED_RCPT:
            refused[recipient] = (code, text)
    code, text = client.getreply()  # DATA's
    if mail[0] != 250:
        _after_refusal(client, data_accepted=code == 354, closing=mail[0] == 421)
        raise smtplib.SMTPSenderRefused(mail[0], mail[1], sender)
    if len(refused) == len(recipients):
        _after_refusal(client, data_accepted=code == 354,
                       closing=any(c == 421 for c, _ in refused.values()))
        raise smtplib.SMTPRecipientsRefused(refused)
    if code != 354:
        _after_refusal(client, data_accepted=False, closing=code == 421)
        raise smtplib.SMTPDataError(code, text)
    _content_and_reply(client, data)
    return refused


def _one_command_at_a_time(client: smtplib.SMTP, sender: str, recipients: Sequence[str],
                           data: bytes, options: list[str]) -> dict[str, tuple[int, bytes]]:
    """What ``smtplib.SMTP.sendmail`` does (its replies, its exceptions, its resets), but for
    the content, which ``_content_and_reply`` sends."""
    code, text = client.mail(sender, options)
    if code != 250:
        _after_refusal(client, data_accepted=False, closing=code == 421)
        raise smtplib.SMTPSenderRefused(code, text, sender)
    refused = {}
    for recipient in recipients:
        code, text = client.rcpt(recipient)
        if code not in _ACCEPTED_RCPT:
            refused[recipient] = (code, text)
        if code == 421:
            _after_refusal(client, data_accepted=False, closing=True)
            raise smtplib.SMTPRecipientsRefused(refused)
    if len(refused) == len(recipients):
        _after_refusal(client, data_accepted=False, closing=False)
        raise smtplib.SMTPRecipientsRefused(refused)
    client.putcmd("data")
    code, text = client.getreply()
    if code != 354:
        _after_refusal(client, data_accepted=False, closing=code == 421)
        raise smtplib.SMTPDataError(code, text)
    _content_and_reply(client, data)
    return refused


def _content_and_reply(client: smtplib.SMTP, data: bytes) -> None:
    """After the 354: the content, then its reply. Lost before the final dot has gone, the
    message cannot have been accepted (a transient failure, smtplib's exception); lost after,
    it may have been (MessageInDoubt)."""
    client.send(_content(data))
    try:
        code, text = client.getreply()
    except (smtplib.SMTPServerDisconnected, OSError) as exc:
        client.close()
        raise MessageInDoubt(f"no reply after the message's end ({describe(exc)}): it may have "
                             "been accepted") from exc
    if code != 250:
        _after_refusal(client, data_accepted=False, closing=code == 421)
        raise smtplib.SMTPDataError(code, text)


def _content(data: bytes) -> bytes:
    """What follows a 354: the message dot-stuffed and ended by a lone dot (as smtplib.data)."""
    quoted = smtplib._quote_periods(data)
    if not quoted.endswith(b"\r\n"):
        quoted += b"\r\n"
    return quoted + b".\r\n"


def _after_refusal(client: smtplib.SMTP, *, data_accepted: bool, closing: bool) -> None:
    """Leave the connection ready for the next message, as smtplib does after a refusal: closed
    after a 421, reset otherwise. A server that took DATA although the envelope was refused
    waits for content: it gets none (a lone dot), which it must refuse."""
    if closing:
        client.close()
        return
    if data_accepted:
        client.send(b".\r\n")
        client.getreply()
    client._rset()
