"""Layer 1 of the design: the deterministic id of one recipient of one campaign, and the
Message-ID made from it. The only code that writes or reads either format.

    job id      campaign:<campaign id>:<subscriber id>    growth_sends.job_id, the Idempotency-Key
    Message-ID  <campaign.<campaign id>.<subscriber id>@<MESSAGE_ID_DOMAIN>>

Never a uuid or a timestamp: every retry of a recipient carries the same key and Message-ID, so
a receiver that de-duplicates on either absorbs the resend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.db import models
from django.db.models import Value
from django.db.models.functions import Cast, Concat

_DIGITS = r"(\d{1,18})"  # a bigint, without overflowing one
_JOB_ID = re.compile(rf"campaign:{_DIGITS}:{_DIGITS}")
_MESSAGE_ID = re.compile(rf"<?campaign\.{_DIGITS}\.{_DIGITS}@([^>\s]+)>?")


@dataclass(frozen=True, slots=True)
class JobKey:
    """What a job id names; as keyword arguments it finds the row through the unique
    (subscriber, campaign) index."""

    campaign_id: int
    subscriber_id: int

    @property
    def job_id(self) -> str:
        return job_id(self.campaign_id, self.subscriber_id)


def job_id(campaign_id: int, subscriber_id: int) -> str:
    return f"campaign:{campaign_id}:{subscriber_id}"


def parse_job_id(text: str) -> JobKey | None:
    """Return what ``text`` names, or None when it is not one of our job ids."""
    match = _JOB_ID.fullmatch(text.strip())
    return JobKey(int(match[1]), int(match[2])) if match else None


def message_id(job_id: str, domain: str | None = None) -> str:
    """Return the RFC 5322 Message-ID of a job id: ``campaign:4:7`` -> ``<campaign.4.7@domain>``."""
    return f"<{job_id.replace(':', '.')}@{domain or settings.MESSAGE_ID_DOMAIN}>"


def parse_message_id(text: str, *, domain: str | None = None) -> JobKey | None:
    """Return the job a Message-ID of ours names (angle brackets optional), or None; with
    ``domain``, only one made there (another install's have the same shape)."""
    match = _MESSAGE_ID.fullmatch(text.strip())
    if match is None or (domain is not None and match[3].lower() != domain.lower()):
        return None
    return JobKey(int(match[1]), int(match[2]))


def database_expression() -> Concat:
    """``job_id`` as growth_sends computes it (a stored generated column)."""
    return Concat(Value("campaign:"), Cast("campaign_id", models.TextField()), Value(":"),
                  Cast("subscriber_id", models.TextField()), output_field=models.TextField())
