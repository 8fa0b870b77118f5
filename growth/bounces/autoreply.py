"""Auto-replies (out of office, vacation, autoresponders): sent to a message's envelope sender
(RFC 3834 §4), so they reach the bounce mailbox too. They say nothing about the address, and are
ignored.

Checked only after a message turned out to be no delivery report and no feedback report: a DSN
carries ``Auto-Submitted: auto-replied`` too (Postfix, Exim and Gmail write it).
"""

from __future__ import annotations

import re
from email.message import Message

from growth.bounces import mime

# RFC 3834 §5: any value but "no" (auto-generated, auto-replied, auto-notified, with comments)
_AUTO_SUBMITTED = re.compile(r"^\s*(?!no\b)[a-z-]+", re.IGNORECASE)
# Headers that autoresponders and mail clients write on their replies (the value is usually
# "yes"; some write the responder's name)
_FLAG_HEADERS = ("X-Autoreply", "X-Autorespond", "X-Autoresponder", "X-Auto-Reply",
                 "X-Vacation")
_PRECEDENCE = {"auto_reply", "bulk", "junk", "list"}
# Subject lines of auto-replies, at the start of the subject, in the languages most of them use
_SUBJECT = re.compile(
    r"^\s*(?:auto(?:matic|matische|matique)?[\s_-]*(?:reply|response|answer|antwort|réponse|"
    r"respuesta|risposta|antwoord|svar)\b|auto:|autoreply|autoresponse|out of (?:the )?office|"
    r"away from (?:the )?office|on vacation|vacation\b|abwesenheit|absence\b|"
    r"réponse automatique|respuesta automática|risposta automatica|automatisch antwoord|"
    r"resposta automática|automatisk svar|autosvar|fuera de la oficina|"
    r"自動返信|自动回复|자동 응답)", re.IGNORECASE)


def auto_reply(message: Message) -> str | None:
    """Why the message is an auto-reply (for the log), or None if nothing says it is."""
    submitted = mime.field(message, "Auto-Submitted")
    if submitted and _AUTO_SUBMITTED.match(submitted):
        return f"Auto-Submitted: {submitted}"
    for name in _FLAG_HEADERS:
        value = mime.field(message, name)
        if name in message and value.lower() not in ("no", "false", "0"):
            return f"{name}: {value}"
    precedence = mime.field(message, "Precedence").lower()
    if precedence in _PRECEDENCE:
        return f"Precedence: {precedence}"
    subject = mime.field(message, "Subject")
    if _SUBJECT.match(subject):
        return f"subject {subject[:80]!r}"
    return None
