"""``manage.py check_sender --account <slug>``: SPF, DKIM and DMARC of the tenant's From domain
through a stub resolver (never the network), one-click unsubscribe through a stub probe."""

from __future__ import annotations

import base64
import functools
import random
from io import StringIO

import nacl.signing
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from growth.deliverability import dns_checks, keys, readiness
from growth.deliverability.dns_checks import LookupFailed
from growth.models import SendingDomain
from tests.factories import AccountFactory

RELAY_IP = "203.0.113.25"


# --- a stub DNS and keys made here ---------------------------------------------------------------


class StubResolver:
    """TXT records by name (MX and addresses too); a name in ``failing`` times out."""

    def __init__(self, txt: dict[str, list[str]], *, addresses: dict[str, list[str]] | None = None,
                 mx: dict[str, list[str]] | None = None, failing: tuple[str, ...] = ()) -> None:
        self.records = {name.lower(): list(values) for name, values in txt.items()}
        self._addresses = addresses or {}
        self._mx = mx or {}
        self.failing = failing
        self.asked: list[str] = []

    def _ask(self, name: str) -> str:
        self.asked.append(name)
        if name in self.failing:
            raise LookupFailed(f"TXT {name}: no answer in time")
        return name.lower()

    def txt(self, name: str) -> list[str]:
        return self.records.get(self._ask(name), [])

    def addresses(self, name: str) -> list[str]:
        return self._addresses.get(self._ask(name), [])

    def mx(self, name: str) -> list[str]:
        return self._mx.get(self._ask(name), [])


def _probably_prime(n: int, rng: random.Random) -> bool:
    for p in (3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73):
        if n % p == 0:
            return n == p
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for _ in range(24):
        x = pow(rng.randrange(2, n - 2), d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = pow(x, 2, n)
            if x == n - 1:
                break
        else:
            return False
    return True


def _prime(bits: int, rng: random.Random) -> int:
    while True:
        n = rng.getrandbits(bits) | (1 << (bits - 1)) | (1 << (bits - 2)) | 1
        if _probably_prime(n, rng):
            return n


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    length = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


@functools.cache
def rsa_key(seed: int) -> str:
    """A 2048-bit RSA private key in PKCS#1 PEM, the same for the same seed (made here: the tests
    need no openssl and no key file)."""
    rng = random.Random(seed)
    e = 65537
    while True:
        p, q = _prime(1024, rng), _prime(1024, rng)
        phi = (p - 1) * (q - 1)
        if p != q and phi % e and (p * q).bit_length() == 2048:
            break
    n, d = p * q, pow(e, -1, phi)
    numbers = [0, n, e, d, p, q, d % (p - 1), d % (q - 1), pow(q, -1, p)]
    der = _der(0x30, b"".join(_der(0x02, v.to_bytes(v.bit_length() // 8 + 1, "big")) for v in numbers))
    body = base64.b64encode(der).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *lines, "-----END RSA PRIVATE KEY-----", ""])


def public(private_key: str, algorithm: str = keys.RSA) -> str:
    return keys.expected_public_key(private_key, algorithm)


def good_zone(*, from_domain: str = "acme.example", selector: str = "s1",
              key: str | None = None) -> dict[str, list[str]]:
    key = key or rsa_key(1)
    return {
        from_domain: ["google-site-verification=abc123", "v=spf1 include:_spf.relay.example -all"],
        "_spf.relay.example": ["v=spf1 ip4:203.0.113.0/24 ip6:2001:db8::/32 ~all"],
        f"{selector}._domainkey.{from_domain}": [f"v=DKIM1; k=rsa; p={public(key)}"],
        f"_dmarc.{from_domain}": [f"v=DMARC1; p=quarantine; rua=mailto:dmarc@{from_domain}"],
    }


# --- the setting of each test --------------------------------------------------------------------


@pytest.fixture(autouse=True)
def platform(settings):
    settings.SITE_URL = "https://growth.example.com"
    settings.BOUNCE_DOMAIN = ""
    settings.DELIVERABILITY_RELAY_IPS = [RELAY_IP]
    settings.DKIM_DOMAIN = ""
    settings.DKIM_SELECTOR = ""
    settings.DKIM_PRIVATE_KEY_FILE = ""
    return settings


@pytest.fixture
def probe(monkeypatch):
    """The one-click POST, stubbed: ``probe.answer`` is (status, Location) or an exception."""

    class Probe:
        answer: object = (400, "")  # our page's answer to a token that is not one
        urls: list[str] = []

        def __call__(self, url, timeout):
            self.urls.append(url)
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    stub = Probe()
    monkeypatch.setattr(readiness, "post_probe", stub)
    return stub


@pytest.fixture
def dns(monkeypatch):
    """Install a stub resolver for the command: ``dns(zone, **kwargs)``."""
    installed = {}

    def install(zone, **kwargs):
        installed["resolver"] = StubResolver(zone, **kwargs)
        monkeypatch.setattr(readiness, "default_resolver", lambda **_: installed["resolver"])
        return installed["resolver"]

    return install


@pytest.fixture
def acme(db):
    """A tenant that verified its From domain in DNS: its key signs its mail."""
    account = AccountFactory(name="Acme", slug="acme", from_email="news@acme.example")
    SendingDomain.objects.create(account=account, domain="acme.example", selector="s1",
                                 algorithm=keys.RSA, private_key=rsa_key(1),
                                 verified_at=timezone.now())
    return account


def check_sender(slug: str = "acme") -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("check_sender", "--account", slug, "--no-color", stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"\n{exc}"
    return 0, out.getvalue()


def line(output: str, start: str) -> str:
    found = [text.strip() for text in output.splitlines() if text.strip().startswith(start)]
    assert found, f"no line starting {start!r} in:\n{output}"
    return found[0]


# --- the command ---------------------------------------------------------------------------------


def test_all_good_is_ready_and_exits_0(acme, dns, probe):
    dns(good_zone())
    code, output = check_sender()
    assert code == 0, output
    assert line(output, "OK          SPF (From domain) acme.example")
    assert "includes: _spf.relay.example; ip4: 203.0.113.0/24; ip6: 2001:db8::/32" in output
    assert f"authorizes the relay: {RELAY_IP} (ip4:203.0.113.0/24 via _spf.relay.example)" in output
    assert line(output, "OK          DKIM s1._domainkey.acme.example: the published rsa key matches ours")
    assert line(output, "OK          DMARC _dmarc.acme.example: p=quarantine, aligned with From")
    assert line(output, "OK          One-click unsubscribe https://growth.example.com/u/readiness-check/")
    assert probe.urls == ["https://growth.example.com/u/readiness-check/"]
    assert "acme is ready to send." in output
    assert "Reputation over the last 7 days: 0 messages sent" in output
    assert "MISSING" not in output and "MISALIGNED" not in output


def test_a_from_domain_not_verified_in_dns_is_a_warning_with_how_to_prove_it(acme, dns, probe):
    SendingDomain.objects.filter(account=acme).update(verified_at=None)
    dns(good_zone())
    code, output = check_sender()
    assert code == 0, output  # a warning: the sender still goes out
    assert line(output, "WARN        Sender domain acme.example: acme.example is not one of this "
                        "account's verified sending domains.")
    assert "Not verified yet: acme.example." in output
    assert "then “Verify in DNS”" in output

    SendingDomain.objects.filter(account=acme).update(verified_at=timezone.now())
    code, output = check_sender()
    assert line(output, "OK          Sender domain acme.example: a verified sending domain of this "
                        "account, or the platform's")


def test_no_spf_record_is_missing_with_what_to_publish(acme, dns, probe):
    zone = good_zone()
    zone["acme.example"] = ["google-site-verification=abc123"]
    dns(zone)
    code, output = check_sender()
    assert code == 1
    assert line(output, "MISSING     SPF (From domain) acme.example: no SPF record (v=spf1)")
    assert f'publish: acme.example. TXT "v=spf1 ip4:{RELAY_IP} ~all"' in output
    assert "acme is not ready to send: 1 check to fix." in output


def test_a_published_dkim_key_that_is_not_ours_is_misaligned(acme, dns, probe):
    zone = good_zone()
    zone["s1._domainkey.acme.example"] = [f"v=DKIM1; k=rsa; p={public(rsa_key(2))}"]
    dns(zone)
    code, output = check_sender()
    assert code == 1
    assert line(output, "MISALIGNED  DKIM s1._domainkey.acme.example: the published key is not the "
                        "one we sign with")
    assert f'publish: s1._domainkey.acme.example. TXT "v=DKIM1; k=rsa; p={public(rsa_key(1))}"' in output
    # DMARC is aligned through DKIM, but passes only once the key record is fixed (SPF aligns too)
    assert line(output, "OK          DMARC")


def test_dmarc_reject_with_neither_dkim_nor_spf_aligned_is_misaligned(db, dns, probe, platform):
    """The tenant sends from its own domain, signed by the platform's key and with bounces to the
    platform's domain: every message fails DMARC, and p=reject has receivers refuse it."""
    platform.DKIM_DOMAIN = "platform.example"
    platform.BOUNCE_DOMAIN = "bounces.platform.example"
    AccountFactory(name="Acme", slug="acme", from_email="news@acme.example")
    SendingDomain.objects.create(account=None, domain="platform.example", selector="zy1",
                                 algorithm=keys.RSA, private_key=rsa_key(3))
    zone = {
        "acme.example": ["v=spf1 include:_spf.relay.example -all"],
        "bounces.platform.example": ["v=spf1 include:_spf.relay.example -all"],
        "_spf.relay.example": ["v=spf1 ip4:203.0.113.0/24 -all"],
        "zy1._domainkey.platform.example": [f"v=DKIM1; k=rsa; p={public(rsa_key(3))}"],
        "_dmarc.acme.example": ["v=DMARC1; p=reject"],
    }
    dns(zone)
    code, output = check_sender()
    assert code == 1
    assert line(output, "OK          SPF (envelope sender, BOUNCE_DOMAIN) bounces.platform.example")
    assert line(output, "OK          DKIM zy1._domainkey.platform.example")
    dmarc = line(output, "MISALIGNED  DMARC _dmarc.acme.example")
    assert ("From acme.example is aligned with neither DKIM (d=platform.example) nor SPF (envelope "
            "@bounces.platform.example) under adkim=r, aspf=r") in dmarc
    assert "with p=reject, receivers reject it" in dmarc
    assert "publish: sign with a key of acme.example (a sending domain of the account)" in output
    assert "1 check to fix" in output


def test_an_http_site_url_has_no_one_click_unsubscribe(acme, dns, probe, platform):
    platform.SITE_URL = "http://growth.example.com"
    dns(good_zone())
    code, output = check_sender()
    assert code == 1
    assert line(output, "MISSING     One-click unsubscribe http://growth.example.com: SITE_URL is not "
                        "https")
    assert "publish: serve the site over HTTPS and set SITE_URL=https://<your host>" in output
    assert probe.urls == []  # nothing to probe


def test_an_unknown_account_is_an_error(db, dns, probe):
    dns({})
    with pytest.raises(CommandError, match="There is no account 'nobody'"):
        call_command("check_sender", "--account", "nobody", stdout=StringIO())


# --- the checks, one by one ----------------------------------------------------------------------


def test_an_ed25519_key_is_compared_by_its_raw_public_key(acme, dns, probe):
    signing = nacl.signing.SigningKey(bytes(range(32)))
    seed = base64.b64encode(bytes(signing)).decode()
    SendingDomain.objects.filter(account=acme).update(algorithm=keys.ED25519, private_key=seed)
    SendingDomain.objects.filter(account=acme).update(verified_at=timezone.now())  # the new key
    raw = base64.b64encode(bytes(signing.verify_key)).decode()
    zone = good_zone()
    zone["s1._domainkey.acme.example"] = [f"v=DKIM1; k=ed25519; p={raw}"]
    dns(zone)
    assert check_sender()[0] == 0
    zone["s1._domainkey.acme.example"] = [f"v=DKIM1; k=rsa; p={raw}"]
    dns(zone)
    code, output = check_sender()
    assert code == 1 and "k=rsa published, but the key is ed25519" in output


def test_a_revoked_or_absent_dkim_record_is_missing():
    key = dns_checks.DkimKey("acme.example", "s1", keys.RSA, rsa_key(1))
    assert dns_checks.check_dkim(StubResolver({}), key).status == dns_checks.MISSING
    revoked = StubResolver({"s1._domainkey.acme.example": ["v=DKIM1; k=rsa; p="]})
    check = dns_checks.check_dkim(revoked, key)
    assert check.status == dns_checks.MISSING and "revoked" in check.summary


def test_a_pkcs1_public_key_published_instead_of_spki_is_still_our_key():
    from dkim import crypto

    pem = rsa_key(1)
    numbers = crypto.parse_pem_private_key(pem.encode())
    pkcs1 = _der(0x30, b"".join(_der(0x02, v.to_bytes(v.bit_length() // 8 + 1, "big"))
                                for v in (numbers["modulus"], numbers["publicExponent"])))
    assert keys.same_key(base64.b64encode(pkcs1).decode(), public(pem), keys.RSA)
    assert not keys.same_key(public(rsa_key(2)), public(pem), keys.RSA)


def test_spf_that_does_not_authorize_the_relay_is_misaligned():
    resolver = StubResolver({"acme.example": ["v=spf1 ip4:198.51.100.0/24 mx -all"]},
                            mx={"acme.example": ["mx.acme.example"]},
                            addresses={"mx.acme.example": ["198.51.100.7"]})
    check = dns_checks.check_spf(resolver, "acme.example", relay_ips=[RELAY_IP])
    assert check.status == dns_checks.MISALIGNED
    assert f"does not authorize the relay's {RELAY_IP}" in check.summary
    assert check.publish == f"add ip4:{RELAY_IP} to the record at acme.example"


def test_spf_with_two_records_or_too_many_lookups_is_an_error_for_receivers():
    two = StubResolver({"acme.example": ["v=spf1 -all", "v=spf1 ip4:203.0.113.25 -all"]})
    assert dns_checks.check_spf(two, "acme.example").status == dns_checks.MISALIGNED
    chain = {f"l{i}.example": [f"v=spf1 include:l{i + 1}.example -all"] for i in range(12)}
    chain["acme.example"] = ["v=spf1 include:l0.example -all"]
    check = dns_checks.check_spf(StubResolver(chain), "acme.example")
    assert check.status == dns_checks.MISALIGNED and "more than 10 DNS lookups" in check.summary


@pytest.mark.parametrize("term", ["a/33", "mx//129", "a:mail.acme.example/99", "a/x"])
def test_spf_with_a_cidr_length_out_of_range_is_an_error_for_receivers_not_a_crash(term):
    resolver = StubResolver({"acme.example": [f"v=spf1 {term} ip4:{RELAY_IP} -all"]},
                            mx={"acme.example": ["mx.acme.example"]},
                            addresses={"acme.example": ["192.0.2.1"], "mx.acme.example": ["192.0.2.3"],
                                       "mail.acme.example": ["192.0.2.2"]})
    check = dns_checks.check_spf(resolver, "acme.example", relay_ips=[RELAY_IP])
    assert check.status == dns_checks.MISALIGNED
    assert f"{term} has no valid CIDR length" in check.summary


@pytest.mark.parametrize(("record", "relay"), [
    ("v=spf1 a/24//64 -all", "192.0.2.77"), ("v=spf1 a/24//64 -all", "2001:db8::77"),
    ("v=spf1 a//64 -all", "2001:db8::77"), ("v=spf1 mx/24 -all", "192.0.2.77"),
])
def test_spf_dual_cidr_lengths_authorize_the_networks_around_the_hosts(record, relay):
    """RFC 7208 5.6: /24 around each A record, /64 around each AAAA; 24//64 was read as none."""
    resolver = StubResolver({"acme.example": [record]}, mx={"acme.example": ["acme.example"]},
                            addresses={"acme.example": ["192.0.2.1", "2001:db8::1"]})
    check = dns_checks.check_spf(resolver, "acme.example", relay_ips=[relay])
    assert check.status == dns_checks.OK, (check.summary, check.details)


def test_a_lookup_that_times_out_is_an_error_not_a_pass(acme, dns, probe):
    dns(good_zone(), failing=("_dmarc.acme.example",))
    code, output = check_sender()
    assert code == 1
    assert line(output, "ERROR       DMARC _dmarc.acme.example: could not look it up")


@pytest.mark.parametrize(("answer", "status", "words"), [
    ((200, ""), "OK", "answers one-click POSTs"),
    ((403, ""), "MISALIGNED", "the POST is refused (403)"),
    ((404, ""), "MISALIGNED", "SITE_URL does not lead to this site"),
    ((301, "https://www.example.com/u/x/"), "WARN", "redirect (301 to https://www.example.com/u/x/)"),
    ((502, ""), "MISALIGNED", "the POST failed (502)"),
    (readiness.ProbeFailed("connection refused"), "MISSING", "not reachable: connection refused"),
])
def test_what_the_one_click_probe_makes_of_each_answer(probe, answer, status, words):
    probe.answer = answer
    check = readiness.check_one_click(probe)
    assert check.status == status and words in check.summary


@pytest.mark.parametrize(("from_domain", "other", "mode", "expected"), [
    ("acme.example", "acme.example", "s", True),
    ("mail.acme.example", "acme.example", "r", True),
    ("mail.acme.example", "acme.example", "s", False),
    ("news.acme.example", "bounces.acme.example", "r", True),
    ("acme.example", "platform.example", "r", False),
    ("shop.acme.co.uk", "acme.co.uk", "r", True),
    ("acme.co.uk", "other.co.uk", "r", False),
])
def test_dmarc_alignment(from_domain, other, mode, expected):
    assert dns_checks.aligned(from_domain, other, mode) is expected


def test_dmarc_found_at_the_organizational_domain_uses_its_subdomain_policy():
    resolver = StubResolver({"_dmarc.acme.example": ["v=DMARC1; p=reject; sp=none; adkim=s"]})
    policy, problems = dns_checks.dmarc_policy(resolver, "mail.acme.example")
    assert problems == [] and policy.policy == "none" and policy.adkim == "s"
    check = dns_checks.check_dmarc(resolver, "mail.acme.example", dkim_domains=["acme.example"],
                                   dkim_passes=True, envelope_domain="mail.acme.example",
                                   spf_passes=True)
    assert check.status == dns_checks.OK and "SPF @mail.acme.example" in check.details[1]


def test_cached_results_never_carry_a_private_key():
    import pickle

    key = dns_checks.DkimKey("acme.example", "s1", keys.RSA, rsa_key(1))
    assert "PRIVATE KEY" not in repr(key)
    assert pickle.loads(pickle.dumps(key)).private_key == ""


def test_a_key_not_verified_signs_nothing_and_says_so(acme, dns, probe, platform):
    platform.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"  # a path that signs
    SendingDomain.objects.filter(account=acme).update(verified_at=None)
    dns(good_zone())

    code, output = check_sender()

    assert code == 1, output
    assert line(output, "OK          DKIM s1._domainkey.acme.example: the published rsa key matches ours")
    assert "not verified: it signs no mail until “Verify in DNS” finds this record" in output
    assert line(output, "MISSING     DKIM acme.example: no DKIM key signs acme.example's mail")
    assert "publish the record it shows, then “Verify in DNS”" in output
