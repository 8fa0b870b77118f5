"""DKIM signatures (RFC 6376; Ed25519: RFC 8463) for the plain SMTP path, with dkimpy.

Which key signs a campaign's mail, looked up once per campaign by its renderer (one query):

1. a sending domain whose domain is the From address's domain or a parent of it, the most
   specific one: aligned with From, as DMARC wants. It is the tenant's own (growth_sending_domains,
   its account), *verified* (``verified_at``: the DNS published its key when last checked,
   ``growth.deliverability.sender_domains``), or a platform sending domain (no account: tenants
   that send from an address of the platform's domain); for the same name, the tenant's own. A
   tenant's key not verified is passed over as if it were not there: receivers would find no
   public key for its signature, which then fails, where the platform's key signs validly;
2. else the platform's key, ``DKIM_DOMAIN``: from ``DKIM_PRIVATE_KEY_FILE`` (with
   ``DKIM_SELECTOR`` and ``DKIM_ALGORITHM``), or, without a file, the platform sending domain
   of that name in the admin. It signs as d=DKIM_DOMAIN: a valid signature that builds the
   platform's reputation, though not aligned with a tenant's own From domain;
3. else nothing: the mail goes out unsigned, as without DKIM at all.

A key that is there but cannot sign (not a key, the wrong algorithm, an RSA key under 2048
bits, a key file that cannot be read) raises ``DkimKeyError`` where it is loaded, i.e. when the
worker builds the campaign's renderer: the worker's containment pauses that campaign with the
reason, before any of its rows is handed over, and never sends its mail unsigned.

Only the plain SMTP path signs (``transport_signs``): django-anymail's ESPs sign with their own
keys, and the console and file backends deliver nowhere. The signature is made once per message,
on the very bytes handed to smtplib (``Signer.sign``, called by the Django mail transport), and
covers ``SIGNED_HEADERS``; those that a later hop must not add a second copy of are signed once
more than they occur ("oversigned"), so that an added From or Subject breaks the signature.

A changed key reaches a running worker with the campaigns it starts after the change; rotate by
publishing a new selector beside the old one (RFC 6376 §3.1) and retiring the old record once the
workers have moved on.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from pathlib import Path

import dkim
from django.conf import settings
from django.db.models import Q
from dkim import crypto as dkim_crypto
from dkim.asn1 import ASN1FormatError

RSA = "rsa-sha256"
ED25519 = "ed25519-sha256"
ALGORITHMS = (RSA, ED25519)
MIN_RSA_BITS = 2048
# RFC 8301 §3.2: receivers verify keys of up to 4096 bits. Each message is signed in Python's
# pow() on the worker every tenant shares: 7 ms at 2048 bits, 40 ms at 4096, 2.4 s at 16384.
MAX_RSA_BITS = 4096
MAX_KEY_CHARS = 16_000  # an RSA-8192 PEM is ~6,400: anything longer is not a key
CANONICALIZE = (b"relaxed", b"relaxed")
SIGNED_HEADERS = ("From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe",
                  "List-Unsubscribe-Post", "MIME-Version", "Content-Type")
# Signed once more than they occur: a copy added on the way breaks the signature (RFC 6376 §8.15).
OVERSIGNED = ("From", "To", "Subject", "Date", "Message-ID", "List-Unsubscribe",
              "List-Unsubscribe-Post")
INCLUDE_HEADERS = tuple(name.lower().encode() for name in (*SIGNED_HEADERS, *OVERSIGNED))
_PROBE = (b"From: probe@probe.invalid\r\nTo: probe@probe.invalid\r\nSubject: probe\r\n"
          b"Date: Thu, 01 Jan 2026 00:00:00 +0000\r\nMessage-ID: <probe@probe.invalid>\r\n"
          b"List-Unsubscribe: <https://probe.invalid/u/>\r\n"
          b"List-Unsubscribe-Post: List-Unsubscribe=One-Click\r\nMIME-Version: 1.0\r\n"
          b"Content-Type: text/plain\r\n\r\nprobe\r\n")
_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.DOTALL)
_ED25519_PKCS8_PREFIX = bytes.fromhex("302e020100300506032b657004220420")  # then the 32-byte seed
_RSA_ALGORITHM_ID = bytes.fromhex("300d06092a864886f70d0101010500")  # rsaEncryption, NULL


class DkimKeyError(Exception):
    """A DKIM key that is configured but cannot sign; the message says which and why."""


@dataclass(frozen=True)
class Signer:
    """One loaded, checked key: ``sign`` puts a DKIM-Signature on a message's bytes."""

    domain: str
    selector: str
    algorithm: str
    private_key: str = field(repr=False)  # normalised: PEM (RSA), base64 seed (Ed25519)
    source: str = ""  # where it came from, for log lines and errors

    @classmethod
    def load(cls, *, domain: str, selector: str, algorithm: str, private_key: str | bytes,
             source: str) -> Signer:
        """Check the key (it parses, it is long enough, a probe signature verifies against its
        own public key); raise DkimKeyError saying what is wrong."""
        where = f"the DKIM key of {domain or '?'} (selector {selector or '?'}, {source})"
        if not domain or not selector:
            raise DkimKeyError(f"{where}: a domain and a selector are needed")
        try:
            key = load_private_key(private_key, algorithm)
        except DkimKeyError as exc:
            raise DkimKeyError(f"{where} cannot sign: {exc}") from None
        return cls(domain.lower().rstrip("."), selector, algorithm, key, source)

    @property
    def dns_name(self) -> str:
        return f"{self.selector}._domainkey.{self.domain}"

    def dns_record(self) -> str:
        return dns_record(self.private_key, self.algorithm)

    def signature(self, message: bytes) -> bytes:
        """The DKIM-Signature header (CRLF-terminated) for ``message`` (CRLF bytes)."""
        return dkim.sign(message, self.selector.encode(), self.domain.encode(),
                         self.private_key.encode(), canonicalize=CANONICALIZE,
                         signature_algorithm=self.algorithm.encode(),
                         include_headers=list(INCLUDE_HEADERS), linesep=b"\r\n")

    def sign(self, message: bytes) -> bytes:
        """``message`` with its DKIM-Signature header first."""
        return self.signature(message) + message


# --- keys ------------------------------------------------------------------------------------


def load_private_key(text: str | bytes, algorithm: str) -> str:
    """Return the key in the form dkimpy signs with (RSA: PEM, PKCS#1 or PKCS#8; Ed25519: the
    base64 of the 32-byte seed, also accepted as OpenSSL's PKCS#8 PEM), after checking that it
    signs: raise DkimKeyError otherwise."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise DkimKeyError("the key is not text (PEM or base64)") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
    if not text:
        raise DkimKeyError("no key")
    if len(text) > MAX_KEY_CHARS:
        raise DkimKeyError(f"{len(text):,} characters is too long for a key")
    if "ENCRYPTED" in text:
        raise DkimKeyError("the key is encrypted: give it without a passphrase")
    if algorithm == RSA:
        key = _rsa_pem(text)
    elif algorithm == ED25519:
        key = base64.b64encode(ed25519_seed(text)).decode("ascii")
    else:
        raise DkimKeyError(f"unknown algorithm {algorithm!r} (one of {', '.join(ALGORITHMS)})")
    _probe(key, algorithm)
    return key


def _rsa_pem(text: str) -> str:
    match = _PEM.search(text)
    if match is None:
        raise DkimKeyError("an RSA key must be in PEM form (-----BEGIN RSA PRIVATE KEY----- "
                           "or -----BEGIN PRIVATE KEY-----)")
    if match[1] not in ("RSA PRIVATE KEY", "PRIVATE KEY"):
        raise DkimKeyError(f"a {match[1]} is not an RSA private key")
    body = "".join(match[2].split())
    try:
        der = base64.b64decode(body, validate=True)
        key = dkim_crypto.parse_private_key(der)
    except (binascii.Error, ValueError, IndexError, dkim_crypto.UnparsableKeyError,
            ASN1FormatError, AssertionError):  # dkimpy's parser asserts on a NULL with content
        raise DkimKeyError("this is not an RSA private key (for an Ed25519 key, choose the "
                           "Ed25519 algorithm)") from None
    bits = key["modulus"].bit_length()
    if bits < MIN_RSA_BITS:
        raise DkimKeyError(f"the RSA key has {bits} bits; {MIN_RSA_BITS} or more are required "
                           "(RFC 8301)")
    if bits > MAX_RSA_BITS:
        raise DkimKeyError(f"the RSA key has {bits} bits; at most {MAX_RSA_BITS} are allowed "
                           "(RFC 8301: receivers need not verify a longer one)")
    if key["prime1"] * key["prime2"] != key["modulus"]:
        raise DkimKeyError("the RSA key is damaged (its primes do not make its modulus)")
    if not (key["exponent1"] < key["prime1"] and key["exponent2"] < key["prime2"]
            and key["publicExponent"] < key["modulus"]):
        # still a valid key, but each signature would raise to an exponent as long as it likes
        raise DkimKeyError("the RSA key is not in its usual form (an exponent larger than its "
                           "prime or modulus)")
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {match[1]}-----", *lines, f"-----END {match[1]}-----", ""])


def ed25519_seed(text: str) -> bytes:
    """The 32-byte private key of an Ed25519 key as typed: the base64 of the seed (dkimpy's
    form) or of seed and public key (NaCl's 64 bytes), or OpenSSL's PKCS#8 PEM of it."""
    match = _PEM.search(text)
    try:
        raw = base64.b64decode("".join((match[2] if match else text).split()), validate=True)
    except (binascii.Error, ValueError):
        raise DkimKeyError("an Ed25519 key is the base64 of its 32-byte private key (or "
                           "OpenSSL's PEM of it)") from None
    if match is not None:
        if not (raw.startswith(_ED25519_PKCS8_PREFIX) and len(raw) == len(_ED25519_PKCS8_PREFIX) + 32):
            raise DkimKeyError("this PEM is not an Ed25519 private key (for an RSA key, choose "
                               "the RSA algorithm)")
        raw = raw[len(_ED25519_PKCS8_PREFIX):]
    if len(raw) == 64:  # NaCl's secret key: the seed, then the public key
        raw = raw[:32]
    if len(raw) != 32:
        raise DkimKeyError(f"an Ed25519 private key is 32 bytes, this is {len(raw)}")
    return raw


def _probe(key: str, algorithm: str) -> None:
    """Sign a probe message and verify it against the key's own public key."""
    record = dns_record(key, algorithm).encode()
    try:
        signature = dkim.sign(_PROBE, b"probe", b"probe.invalid", key.encode(),
                              canonicalize=CANONICALIZE, signature_algorithm=algorithm.encode(),
                              include_headers=list(INCLUDE_HEADERS))
    except dkim.DKIMException as exc:
        raise DkimKeyError(f"dkimpy cannot sign with it: {exc}") from None
    if not dkim.verify(signature + _PROBE, dnsfunc=lambda name, timeout=5: record):
        raise DkimKeyError("a signature made with it does not verify against its public key")


# --- the DNS record --------------------------------------------------------------------------


def public_key(private_key: str, algorithm: str) -> str:
    """The base64 public key that the DNS record's p= carries (RSA: SubjectPublicKeyInfo DER,
    as ``openssl rsa -pubout`` gives it; Ed25519: the raw 32 bytes, RFC 8463)."""
    if algorithm == ED25519:
        import nacl.signing

        seed = base64.b64decode(private_key)
        return base64.b64encode(bytes(nacl.signing.SigningKey(seed).verify_key)).decode("ascii")
    key = dkim_crypto.parse_pem_private_key(private_key.encode())
    spki = rsa_public_key_info(key["modulus"], key["publicExponent"])
    return base64.b64encode(spki).decode("ascii")


def rsa_public_key_info(modulus: int, exponent: int) -> bytes:
    """The SubjectPublicKeyInfo DER of an RSA public key: what p= carries for k=rsa."""
    rsa_public_key = _der(0x30, _der_int(modulus) + _der_int(exponent))
    return _der(0x30, _RSA_ALGORITHM_ID + _der(0x03, b"\x00" + rsa_public_key))


def dns_record(private_key: str, algorithm: str) -> str:
    """The TXT record to publish at <selector>._domainkey.<domain>."""
    kind = "ed25519" if algorithm == ED25519 else "rsa"
    return f"v=DKIM1; k={kind}; p={public_key(private_key, algorithm)}"


def zone_strings(record: str, size: int = 255) -> str:
    """The record as a zone file's TXT data: quoted strings of at most 255 characters (an
    RSA-2048 record is longer than one string may be)."""
    return " ".join(f'"{record[i:i + size]}"' for i in range(0, len(record), size))


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    length = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(length)]) + length + content


def _der_int(value: int) -> bytes:
    return _der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))  # a leading 0 bit


# --- which key signs a campaign -------------------------------------------------------------


def transport_signs() -> bool:
    """Whether the configured path signs: the Django mail transport over Django's own SMTP
    backend (what its ``_plain_smtp`` hands raw bytes to smtplib for)."""
    from django.core.mail.backends import smtp
    from django.utils.module_loading import import_string

    from growth.sending.transports.django_mail import DjangoMailTransport

    try:
        transport = import_string(settings.SENDER_TRANSPORT)
        backend = import_string(settings.EMAIL_BACKEND)
    except ImportError:
        return False
    return (isinstance(transport, type) and issubclass(transport, DjangoMailTransport)
            and isinstance(backend, type) and issubclass(backend, smtp.EmailBackend)
            and backend.send_messages is smtp.EmailBackend.send_messages)


def signer_for(*, account_id: int, from_email: str) -> Signer | None:
    """The signer of this tenant's mail from ``from_email`` (see the module's docstring for the
    order), None when no key applies; DkimKeyError when the key that applies cannot sign."""
    from growth.models import SendingDomain
    from growth.sending.sender import sender_address

    domain = sender_address(from_email).rpartition("@")[2].lower().rstrip(".")
    labels = domain.split(".")
    candidates = [".".join(labels[i:]) for i in range(len(labels) - 1)] or [domain]
    platform = settings.DKIM_DOMAIN
    names = [*candidates, platform] if platform else candidates
    # A platform row (no account) signs verified or not, as DKIM_PRIVATE_KEY_FILE does: only the
    # platform's operator adds one and publishes its record (check_sender reads it), and the
    # sender rule lets tenants send from it unverified. Held to verified_at, the platform rows
    # that were never "Verified in DNS" would stop signing, or, for DKIM_DOMAIN, pause every
    # campaign that needs it (no key), on the day this shipped.
    rows = list(SendingDomain.objects
                .filter(Q(account_id=account_id, verified_at__isnull=False)
                        | Q(account__isnull=True), domain__in=names)
                .values("id", "account_id", "domain", "selector", "algorithm", "private_key"))
    tenants = {row["domain"]: row for row in rows if row["account_id"] is not None}
    platforms = {row["domain"]: row for row in rows if row["account_id"] is None}
    for name in candidates:  # the most specific first; of one name, the tenant's own
        row = tenants.get(name) or platforms.get(name)
        if row is not None:
            return _from_row(row)
    if not platform:
        return None
    if settings.DKIM_PRIVATE_KEY_FILE:
        return _from_settings()
    row = platforms.get(platform)
    if row is None:
        raise DkimKeyError(f"DKIM_DOMAIN is {platform} but there is no key for it: set "
                           "DKIM_PRIVATE_KEY_FILE (and DKIM_SELECTOR), or add the platform "
                           "sending domain in the admin")
    return _from_row(row)


def _from_row(row: dict) -> Signer:
    owner = "the platform's" if row["account_id"] is None else f"account {row['account_id']}'s"
    return Signer.load(domain=row["domain"], selector=row["selector"], algorithm=row["algorithm"],
                       private_key=row["private_key"],
                       source=f"{owner} sending domain #{row['id']} in the admin")


def _from_settings() -> Signer:
    path = Path(settings.DKIM_PRIVATE_KEY_FILE)
    source = f"DKIM_PRIVATE_KEY_FILE {path}"
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise DkimKeyError(f"the platform's DKIM key cannot be read ({source}): "
                           f"{exc.strerror or exc}") from None
    return Signer.load(domain=settings.DKIM_DOMAIN, selector=settings.DKIM_SELECTOR,
                       algorithm=settings.DKIM_ALGORITHM, private_key=text, source=source)
