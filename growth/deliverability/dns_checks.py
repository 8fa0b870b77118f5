"""SPF, DKIM and DMARC of a sending domain, as the DNS publishes them (dnspython).

Each check answers a ``Check``: OK, WARN (works, but worth a look), MISSING (nothing published),
MISALIGNED (published, but it does not pass for our mail), or ERROR (the lookup itself failed:
not known, so not ready). What each looks at:

- **SPF** (RFC 7208) of a domain: exactly one ``v=spf1`` TXT record. Its ``include:`` and
  ``redirect=`` are followed, and ``a``/``mx`` resolved, within the RFC's 10 lookups, to gather
  the ``ip4:``/``ip6:`` networks it authorizes; the report lists the includes and networks found.
  When the relay's public addresses are known (``DELIVERABILITY_RELAY_IPS``, or EMAIL_HOST's
  addresses when they are public) the check says whether the record authorizes them. Not
  evaluated: macros, ``exists:``, ``ptr`` (reported as such), and qualifiers other than pass
  inside includes. It is no full SPF evaluation: a pass here means "can pass for the relay".
- **DKIM** (RFC 6376, 8463) of one key: the TXT record at ``<selector>._domainkey.<domain>``,
  its ``k=`` against the key's algorithm, and its ``p=`` against the public key derived from our
  private key (``keys``); an empty ``p=`` is a revoked key.
- **DMARC** (RFC 7489) of the From domain: the record at ``_dmarc.<domain>`` (else at the
  organizational domain's), its policy, and whether the From domain is aligned (relaxed or strict,
  per ``adkim``/``aspf``) with the DKIM signing domain (d=) and with the envelope sender's domain
  (BOUNCE_DOMAIN, or the From domain itself) that SPF authenticates. Gmail and Yahoo require
  one of the two to be aligned for bulk senders, whatever the policy.

The organizational domain is approximated without the Public Suffix List: the last two labels,
or three under a known second-level registry suffix (``co.uk``, ``com.au``…). For an exotic
suffix, relaxed alignment may then be judged too strictly, never too loosely for the common ones.

Tests pass a stub ``Resolver``; nothing here goes to the network but ``DnsResolver``.
"""

from __future__ import annotations

import ipaddress
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from growth.deliverability import keys

OK = "OK"
WARN = "WARN"
MISSING = "MISSING"
MISALIGNED = "MISALIGNED"
ERROR = "ERROR"
FAILING = frozenset({MISSING, MISALIGNED, ERROR})

SPF_LOOKUP_LIMIT = 10  # RFC 7208 §4.6.4
_SECOND_LEVEL = frozenset({"co", "com", "net", "org", "ac", "gov", "edu", "or", "ne", "go", "gv",
                           "mil", "nom", "sch", "ltd", "plc", "me", "gob", "gouv", "asso"})

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class Check:
    """One line of the report: what was looked at, the verdict, and what to do about it."""

    name: str  # SPF, DKIM, DMARC, One-click unsubscribe
    subject: str  # the DNS name or URL looked at
    status: str  # OK, WARN, MISSING, MISALIGNED, ERROR
    summary: str
    details: list[str] = field(default_factory=list)
    publish: str = ""  # what to publish or change, when something is to be done
    found: list[str] = field(default_factory=list)  # the records looked at, as published

    @property
    def failing(self) -> bool:
        return self.status in FAILING


class LookupFailed(Exception):
    """The DNS did not answer (timeout, SERVFAIL, no name servers): the record is not known."""


class Resolver(Protocol):
    def txt(self, name: str) -> list[str]:
        """The TXT records at ``name``, each one's strings joined; [] when there are none."""

    def addresses(self, name: str) -> list[str]:
        """The A and AAAA addresses of ``name``; [] when there are none."""

    def mx(self, name: str) -> list[str]:
        """The MX hosts of ``name``; [] when there are none."""


class DnsResolver:
    """The real DNS, through dnspython, each query within ``timeout`` seconds and all of them
    within ``budget`` (a page that runs these checks must not hang on a dead resolver).
    ``nameservers``: "system" (resolv.conf), or host[:port],... (IPv6 as [addr]:port)."""

    def __init__(self, *, timeout: float = 3.0, budget: float = 20.0,
                 nameservers: str = "system") -> None:
        import dns.nameserver
        import dns.resolver

        if nameservers.strip().lower() == "system":
            self._resolver = dns.resolver.Resolver()
        else:
            self._resolver = dns.resolver.Resolver(configure=False)
            self._resolver.nameservers = [
                dns.nameserver.Do53Nameserver(host, port)
                for host, port in map(nameserver_address, nameservers.split(","))]
        self.timeout = timeout
        self._deadline = time.monotonic() + budget

    def _answers(self, name: str, rdtype: str) -> list:
        import dns.exception
        import dns.resolver

        left = self._deadline - time.monotonic()
        if left <= 0:
            raise LookupFailed("out of time for DNS lookups")
        try:
            return list(self._resolver.resolve(name, rdtype, lifetime=min(self.timeout, left),
                                               search=False))
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return []
        except dns.exception.Timeout:
            raise LookupFailed(f"{rdtype} {name}: no answer in time") from None
        except (dns.resolver.NoNameservers, dns.resolver.YXDOMAIN, dns.exception.DNSException) as exc:
            raise LookupFailed(f"{rdtype} {name}: {exc}") from None

    def txt(self, name: str) -> list[str]:
        return [b"".join(answer.strings).decode("utf-8", "replace")
                for answer in self._answers(name, "TXT")]

    def addresses(self, name: str) -> list[str]:
        return [a.address for rdtype in ("A", "AAAA") for a in self._answers(name, rdtype)]

    def mx(self, name: str) -> list[str]:
        return [str(a.exchange).rstrip(".").lower() for a in self._answers(name, "MX")]


def nameserver_address(entry: str) -> tuple[str, int]:
    """(address, port) of one nameserver given as host[:port] ([addr]:port for IPv6);
    ValueError unless the address is an IP address."""
    entry = entry.strip()
    host, port = entry, "53"
    if entry.startswith("["):
        host, _, port = entry[1:].partition("]")
        port = port.removeprefix(":") or "53"
    elif entry.count(":") == 1:
        host, port = entry.split(":")
    return str(ipaddress.ip_address(host)), int(port)


# --- domains -----------------------------------------------------------------------------------


def normalized(domain: str) -> str:
    return domain.strip().lower().rstrip(".")


def organizational_domain(domain: str) -> str:
    """The registrable domain, approximately (see the module's docstring)."""
    labels = normalized(domain).split(".")
    if len(labels) >= 3 and len(labels[-1]) == 2 and labels[-2] in _SECOND_LEVEL:
        return ".".join(labels[-3:])
    return ".".join(labels[-2:])


def aligned(from_domain: str, other: str, mode: str = "r") -> bool:
    """DMARC identifier alignment: strict ("s") the same domain, relaxed ("r") the same
    organizational domain."""
    a, b = normalized(from_domain), normalized(other)
    if a == b:
        return True
    return mode != "s" and organizational_domain(a) == organizational_domain(b)


def tags(record: str) -> dict[str, str]:
    """``k=v; k=v`` tags (DKIM, DMARC), names lowercased, values stripped."""
    found = {}
    for part in record.split(";"):
        name, sep, value = part.partition("=")
        if sep:
            found.setdefault(name.strip().lower(), value.strip())
    return found


# --- SPF ---------------------------------------------------------------------------------------


@dataclass
class SpfFindings:
    record: str
    includes: list[str] = field(default_factory=list)
    networks: list[tuple[IPNetwork, str]] = field(default_factory=list)  # (network, via)
    not_evaluated: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    all_term: str = ""  # -all, ~all, ?all, +all; "" when the record has none
    lookups: int = 0


def spf_records(resolver: Resolver, domain: str) -> list[str]:
    return [r for r in resolver.txt(domain) if r.lower() == "v=spf1" or r.lower().startswith("v=spf1 ")]


def check_spf(resolver: Resolver, domain: str, *, relay_ips: Sequence[str] = (),
              role: str = "") -> Check:
    """SPF of ``domain``; ``relay_ips``: the public addresses our mail leaves from, if known."""
    domain = normalized(domain)
    subject = domain
    name = f"SPF{f' ({role})' if role else ''}"
    suggestion = " ".join(f"ip{ipaddress.ip_address(ip).version}:{ip}" for ip in relay_ips) \
        or "include:<your relay's SPF domain>"
    try:
        records = spf_records(resolver, domain)
    except LookupFailed as exc:
        return Check(name, subject, ERROR, f"could not look it up ({exc})")
    if not records:
        return Check(name, subject, MISSING, "no SPF record (v=spf1)",
                     publish=f'{domain}. TXT "v=spf1 {suggestion} ~all"')
    if len(records) > 1:
        return Check(name, subject, MISALIGNED,
                     f"{len(records)} SPF records: receivers treat that as an error (PermError)",
                     details=records, publish=f"merge them into one TXT record at {domain}")
    findings = SpfFindings(record=records[0])
    try:
        _walk_spf(resolver, domain, records[0], findings, top=True)
    except LookupFailed as exc:
        return Check(name, subject, ERROR, f"could not follow the record ({exc})",
                     details=[records[0]])
    details = [records[0], _listing(findings)]
    if findings.not_evaluated:
        details.append("not evaluated here: " + ", ".join(findings.not_evaluated))
    if findings.problems:
        return Check(name, subject, MISALIGNED, "; ".join(findings.problems), details=details,
                     publish="fix the record (RFC 7208)")
    if relay_ips:
        covered, missing = [], []
        for ip in relay_ips:
            via = _covering(ipaddress.ip_address(ip), findings.networks)
            (covered if via else missing).append(f"{ip} ({via})" if via else ip)
        if missing and not findings.not_evaluated:
            add = " ".join(f"ip{ipaddress.ip_address(ip).version}:{ip}" for ip in missing)
            return Check(name, subject, MISALIGNED,
                         f"does not authorize the relay's {', '.join(missing)}: its mail fails SPF",
                         details=details, publish=f"add {add} to the record at {domain}")
        if missing:
            details.append(f"the relay's {', '.join(missing)} is not in the networks found; it may "
                           "pass through a term not evaluated here")
            return Check(name, subject, WARN, "the relay's address is not authorized by the "
                         "terms checked here", details=details)
        details.append("authorizes the relay: " + ", ".join(covered))
    else:
        details.append("the relay's public address is not known here (set "
                       "DELIVERABILITY_RELAY_IPS to check it)")
    if findings.all_term == "+all":
        return Check(name, subject, WARN, "+all authorizes every server on the Internet: receivers "
                     "give it no weight", details=details, publish="end the record with ~all or -all")
    return Check(name, subject, OK, f"v=spf1 published (ends {findings.all_term or 'without all'})",
                 details=details)


def _walk_spf(resolver: Resolver, domain: str, record: str, findings: SpfFindings, *,
              top: bool) -> None:
    redirect = None
    saw_all = False
    for term in record.split()[1:]:
        qualifier = term[0] if term[0] in "+-~?" else "+"
        body = term[1:] if term[0] in "+-~?" else term
        lower = body.lower()
        if "%{" in body:
            findings.not_evaluated.append(f"macro in {term}")
        elif lower == "all":
            saw_all = True
            if top:
                findings.all_term = f"{qualifier}all"
        elif lower.startswith("include:"):
            target = normalized(body[len("include:"):])
            findings.includes.append(target)
            if qualifier == "+":
                _follow(resolver, target, findings)
        elif lower.startswith(("ip4:", "ip6:")):
            try:
                network = ipaddress.ip_network(body[4:], strict=False)
            except ValueError:
                findings.problems.append(f"{term} is not an address or network")
                continue
            if qualifier == "+":
                findings.networks.append((network, domain if top else f"via {domain}"))
        elif lower == "a" or lower.startswith(("a:", "a/")):
            try:
                target, prefix = _target_and_prefix(body[1:], domain)
            except ValueError:
                findings.problems.append(f"{term} has no valid CIDR length: a PermError for receivers")
                continue
            if not _count_lookup(findings):
                continue
            for ip in resolver.addresses(target):
                _add_host(findings, ip, prefix, f"a:{target}", qualifier)
        elif lower == "mx" or lower.startswith(("mx:", "mx/")):
            try:
                target, prefix = _target_and_prefix(body[2:], domain)
            except ValueError:
                findings.problems.append(f"{term} has no valid CIDR length: a PermError for receivers")
                continue
            if not _count_lookup(findings):
                continue
            for host in resolver.mx(target)[:10]:  # RFC 7208 §4.6.4: at most 10 MX hosts
                for ip in resolver.addresses(host):
                    _add_host(findings, ip, prefix, f"mx:{target}", qualifier)
        elif lower.startswith("redirect="):
            redirect = normalized(body[len("redirect="):])
        elif lower.startswith(("exists:", "ptr")):
            findings.not_evaluated.append(term)
    if redirect and not saw_all:
        findings.includes.append(f"redirect={redirect}")
        _follow(resolver, redirect, findings)


def _follow(resolver: Resolver, target: str, findings: SpfFindings) -> None:
    if not _count_lookup(findings):
        return
    records = spf_records(resolver, target)
    if len(records) != 1:
        findings.problems.append(f"{target} has {len(records) or 'no'} SPF record"
                                 f"{'s' if len(records) != 1 else ''}: a PermError for receivers")
        return
    _walk_spf(resolver, target, records[0], findings, top=False)


_DUAL_CIDR = re.compile(r"(?:/(\d{1,3}))?(?://(\d{1,3}))?")


def _count_lookup(findings: SpfFindings) -> bool:
    """Count a term that costs a DNS lookup; False once over the RFC's limit (not looked up)."""
    findings.lookups += 1
    if findings.lookups == SPF_LOOKUP_LIMIT + 1:
        findings.problems.append(f"more than {SPF_LOOKUP_LIMIT} DNS lookups: receivers stop with "
                                 "a PermError (RFC 7208 §4.6.4)")
    return findings.lookups <= SPF_LOOKUP_LIMIT


def _target_and_prefix(rest: str, domain: str) -> tuple[str, tuple[int | None, int | None]]:
    """The term's domain and its dual CIDR length (RFC 7208 §5.6: ``/24``, ``//64``,
    ``/24//64``); ValueError for a length out of range or not a number."""
    rest = rest.lstrip(":")
    target, slash, lengths = rest.partition("/")
    found = _DUAL_CIDR.fullmatch(slash + lengths)
    if found is None:
        raise ValueError(lengths)
    ip4, ip6 = (int(n) if n is not None else None for n in found.groups())
    if (ip4 is not None and ip4 > 32) or (ip6 is not None and ip6 > 128):
        raise ValueError(lengths)
    return normalized(target) if target else domain, (ip4, ip6)


def _add_host(findings: SpfFindings, ip: str, prefix: tuple[int | None, int | None], via: str,
              qualifier: str) -> None:
    if qualifier != "+":
        return
    address = ipaddress.ip_address(ip)
    bits = prefix[0] if address.version == 4 else prefix[1]
    bits = address.max_prefixlen if bits is None else bits
    findings.networks.append((ipaddress.ip_network(f"{ip}/{bits}", strict=False), via))


def _covering(ip: ipaddress.IPv4Address | ipaddress.IPv6Address,
              networks: Iterable[tuple[IPNetwork, str]]) -> str:
    for network, via in networks:
        if ip.version == network.version and ip in network:
            return f"{'ip4' if ip.version == 4 else 'ip6'}:{network} {via}".strip()
    return ""


def _listing(findings: SpfFindings) -> str:
    ip4 = [str(n) for n, _ in findings.networks if n.version == 4]
    ip6 = [str(n) for n, _ in findings.networks if n.version == 6]
    return (f"includes: {', '.join(findings.includes) or 'none'}; "
            f"ip4: {', '.join(ip4) or 'none'}; ip6: {', '.join(ip6) or 'none'}; "
            f"{findings.lookups} DNS lookup{'s' if findings.lookups != 1 else ''}")


# --- DKIM --------------------------------------------------------------------------------------


@dataclass
class DkimKey:
    """A key that signs (or could sign) mail: a sending domain's, or the platform's file."""

    domain: str
    selector: str
    algorithm: str
    private_key: str = field(repr=False)
    source: str = ""  # where it is configured, for the report
    signs_this_sender: bool = True  # False: a platform key that another From domain uses
    verified: bool = True  # False: a tenant's key not verified in DNS yet, which signs nothing

    @property
    def dns_name(self) -> str:
        return f"{self.selector}._domainkey.{normalized(self.domain)}"

    def __getstate__(self):  # cached readiness results must never carry the private key
        state = dict(self.__dict__)
        state["private_key"] = ""
        return state


def check_dkim(resolver: Resolver, key: DkimKey) -> Check:
    subject = key.dns_name
    kind = "ed25519" if key.algorithm == keys.ED25519 else "rsa"
    try:
        expected = keys.expected_public_key(key.private_key, key.algorithm)
        unreadable = ""
    except keys.KeyUnreadable as exc:
        expected, unreadable = None, str(exc)
    wanted = f'{subject}. TXT "v=DKIM1; k={kind}; p={expected}"' if expected else ""
    details = [f"key: {key.source}"] if key.source else []
    try:
        records = [r for r in resolver.txt(subject) if "p=" in r.replace(" ", "")]
    except LookupFailed as exc:
        return Check("DKIM", subject, ERROR, f"could not look it up ({exc})", details=details)
    if not records:
        return Check("DKIM", subject, MISSING, "no DKIM key record", details=details,
                     publish=wanted or f"the public key of {key.source or 'this key'} at {subject}")
    if len(records) > 1:
        return Check("DKIM", subject, MISALIGNED, f"{len(records)} key records: verifiers may take "
                     "either", details=[*details, *records], publish=wanted or "keep one record",
                     found=records)
    found = tags(records[0])
    published = "".join(found.get("p", "").split())
    if found.get("v", "DKIM1") != "DKIM1":
        return Check("DKIM", subject, MISALIGNED, f"v={found['v']} is not DKIM1", details=details,
                     publish=wanted, found=records)
    if not published:
        return Check("DKIM", subject, MISSING, "the key is revoked (empty p=)", details=details,
                     publish=wanted, found=records)
    if found.get("k", "rsa").lower() != kind:
        return Check("DKIM", subject, MISALIGNED, f"k={found.get('k', 'rsa')} published, but the key "
                     f"is {kind}: every signature fails", details=details, publish=wanted,
                     found=records)
    if "y" in found.get("t", "").split(":"):
        details.append("t=y: testing mode, some receivers treat the signature as absent")
    if unreadable:
        return Check("DKIM", subject, WARN, f"a record is published, but our private key cannot "
                     f"be read to compare it: {unreadable}", details=details, found=records)
    if not keys.same_key(published, expected, key.algorithm):
        return Check("DKIM", subject, MISALIGNED, "the published key is not the one we sign with: "
                     "every signature fails", details=details, publish=wanted, found=records)
    return Check("DKIM", subject, OK, f"the published {kind} key matches ours", details=details,
                 found=records)


# --- DMARC -------------------------------------------------------------------------------------


@dataclass
class DmarcPolicy:
    name: str  # where it was found
    record: str
    policy: str  # p= (sp= for a subdomain found at the organizational domain)
    adkim: str
    aspf: str
    tags: dict[str, str]


def dmarc_policy(resolver: Resolver, domain: str) -> tuple[DmarcPolicy | None, list[str]]:
    """The record that governs ``domain`` (its own, else its organizational domain's), and the
    problems that make receivers ignore records (several at one name)."""
    domain = normalized(domain)
    candidates = [domain]
    org = organizational_domain(domain)
    if org != domain:
        candidates.append(org)
    for name in candidates:
        records = [r for r in resolver.txt(f"_dmarc.{name}")
                   if r.replace(" ", "").upper().startswith("V=DMARC1")]
        if len(records) > 1:
            return None, [f"_dmarc.{name} has {len(records)} DMARC records: receivers ignore them all"]
        if records:
            found = tags(records[0])
            policy = found.get("p", "").lower()
            if name != domain and found.get("sp"):
                policy = found["sp"].lower()
            if policy not in ("none", "quarantine", "reject"):
                return None, [f"_dmarc.{name}: no valid p= (none, quarantine or reject)"]
            return DmarcPolicy(f"_dmarc.{name}", records[0], policy,
                               found.get("adkim", "r").lower(), found.get("aspf", "r").lower(),
                               found), []
    return None, []


def check_dmarc(resolver: Resolver, from_domain: str, *, dkim_domains: Sequence[str],
                dkim_passes: bool, envelope_domain: str, spf_passes: bool) -> Check:
    """DMARC of the From domain. ``dkim_domains``: the d= of the key(s) that sign this sender's
    mail; ``envelope_domain``: the Return-Path's domain, which SPF authenticates; ``*_passes``:
    whether those checks came out passing."""
    from_domain = normalized(from_domain)
    subject = f"_dmarc.{from_domain}"
    suggestion = f'{subject}. TXT "v=DMARC1; p=none; rua=mailto:dmarc-reports@{from_domain}"'
    try:
        policy, problems = dmarc_policy(resolver, from_domain)
    except LookupFailed as exc:
        return Check("DMARC", subject, ERROR, f"could not look it up ({exc})")
    if problems:
        return Check("DMARC", subject, MISALIGNED, problems[0], publish="keep one record")
    if policy is None:
        return Check("DMARC", subject, MISSING, "no DMARC record (Gmail and Yahoo require one of "
                     "bulk senders; p=none is enough)", publish=suggestion)
    subject = policy.name
    details = [policy.record]
    dkim_aligned = [d for d in dkim_domains if aligned(from_domain, d, policy.adkim)]
    spf_aligned = bool(envelope_domain) and aligned(from_domain, envelope_domain, policy.aspf)
    modes = f"adkim={policy.adkim}, aspf={policy.aspf}"
    signed_by = ", ".join(f"d={d}" for d in dkim_domains) or "no DKIM signature"
    if not dkim_aligned and not spf_aligned:
        other = dkim_domains[0] if dkim_domains else envelope_domain
        consequence = {"reject": "receivers reject it", "quarantine": "receivers put it in spam",
                       "none": "Gmail and Yahoo count it as unauthenticated bulk mail"}[policy.policy]
        return Check("DMARC", subject, MISALIGNED,
                     f"From {from_domain} is aligned with neither DKIM ({signed_by}) nor SPF "
                     f"(envelope @{envelope_domain}) under {modes}: DMARC fails for every message "
                     f"and, with p={policy.policy}, {consequence}", details=details,
                     publish=f"sign with a key of {from_domain} (a sending domain of the account), "
                             f"or send from an address at {other}")
    how = []
    if dkim_aligned:
        how.append(f"DKIM d={dkim_aligned[0]}{'' if dkim_passes else ' (but its key record fails)'}")
    if spf_aligned:
        how.append(f"SPF @{envelope_domain}{'' if spf_passes else ' (but its SPF record fails)'}")
    passes = (dkim_aligned and dkim_passes) or (spf_aligned and spf_passes)
    details.append(f"aligned through {' and '.join(how)} ({modes})")
    if "rua" not in policy.tags:
        details.append("no rua=: you receive no aggregate reports")
    if not passes:
        return Check("DMARC", subject, WARN, f"p={policy.policy}; aligned, but DMARC passes only "
                     "once the record above it is fixed", details=details)
    return Check("DMARC", subject, OK, f"p={policy.policy}, aligned with From", details=details)
