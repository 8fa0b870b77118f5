"""May this account send as this address? The one rule, and the proof in DNS it rests on.

A tenant sends only from domains it has shown to be its own, as an ESP requires before it sends
in a domain's name (Mailchimp, SendGrid and Postmark verify the From domain first): our worker
would otherwise put any tenant's mail out as ``ceo@<another tenant's domain>`` or
``service@paypal.com``, under the platform's DKIM signature.

**The rule** (``sender_refusal``). An address may be an account's sender when its domain, or a
parent domain of it, is one of:

- the account's own sending domains, *verified* (below);
- the platform's: a sending domain without an account, or ``DKIM_DOMAIN``, which every tenant
  may send from (``BOUNCE_DOMAIN`` is not one: replies to such a From would land in the bounce
  mailbox).

The most specific name decides: from the address's domain up through its parents, the first that
is the account's verified domain or the platform's allows it; the first that another account has
verified (and this one has not) refuses it, as belonging to that account. Anything else (an
outside domain, the account's own domain not verified yet) is refused.

**Verified** (``verify``): the DNS publishes the domain's key, ``<selector>._domainkey.<domain>``
carrying the public half of the private key we hold (``dns_checks.check_dkim``). Only whoever
controls the domain's DNS can publish it, and registering a domain under Sending domains proves
nothing by itself. A failing answer (no record, another key) clears an earlier verification: the
record is gone, the domain may have changed hands. An unanswered lookup changes nothing. A change
of the row's account, domain, selector, algorithm or key clears it (a trigger, whoever writes).

**Who is held to it.** A tenant's member, where it sets the From: the account's form (a campaign
takes its account's sender when it starts and when it resumes; nothing else sets one). Told why,
which domains it may use and how to verify one; the refusal never says whether another tenant
has the domain. A platform operator (superuser) is trusted with the rest, as an ESP's support
staff are: it may save a sender the rule refuses (a tenant's domain checked by other means, a
migration), and is warned on saving. It is refused only another account's verified domain
(``Refusal.impersonates``): the way to share one between accounts is to verify it in each (their
own selector and key), which an operator can do. A sender saved before the rule existed is not
checked again until it is changed: editing an account's other fields never requires fixing it
first.

**What goes out** is held to that hard case only (``check_outgoing_sender``), whoever saved the
sender and whenever: the operator's decisions that put a campaign on the wire (approve, send now,
resume: ``growth.operations.campaigns``) refuse a campaign whose account's sender is on another
account's verified domain, saying so (not which account); and the worker pauses a campaign that
took such a sender, with the reason, before any of its mail goes out (where it builds the
campaign's renderer, after each start and each resume that changed the sender, and again at
least every ``worker.RENDERER_FRESH_FOR`` seconds: a domain another account verifies while the
campaign sends stops it within that time, whichever worker sends it). A sender the
rule refuses otherwise still goes out: those decisions' confirmation pages, ``check_sender`` and
the account page's panel warn of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from growth.deliverability.dns_checks import ERROR, OK, DkimKey, Resolver, check_dkim, normalized
from growth.models import SendingDomain
from growth.sending.sender import sender_address

MAX_SHOWN = 200  # characters of a published record quoted back: it is anyone's text


class ImpersonatingSender(Exception):
    """Mail as this sender would go out in another account's name: no one may send it."""


@dataclass(frozen=True)
class Refusal:
    """Why an account may not send as an address, said to the account's member; ``owner_id``:
    the other account that verified the domain, when that is the reason."""

    reason: str
    domain: str
    owner_id: int | None = None

    @property
    def impersonates(self) -> bool:
        """The hard case: another account's verified domain, refused to operators too and
        never sent from; any other refusal an operator may override."""
        return self.owner_id is not None


@dataclass(frozen=True)
class Verification:
    """A domain's check in DNS: ``verified`` None when the DNS did not answer (nothing was
    recorded), and what to tell the operator."""

    verified: bool | None
    message: str


def candidate_names(domain: str) -> list[str]:
    """The domain and its parents, most specific first, without the top-level label."""
    labels = normalized(domain).split(".")
    return [".".join(labels[i:]) for i in range(len(labels) - 1)] or [normalized(domain)]


def sender_refusal(*, account_id: int | None, address: str) -> Refusal | None:
    """Why the account (None: one not saved yet) may not send as ``address`` (see the module's
    docstring), or None when it may. An address that cannot be a sender at all is refused with
    the reason."""
    try:
        domain = sender_address(address).rpartition("@")[2].lower()
    except ValidationError as exc:
        return Refusal(" ".join(exc.messages), "")
    names = candidate_names(domain)
    claims = SendingDomain.objects.claims(account_id=account_id, names=names)
    platform = settings.DKIM_DOMAIN
    for name in names:
        here = [claim for claim in claims if claim.domain == name]
        if any(claim.account_id == account_id and claim.verified for claim in here):
            return None
        if name == platform or any(claim.account_id is None for claim in here):
            return None
        owners = sorted(claim.account_id for claim in here if claim.verified)
        if owners:
            return Refusal(_not_usable(account_id=account_id, domain=domain), domain, owners[0])
    return Refusal(_not_usable(account_id=account_id, domain=domain), domain)


def check_outgoing_sender(*, account_id: int, address: str) -> Refusal | None:
    """Raise ImpersonatingSender when the account's mail may not go out as ``address`` at all:
    it is on a domain another account verified and this one did not (``Refusal.impersonates``).
    Else return the rule's refusal, for a warning (it goes out all the same), or None."""
    refusal = sender_refusal(account_id=account_id, address=address)
    if refusal is not None and refusal.impersonates:
        raise ImpersonatingSender(
            f"its sender {address} is on {refusal.domain}, a sending domain another account has "
            "verified: its mail would go out in that account's name. Change the account's "
            "sender, or add the domain to its sending domains (with a selector and key of its "
            "own) and verify it in DNS.")
    return refusal


def _not_usable(*, account_id: int | None, domain: str) -> str:
    usable = SendingDomain.objects.usable(account_id=account_id)
    shown = [f"{name} (the platform's)" if platform else name for name, platform in usable]
    if settings.DKIM_DOMAIN and settings.DKIM_DOMAIN not in {name for name, _ in usable}:
        shown.append(f"{settings.DKIM_DOMAIN} (the platform's)")
    unverified = SendingDomain.objects.unverified(account_id=account_id)
    parts = [f"{domain} is not one of this account's verified sending domains."]
    parts.append(f"It may send from an address at {', '.join(shown)}, or a subdomain of one."
                 if shown else "It has no verified sending domain yet.")
    if unverified:
        parts.append(f"Not verified yet: {', '.join(unverified)}.")
    parts.append("To send from a domain of yours: add it under Sending domains, publish the TXT "
                 "record its page shows, then “Verify in DNS”.")
    return " ".join(parts)


def verify(*, domain: SendingDomain, resolver: Resolver) -> Verification:
    """Look the domain's key up in DNS and record the answer (see the module's docstring)."""
    check = check_dkim(resolver, DkimKey(domain.domain, domain.selector, domain.algorithm,
                                         domain.private_key))
    where = f"Sending domain {domain.domain} (TXT {check.subject})"
    if check.status == ERROR:
        state = (f"still verified since {_when(domain.verified_at)}" if domain.verified_at
                 else "still not verified")
        return Verification(None, f"{where}: not checked, the DNS did not answer: "
                                  f"{check.summary}. {state.capitalize()}; try again later.")
    verified = check.status == OK
    recorded = SendingDomain.objects.record_check(domain, verified=verified)
    if recorded.stale:
        return Verification(None, f"{where}: changed while the DNS was read; nothing recorded. "
                                  "Verify it again.")
    if verified:
        return Verification(True, f"{where}: verified. The DNS publishes the key we sign with "
                                  f"({check.summary}).")
    published = "; ".join(_shown(record) for record in check.found) or "nothing"
    expected = check.publish or "the public key of the stored private key"
    return Verification(False, f"{where}: not verified, {check.summary}. The DNS publishes: "
                               f"{published}. Expected: {expected}.")


def _shown(record: str) -> str:
    record = "".join(ch if ch.isprintable() else "?" for ch in record)
    return f"“{record}”" if len(record) <= MAX_SHOWN else f"“{record[:MAX_SHOWN]}…”"


def _when(moment) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M")
