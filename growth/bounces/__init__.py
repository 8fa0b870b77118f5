"""Bounces that come back by mail (VERP): delivery status notifications, feedback-loop complaint
reports and auto-replies sent to a message's envelope sender, read from an IMAP mailbox or taken
over LMTP/SMTP on a loopback port (``manage.py run_bounces``).

Each message's envelope sender names its send, signed (``growth.sending.verp``); a bounce is
matched to its send through the address it arrives at, never through what the bounce says about
the message. What it reports is then recorded through the same path as an ESP's webhook events
(``growth.feedback.events.handle_event``, ESP name ``mailbox``): a hard bounce or a complaint
suppresses the address for that send's tenant, soft bounces are counted.

- ``dsn``: RFC 3464 delivery status notifications, and the plain-text notices of MTAs that send
  none (Yahoo's)
- ``arf``: RFC 5965 feedback reports (complaints from feedback loops)
- ``autoreply``: RFC 3834 auto-replies and vacation notices, which are ignored
- ``record``: one received message -> the recording calls, and what happened
- ``mailbox``: IMAP (imap-tools); ``lmtp``: the loopback LMTP/SMTP server (aiosmtpd)
"""
