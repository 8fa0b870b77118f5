"""Is a tenant ready to send? Every check of its sender, in the order a reader fixes them.

For the account's From address (``Account.from_email``):

0. **Sender domain**: the From domain is one the account proved its own in DNS, or the
   platform's (``growth.deliverability.sender_domains``); a WARN otherwise.
1. **SPF** of the From domain, and of the envelope sender's domain when bounces go elsewhere
   (``BOUNCE_DOMAIN``, VERP): the domain SPF actually authenticates.
2. **DKIM**: each key that may sign this tenant's mail — the account's own sending domains, the
   platform's (sending domains without an account, and ``DKIM_DOMAIN`` with
   ``DKIM_PRIVATE_KEY_FILE``) — published and equal to our key. The key that signs this sender's
   mail is the one ``growth.sending.dkim.signer_for`` picks (an account's key only once verified
   in DNS); a failure of a key that signs other senders only, or of an account's key not
   verified yet, is a WARN here. No key at all signs this sender: MISSING.
3. **DMARC** of the From domain, aligned with that key's d= or with the envelope's domain.
4. **One-click unsubscribe** (RFC 8058) at SITE_URL: https, and a POST to ``/u/<token>/``
   answered by our page. The probe's token is not a real one: nothing is unsubscribed, the
   page answers 400 ("invalid link"), which proves the POST reached it (not a proxy's 403/405,
   not a 404 of another site, not a redirect).

Ready: no check is MISSING, MISALIGNED or ERROR (a WARN is worth reading, not a blocker).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from growth.deliverability import dns_checks
from growth.deliverability.dns_checks import (
    ERROR,
    MISALIGNED,
    MISSING,
    OK,
    WARN,
    Check,
    DkimKey,
    DnsResolver,
    Resolver,
)
from growth.deliverability.sender_domains import sender_refusal
from growth.models import Account, SendingDomain
from growth.sending.dkim import signer_for, transport_signs
from growth.sending.sender import sender_address

PROBE_TOKEN = "readiness-check"  # not a signed token: the page answers 400 and changes nothing
PROBE_TIMEOUT = 5.0  # seconds


class ProbeFailed(Exception):
    """The site could not be reached (connection refused, TLS error, timeout)."""


# (url, timeout) -> (status code, Location header)
Probe = Callable[[str, float], tuple[int, str]]


def post_probe(url: str, timeout: float) -> tuple[int, str]:
    """POST an RFC 8058 one-click body to ``url``, as a mailbox provider does."""
    import requests

    try:
        response = requests.post(url, data={"List-Unsubscribe": "One-Click"}, timeout=timeout,
                                 allow_redirects=False,
                                 headers={"User-Agent": "zylior-check-sender"})
    except requests.RequestException as exc:
        raise ProbeFailed(str(exc)) from None
    return response.status_code, response.headers.get("Location", "")


def default_resolver(timeout: float = 3.0, budget: float = 20.0) -> Resolver:
    return DnsResolver(timeout=timeout, budget=budget, nameservers=settings.DELIVERABILITY_DNS)


@dataclass
class Readiness:
    account_id: int
    account_slug: str
    from_email: str
    from_domain: str
    checks: list[Check] = field(default_factory=list)
    checked_at: datetime = field(default_factory=timezone.now)

    @property
    def problems(self) -> list[Check]:
        return [check for check in self.checks if check.failing]

    @property
    def ready(self) -> bool:
        return not self.problems


def check_account(account: Account, *, resolver: Resolver | None = None,
                  probe: Probe | None = None, probe_timeout: float = PROBE_TIMEOUT) -> Readiness:
    """Run every check for this tenant's sender (see the module's docstring)."""
    resolver = resolver or default_resolver()
    probe = probe or post_probe
    try:
        address = sender_address(account.from_email)
    except ValidationError as exc:
        readiness = Readiness(account.id, account.slug, account.from_email, "")
        readiness.checks.append(Check("From", account.from_email, MISALIGNED, " ".join(exc.messages),
                                      publish="fix the account's From address"))
        readiness.checks.append(check_one_click(probe, timeout=probe_timeout))
        return readiness
    from_domain = dns_checks.normalized(address.rpartition("@")[2])
    readiness = Readiness(account.id, account.slug, address, from_domain)
    relay_ips = list(getattr(settings, "DELIVERABILITY_RELAY_IPS", []) or [])
    envelope_domain = dns_checks.normalized(settings.BOUNCE_DOMAIN or "") or from_domain

    readiness.checks.append(check_sender_domain(account, address, from_domain))
    spf = dns_checks.check_spf(resolver, from_domain, relay_ips=relay_ips, role="From domain")
    readiness.checks.append(spf)
    envelope_spf = spf
    if envelope_domain != from_domain:
        envelope_spf = dns_checks.check_spf(resolver, envelope_domain, relay_ips=relay_ips,
                                            role="envelope sender, BOUNCE_DOMAIN")
        readiness.checks.append(envelope_spf)

    keys, signing, signing_problem = _keys(account, address, from_domain)
    signing_checks = []
    for key in keys:
        check = dns_checks.check_dkim(resolver, key)
        if not key.verified:
            check.details.append("not verified: it signs no mail until “Verify in DNS” finds "
                                 "this record")
            if check.failing:
                check.status = WARN
        elif not key.signs_this_sender:
            check.details.append(f"this key signs other senders' mail, not {from_domain}'s")
            if check.failing:
                check.status = WARN
        else:
            check.details.append(f"signs {from_domain}'s mail (d={dns_checks.normalized(key.domain)})")
            signing_checks.append(check)
        readiness.checks.append(check)
    if signing_problem is not None:
        readiness.checks.append(signing_problem)
    elif signing is None:
        readiness.checks.append(_no_key(from_domain))

    readiness.checks.append(dns_checks.check_dmarc(
        resolver, from_domain,
        dkim_domains=[dns_checks.normalized(signing.domain)] if signing else [],
        dkim_passes=bool(signing_checks) and not any(c.failing for c in signing_checks),
        envelope_domain=envelope_domain, spf_passes=not envelope_spf.failing))
    readiness.checks.append(check_one_click(probe, timeout=probe_timeout))
    return readiness


def check_sender_domain(account: Account, address: str, from_domain: str) -> Check:
    """Is the From domain the account's own, proved in DNS, or the platform's? Only a WARN: a
    sender saved before the rule, or by an operator, still goes out (sender_domains)."""
    refusal = sender_refusal(account_id=account.id, address=address)
    if refusal is None:
        return Check("Sender domain", from_domain, OK,
                     "a verified sending domain of this account, or the platform's")
    return Check("Sender domain", from_domain, WARN, refusal.reason,
                 publish="add the domain under Sending domains, publish its TXT record, then "
                         "“Verify in DNS”; or send from a domain of the account's own")


def check_one_click(probe: Probe, *, timeout: float = PROBE_TIMEOUT) -> Check:
    site_url = settings.SITE_URL.rstrip("/")
    url = site_url + reverse("growth:unsubscribe", args=[PROBE_TOKEN])
    name = "One-click unsubscribe"
    if urlsplit(site_url).scheme != "https":
        return Check(name, site_url, MISSING,
                     "SITE_URL is not https: RFC 8058 one-click needs an https link, and Gmail and "
                     "Yahoo ignore any other", publish="serve the site over HTTPS and set "
                     "SITE_URL=https://<your host>")
    try:
        status, location = probe(url, timeout)
    except ProbeFailed as exc:
        return Check(name, url, MISSING, f"not reachable: {exc}",
                     publish="make SITE_URL reachable from the Internet")
    details = [f"POST {url} (a test token: nothing is unsubscribed) answered {status}"]
    if status in (200, 400):
        return Check(name, url, OK, "the unsubscribe page answers one-click POSTs", details=details)
    if 300 <= status < 400:
        return Check(name, url, WARN, f"answers with a redirect ({status} to {location or '?'}): "
                     "mailbox providers' one-click POSTs may not follow it", details=details,
                     publish="set SITE_URL to the address the site answers at directly")
    if status == 404:
        return Check(name, url, MISALIGNED, "no unsubscribe page there: SITE_URL does not lead to "
                     "this site", details=details, publish="set SITE_URL to this site's public address")
    if status in (401, 403, 405):
        return Check(name, url, MISALIGNED, f"the POST is refused ({status}): a proxy, firewall or "
                     "login in front of the site blocks one-click", details=details,
                     publish="let POST /u/<token>/ through without credentials")
    return Check(name, url, MISALIGNED, f"the POST failed ({status})", details=details)


def _keys(account: Account, address: str,
          from_domain: str) -> tuple[list[DkimKey], DkimKey | None, Check | None]:
    """The keys to check, the one that signs this sender's mail (None: none), and a problem of
    that choice (a key that applies but cannot sign), if any."""
    rows = SendingDomain.objects.filter(Q(account=account) | Q(account__isnull=True))
    keys = [DkimKey(row.domain, row.selector, row.algorithm, row.private_key,
                    source=f"sending domain #{row.id} of "
                           f"{'the platform' if row.account_id is None else 'the account'}",
                    verified=row.account_id is None or row.verified_at is not None)
            for row in rows.order_by("account_id", "domain")]
    platform_file = _platform_key_file()
    if platform_file is not None:
        keys.append(platform_file)
    problem = None
    try:
        domain, selector = _signing_identity(account, address)
    except Exception as exc:  # the key that applies cannot sign (growth.sending.dkim.DkimKeyError)
        domain, selector = None, None
        problem = Check("DKIM", from_domain, MISALIGNED, f"the key that signs this sender's mail "
                        f"cannot sign: {exc}", publish="fix the key (admin › Sending domains, or "
                        "DKIM_PRIVATE_KEY_FILE)")
    signing = None
    for key in keys:
        key.signs_this_sender = (dns_checks.normalized(key.domain) == domain
                                 and key.selector == selector)
        if key.signs_this_sender and signing is None:
            signing = key
    return keys, signing, problem


def _signing_identity(account: Account, address: str) -> tuple[str, str] | tuple[None, None]:
    """(d=, s=) of the key that signs this sender's mail, as the SMTP path chooses it."""
    signer = signer_for(account_id=account.id, from_email=address)
    if signer is None:
        return None, None
    return dns_checks.normalized(signer.domain), signer.selector


def _platform_key_file() -> DkimKey | None:
    path = getattr(settings, "DKIM_PRIVATE_KEY_FILE", "")
    domain = getattr(settings, "DKIM_DOMAIN", "")
    if not path or not domain:
        return None
    try:
        text = Path(path).read_text("ascii", "replace")
    except OSError:
        text = ""  # the signing choice reports it; the DNS record can still be looked at
    return DkimKey(domain, getattr(settings, "DKIM_SELECTOR", ""),
                   getattr(settings, "DKIM_ALGORITHM", "rsa-sha256"), text,
                   source=f"the platform's DKIM_PRIVATE_KEY_FILE {path}")


def _no_key(from_domain: str) -> Check:
    if not transport_signs():
        return Check("DKIM", from_domain, WARN, f"no key of ours signs {from_domain}'s mail; the "
                     f"mail path ({settings.EMAIL_BACKEND}) does not sign here: an ESP signs with its "
                     "own key, verify the domain with it")
    return Check("DKIM", from_domain, MISSING, f"no DKIM key signs {from_domain}'s mail",
                 publish=f"add a sending domain for {from_domain} (admin › Sending domains), "
                         "publish the record it shows, then “Verify in DNS”")


def summary_counts(checks: Sequence[Check]) -> dict[str, int]:
    counts = {status: 0 for status in (OK, WARN, MISSING, MISALIGNED, ERROR)}
    for check in checks:
        counts[check.status] += 1
    return counts
