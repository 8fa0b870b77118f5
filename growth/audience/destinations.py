"""Which mailbox provider ("destination") serves a recipient domain, so that pacing can slow the
mail to one provider without slowing the rest. The one place that decides it.

In this order:

1. **The big consumer domains** (``CONSUMER_DOMAINS``): gmail.com is Google, hotmail.fr is
   Microsoft, without asking the DNS. ``family.*`` entries match that name under any public
   suffix (yahoo.com, yahoo.co.uk); a rare such name under an odd suffix that belongs to somebody
   else is misgrouped, which pacing survives.
2. **The MX records**, for every other domain: the most preferred host names the provider, by
   ``MX_PROVIDERS`` (aspmx.l.google.com is Google, so is every Workspace domain; security
   gateways such as Mimecast or Proofpoint are providers of their own, being the servers that
   take the mail), else by the host's registrable domain (mx1.example-hosting.net is
   ``example-hosting.net``). The registrable domain is approximated as ``dns_checks`` does it:
   the last two labels, three under a known second-level suffix (co.uk, com.au); an exotic
   suffix may name a provider by one label too few or too many, which only splits or merges
   that provider's pacing. Providers named that way and listed in ``CONSUMER_DOMAINS`` are
   listed under the same name (``orange.fr``), so both ways agree.
3. **A domain without MX records** (no such name, or no MX) takes mail at its own address
   (RFC 5321 §5.1, the implicit MX): it is its own destination. So is a domain the DNS did not
   answer for, as ``unresolved``, asked again an hour later; and a string that is no host name,
   as ``unresolved`` for a week (asking again would change nothing). The row keeps the domain as
   the build's join reads it; the name asked, and any destination named after it, are its
   normal form (lower case, IDNA, no trailing dot).

Lookups are bounded: ``DESTINATIONS_DNS_TIMEOUT`` a lookup, ``DESTINATIONS_RESOLVE_SECONDS`` a
call, ``LOOKUP_THREADS`` at once. When the first lookups of a call all fail, the DNS is taken to
be down for ``DNS_DOWN_SECONDS``: no lookup is tried until then, every domain is unresolved.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import dns.exception
import dns.name
import dns.nameserver
import dns.resolver
from django.conf import settings

from growth.deliverability.dns_checks import nameserver_address, organizational_domain
from growth.managers.destinations import MAIL_DOMAINS, Classification

logger = logging.getLogger(__name__)

MX, STATIC, UNRESOLVED = "mx", "static", "unresolved"  # MailDomain.Source
ANSWERED_LIFETIME = 7 * 24 * 3600.0  # seconds: an MX answer, the static table, a malformed name
UNRESOLVED_LIFETIME = 3600.0  # seconds: the DNS did not answer
LOOKUP_THREADS = 16
DOWN_AFTER_FAILURES = 3  # failed lookups, and not one answer, in a call: the DNS is down
DNS_DOWN_SECONDS = 60.0

CONSUMER_DOMAINS: dict[str, tuple[str, ...]] = {
    "google": ("gmail.com", "googlemail.com"),
    "microsoft": ("outlook.*", "hotmail.*", "live.*", "msn.com", "windowslive.com"),
    "yahoo": ("yahoo.*", "ymail.com", "rocketmail.com", "aol.*", "aim.com", "verizon.net"),
    "apple": ("icloud.com", "me.com", "mac.com"),
    "united-internet": ("gmx.*", "web.de", "mail.com"),
    "yandex": ("yandex.*", "ya.ru"),
    "proton": ("proton.me", "protonmail.com", "protonmail.ch", "pm.me"),
    "zoho": ("zoho.com", "zohomail.com", "zohomail.eu"),
    "fastmail": ("fastmail.com", "fastmail.fm"),
    # named as their MX hosts' registrable domain would name them
    "comcast.net": ("comcast.net",),
    "orange.fr": ("orange.fr", "wanadoo.fr"),
    "free.fr": ("free.fr",),
    "mail.ru": ("mail.ru", "bk.ru", "inbox.ru", "list.ru"),
}

MX_PROVIDERS: dict[str, str] = {  # an MX host's domain suffix -> its provider
    "google.com": "google", "googlemail.com": "google",
    "outlook.com": "microsoft", "hotmail.com": "microsoft",  # *.mail.protection.outlook.com
    "yahoodns.net": "yahoo",
    "icloud.com": "apple", "apple.com": "apple",
    "gmx.net": "united-internet", "gmx.com": "united-internet", "web.de": "united-internet",
    "mail.com": "united-internet",
    "yandex.ru": "yandex", "yandex.net": "yandex",
    "protonmail.ch": "proton",
    "zoho.com": "zoho", "zoho.eu": "zoho", "zoho.in": "zoho",
    "messagingengine.com": "fastmail",
    "mimecast.com": "mimecast", "mimecast.co.za": "mimecast", "mimecast-offshore.com": "mimecast",
    "pphosted.com": "proofpoint", "ppe-hosted.com": "proofpoint",
    "barracudanetworks.com": "barracuda",
    "iphmx.com": "cisco",
}

_EXACT = {domain: provider for provider, domains in CONSUMER_DOMAINS.items()
          for domain in domains if not domain.endswith(".*")}
_FAMILIES = {domain[:-2]: provider for provider, domains in CONSUMER_DOMAINS.items()
             for domain in domains if domain.endswith(".*")}
_HOSTNAME = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")

_dns_down_until: dict[str, float] = {}  # DESTINATIONS_DNS -> time.monotonic() it may be retried


class LookupFailed(Exception):
    """The DNS gave no answer for the name (timeout, SERVFAIL, no server reachable)."""


def classify_recipient_domains(*, campaign_id: int) -> int:
    """Classify the domains of the campaign's audience that have no destination yet (at most
    DESTINATIONS_RESOLVE_PER_BUILD, the most frequent first); return how many were recorded.

    Called before the campaign's build, outside any transaction (lookups take seconds). DNS
    trouble never raises: the domains are recorded as unresolved. Database errors do.
    """
    domains = MAIL_DOMAINS.unclassified_domains(
        campaign_id=campaign_id, limit=settings.DESTINATIONS_RESOLVE_PER_BUILD)
    if not domains:
        return 0
    return MAIL_DOMAINS.record(classify(domains))


def classify(domains: Sequence[str]) -> list[Classification]:
    """One classification per domain, looking up in the DNS what the static table does not
    know (see the module's docstring)."""
    classified: list[Classification] = []
    to_look_up: dict[str, str] = {}  # domain -> the name asked
    for domain in domains:
        name = dns_name(domain)
        provider = consumer_provider(name) if name else None
        if name is None:
            own = (domain.strip().lower().rstrip(".") or domain)[:253]
            classified.append(Classification(domain, own, UNRESOLVED, ANSWERED_LIFETIME))
        elif provider:
            classified.append(Classification(domain, provider, STATIC, ANSWERED_LIFETIME))
        else:
            to_look_up[domain] = name
    answers = look_up_mx(list(dict.fromkeys(to_look_up.values())))
    for domain, name in to_look_up.items():
        hosts = answers.get(name)
        if hosts is None:
            classified.append(Classification(domain, name, UNRESOLVED, UNRESOLVED_LIFETIME))
        else:
            classified.append(Classification(domain, mx_provider(hosts, domain=name), MX,
                                             ANSWERED_LIFETIME, tuple(hosts)))
    return classified


def dns_name(domain: str) -> str | None:
    """The domain as the DNS is asked for it: lower case, IDNA-encoded, no trailing dot; None
    when it is no host name (an empty or over-long label, spaces, other punctuation)."""
    text = domain.strip().rstrip(".")
    if not text:
        return None
    try:
        name = dns.name.from_unicode(text).to_text(omit_final_dot=True).lower()
    except (dns.exception.DNSException, UnicodeError, ValueError):
        return None
    return name if len(name) <= 253 and _HOSTNAME.fullmatch(name) else None


def consumer_provider(name: str) -> str | None:
    """The provider of a big consumer domain (``CONSUMER_DOMAINS``), else None."""
    if name in _EXACT:
        return _EXACT[name]
    family = name.split(".", 1)[0]
    if family in _FAMILIES and "." in name and organizational_domain(name) == name:
        return _FAMILIES[family]
    return None


def mx_provider(hosts: Sequence[str], *, domain: str) -> str:
    """The provider behind MX hosts given in preference order: the first one's, by
    ``MX_PROVIDERS`` or its registrable domain; ``domain`` itself without MX (or a null MX)."""
    primary = hosts[0] if hosts else ""
    if not primary:
        return domain
    labels = primary.split(".")
    for start in range(len(labels)):
        provider = MX_PROVIDERS.get(".".join(labels[start:]))
        if provider:
            return provider
    return organizational_domain(primary)


def look_up_mx(names: Sequence[str]) -> dict[str, list[str]]:
    """{name: its MX hosts in preference order ([] for none)} for the names the DNS answered
    for, within the time budget; {} when DNS is off or down."""
    spec = settings.DESTINATIONS_DNS.strip()
    if not names or spec.lower() == "off" or _dns_down_until.get(spec, 0.0) > time.monotonic():
        return {}
    timeout = float(settings.DESTINATIONS_DNS_TIMEOUT)
    deadline = time.monotonic() + float(settings.DESTINATIONS_RESOLVE_SECONDS)
    try:
        resolver = _resolver(spec, timeout)
    except (dns.exception.DNSException, OSError, ValueError) as exc:  # no resolv.conf, none
        # in it, a malformed setting
        return _dns_is_down(spec, f"no resolver ({exc})")
    pending = iter(names)
    running: dict[Future, str] = {}
    answers: dict[str, list[str]] = {}
    failures = 0
    pool = ThreadPoolExecutor(min(LOOKUP_THREADS, len(names)), thread_name_prefix="destinations")

    def start_next() -> bool:
        left = deadline - time.monotonic()
        name = next(pending, None) if left > 0 else None
        if name is not None:
            running[pool.submit(_mx_hosts, resolver, name, min(timeout, left))] = name
        return name is not None

    try:
        while len(running) < LOOKUP_THREADS and start_next():
            pass
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                name = running.pop(future)
                try:
                    answers[name] = future.result()
                except LookupFailed as exc:
                    failures += 1
                    logger.debug("no MX answer for %s: %s", name, exc)
            if not answers and failures >= DOWN_AFTER_FAILURES:
                return _dns_is_down(spec, f"the first {failures} lookups failed")
            for _ in done:
                start_next()
    finally:
        # lookups still running end within their own timeout; nobody waits for them
        pool.shutdown(wait=False, cancel_futures=True)
    left_out = len(names) - len(answers) - failures
    if left_out:
        logger.warning("destinations: %d domains left unresolved, out of time (%s s)", left_out,
                       settings.DESTINATIONS_RESOLVE_SECONDS)
    return answers


def _dns_is_down(spec: str, why: str) -> dict[str, list[str]]:
    _dns_down_until[spec] = time.monotonic() + DNS_DOWN_SECONDS
    logger.warning("destinations: DNS unavailable (%s); domains are unresolved for %d s", why,
                   DNS_DOWN_SECONDS, extra={"dns": spec})
    return {}


def _resolver(spec: str, timeout: float) -> dns.resolver.Resolver:
    """A dnspython resolver for DESTINATIONS_DNS: "system", or "host[:port],..." (IPv6 as
    [addr]:port)."""
    if spec.lower() == "system":
        resolver = dns.resolver.Resolver()
    else:
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [dns.nameserver.Do53Nameserver(host, port)
                                for host, port in map(nameserver_address, spec.split(","))]
    # one try per lookup: a retry inside the lifetime would only hide a dead server longer
    resolver.timeout = resolver.lifetime = timeout
    resolver.cache = None
    return resolver


def _mx_hosts(resolver: dns.resolver.Resolver, name: str, lifetime: float) -> list[str]:
    try:
        answer = resolver.resolve(name, "MX", lifetime=lifetime, search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    except (dns.exception.DNSException, OSError) as exc:
        raise LookupFailed(f"MX {name}: {exc}") from None
    records = sorted((r.preference, str(r.exchange).rstrip(".").lower()) for r in answer)
    return [host for _, host in records]
