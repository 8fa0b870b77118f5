"""DKIM on the SMTP path: campaigns sent through the real worker to a loopback SMTP server arrive
signed with their tenant's key (or the platform's), and the signature verifies against the
public key a stub DNS serves; a broken key pauses its campaign and sends nothing unsigned; the
admin never shows a private key back. The keys under tests/fixtures/dkim are test keys only."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from email import message_from_bytes
from pathlib import Path

import dkim as dkimpy
import nacl.signing
import pytest
from django.core.mail import EmailMessage
from django.urls import reverse
from django.utils import timezone
from dkim import crypto as dkim_crypto

from growth.deliverability import keys
from growth.models import Campaign, Send, SendingDomain
from growth.sending import dkim
from growth.sending.rendering import CampaignContent, CampaignRenderer
from growth.sending.transports import Delivery, Outcome
from growth.sending.transports.django_mail import DjangoMailTransport
from growth.sending.worker import Worker
from tests.factories import AccountFactory, CampaignFactory
from tests.helpers import texts
from tests.scenarios import approved_campaign, operator, statuses
from tests.smtp import RecordingHandler, SMTPServer

KEYS = Path(__file__).parent / "fixtures" / "dkim"
RSA_KEY = (KEYS / "rsa2048.pem").read_text()
RSA_PKCS8_KEY = (KEYS / "rsa2048-pkcs8.pem").read_text()
SHORT_RSA_KEY = (KEYS / "rsa1024.pem").read_text()
ED25519_KEY = (KEYS / "ed25519.key").read_text()
ED25519_PEM = (KEYS / "ed25519.pem").read_text()
LONG_RSA_KEY = (KEYS / "rsa8192.pem").read_text()
KEY_OF = {dkim.RSA: RSA_KEY, dkim.ED25519: ED25519_KEY}
LISTED = {"from", "to", "subject", "date", "message-id", "list-unsubscribe",
          "list-unsubscribe-post", "mime-version", "content-type"}


# --- a loopback SMTP server that keeps the bytes as they came off the wire ---------------------


@dataclass
class RawRecordingHandler(RecordingHandler):
    raw: list[bytes] = field(default_factory=list)  # each DATA accepted, as received

    async def handle_DATA(self, server, session, envelope):
        reply = await super().handle_DATA(server, session, envelope)
        if reply.startswith("250"):
            with self.lock:
                self.raw.append(envelope.original_content)
        return reply


@pytest.fixture
def smtp_server():
    """conftest's loopback server (smtp_settings uses it), recording the raw bytes too."""
    server = SMTPServer()
    server.handler = RawRecordingHandler()
    server.start()
    yield server
    server.stop()


def damaged(key: str) -> str:
    """The key with one character changed near its end (its CRT parameters): it still parses."""
    at = len(key) * 17 // 20
    while not key[at].isalnum():
        at += 1
    return key[:at] + ("A" if key[at] != "A" else "B") + key[at + 1:]


def _der(tag: int, body: bytes) -> bytes:
    size = len(body).to_bytes((len(body).bit_length() + 7) // 8, "big")
    return bytes([tag]) + (bytes([len(body)]) if len(body) < 128 else bytes([0x80 | len(size)]) + size) + body


def unreduced(key: str) -> str:
    """The same RSA key with its CRT exponent dP grown by a multiple of p - 1: it still signs,
    and every signature raises to an exponent as long as the typed key makes it."""
    numbers = dkim_crypto.parse_pem_private_key(key.encode())
    numbers["exponent1"] += (numbers["prime1"] - 1) << 4000
    names = ("version", "modulus", "publicExponent", "privateExponent", "prime1", "prime2",
             "exponent1", "exponent2", "coefficient")
    der = _der(0x30, b"".join(_der(0x02, numbers[n].to_bytes(numbers[n].bit_length() // 8 + 1, "big"))
                              for n in names))
    body = base64.b64encode(der).decode()
    lines = [body[i:i + 64] for i in range(0, len(body), 64)]
    return "\n".join(["-----BEGIN RSA PRIVATE KEY-----", *lines, "-----END RSA PRIVATE KEY-----", ""])


def dns(*signers: dkim.Signer):
    """A stub of dkimpy's DNS lookup serving each signer's TXT record."""
    records = {signer.dns_name: signer.dns_record().encode() for signer in signers}

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        return records.get(name.decode().rstrip("."))

    return lookup


def tags(raw: bytes) -> dict[str, str]:
    """The DKIM-Signature's tags, whitespace removed."""
    value = message_from_bytes(raw)["DKIM-Signature"]
    pairs = (part.split("=", 1) for part in re.sub(r"\s+", "", value).split(";") if part)
    return {name: tag_value for name, tag_value in pairs}


def run_worker() -> Worker:
    worker = Worker(batch_size=7, tick=0.05, lease=30, until_idle=True)
    worker.run()
    return worker


def domain_of(account) -> str:
    return account.from_email.rpartition("@")[2]


def key_for(account, algorithm: str = dkim.RSA, *, selector: str = "zy1",
            key: str | None = None) -> SendingDomain:
    """The account's sending domain (its From's), verified in DNS: a tenant's key signs only
    once verified."""
    return SendingDomain.objects.create(account=account, domain=domain_of(account),
                                        selector=selector, algorithm=algorithm,
                                        private_key=key if key is not None else KEY_OF[algorithm],
                                        verified_at=timezone.now())


def signer_of(row: SendingDomain) -> dkim.Signer:
    return dkim.Signer.load(domain=row.domain, selector=row.selector, algorithm=row.algorithm,
                            private_key=row.private_key, source="test")


@pytest.fixture
def platform_key(settings, tmp_path):
    """The platform's key from settings, as a deployment sets it."""
    path = tmp_path / "dkim.pem"
    path.write_text(RSA_KEY)
    settings.DKIM_DOMAIN, settings.DKIM_SELECTOR = "growth.example", "platform1"
    settings.DKIM_PRIVATE_KEY_FILE, settings.DKIM_ALGORITHM = str(path), dkim.RSA
    return dkim.Signer.load(domain="growth.example", selector="platform1", algorithm=dkim.RSA,
                            private_key=RSA_KEY, source="test")


# --- end to end: the worker, the loopback server, dkimpy's verify ------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("algorithm", [dkim.RSA, dkim.ED25519])
def test_a_campaign_arrives_signed_and_verifies(smtp_settings, algorithm):
    campaign = approved_campaign(count=9)
    row = key_for(campaign.account, algorithm)
    lookup = dns(signer_of(row))

    run_worker()

    assert statuses(campaign) == {"sent": 9}
    raw = smtp_settings.handler.raw
    assert len(raw) == 9
    for message in raw:
        assert message.startswith(b"DKIM-Signature: ")
        assert dkimpy.verify(message, dnsfunc=lookup)
        signature = tags(message)
        assert (signature["d"], signature["s"], signature["a"]) == (row.domain, "zy1", algorithm)
        assert signature["c"] == "relaxed/relaxed"
        assert set(signature["h"].split(":")) == LISTED
        # the ones a later hop must not add a copy of are signed once more than they occur
        assert signature["h"].split(":").count("from") == 2
        assert signature["h"].split(":").count("list-unsubscribe-post") == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("algorithm", [dkim.RSA, dkim.ED25519])
def test_a_tampered_byte_in_the_body_or_a_signed_header_fails(smtp_settings, algorithm):
    campaign = approved_campaign(count=1)
    lookup = dns(signer_of(key_for(campaign.account, algorithm)))
    run_worker()
    (message,) = smtp_settings.handler.raw
    assert dkimpy.verify(message, dnsfunc=lookup)

    head, _, body = message.partition(b"\r\n\r\n")
    tampered_body = head + b"\r\n\r\n" + body.replace(b"Hi ", b"Hi!", 1)
    assert tampered_body != message and not dkimpy.verify(tampered_body, dnsfunc=lookup)
    tampered_subject = message.replace(b"\r\nSubject: Hello", b"\r\nSubject: Jello", 1)
    assert tampered_subject != message and not dkimpy.verify(tampered_subject, dnsfunc=lookup)
    one_click = message.replace(b"List-Unsubscribe=One-Click", b"List-Unsubscribe=One-Clack", 1)
    assert one_click != message and not dkimpy.verify(one_click, dnsfunc=lookup)
    second_from = b"From: ceo@bank.example\r\n" + message
    assert not dkimpy.verify(second_from, dnsfunc=lookup)
    # a header that is not signed may be added on the way (a relay's Received:)
    assert dkimpy.verify(b"Received: from relay\r\n" + message, dnsfunc=lookup)


@pytest.mark.django_db(transaction=True)
def test_each_tenant_signs_with_its_own_key_and_the_platform_key_signs_the_rest(
        smtp_settings, platform_key):
    own = approved_campaign(count=3)
    own_key = key_for(own.account, dkim.ED25519)
    other = approved_campaign(count=3)  # a tenant without a domain of its own
    mine, theirs = own.account, other.account
    lookup = dns(signer_of(own_key), platform_key)

    run_worker()

    assert statuses(own) == statuses(other) == {"sent": 3}
    by_tenant = {mine.from_email: set(), theirs.from_email: set()}
    for message in smtp_settings.handler.raw:
        assert dkimpy.verify(message, dnsfunc=lookup)
        parsed = message_from_bytes(message)
        by_tenant[re.search(r"<(.*)>", parsed["From"])[1]].add(
            (tags(message)["d"], tags(message)["s"]))
    assert by_tenant == {mine.from_email: {(domain_of(mine), "zy1")},
                         theirs.from_email: {("growth.example", "platform1")}}


@pytest.mark.django_db(transaction=True)
def test_a_broken_key_pauses_its_campaign_and_sends_nothing_unsigned(smtp_settings):
    broken = approved_campaign(count=4)
    key_for(broken.account, key=damaged(RSA_KEY))
    healthy = approved_campaign(count=5)
    lookup = dns(signer_of(key_for(healthy.account, dkim.ED25519)))

    run_worker()

    broken.refresh_from_db()
    assert broken.status == "paused"
    assert "DkimKeyError" in broken.pause_reason and domain_of(broken.account) in broken.pause_reason
    rows = Send.objects.filter(campaign=broken)
    assert {(r.status, r.attempts) for r in rows} == {("queued", 0)}
    assert statuses(healthy) == {"sent": 5}
    received = smtp_settings.handler.raw
    assert len(received) == 5 and all(dkimpy.verify(m, dnsfunc=lookup) for m in received)
    assert not any(domain_of(broken.account).encode() in m for m in received)


@pytest.mark.django_db(transaction=True)
def test_an_unreadable_platform_key_pauses_the_campaigns_that_need_it(smtp_settings, settings,
                                                                      platform_key):
    settings.DKIM_PRIVATE_KEY_FILE = "/nonexistent/dkim.pem"
    needs_platform = approved_campaign(count=2)
    own = approved_campaign(count=2)
    key_for(own.account, dkim.RSA)

    run_worker()

    needs_platform.refresh_from_db()
    assert needs_platform.status == "paused"
    assert "cannot be read" in needs_platform.pause_reason
    assert "/nonexistent/dkim.pem" in needs_platform.pause_reason
    assert statuses(own) == {"sent": 2}
    assert len(smtp_settings.handler.raw) == 2


@pytest.mark.django_db(transaction=True)
def test_without_any_key_mail_goes_out_unsigned_as_before(smtp_settings):
    campaign = approved_campaign(count=2)
    run_worker()
    assert statuses(campaign) == {"sent": 2}
    assert all(b"DKIM-Signature" not in m for m in smtp_settings.handler.raw)


# --- the transport: signed on the wire bytes, only over plain SMTP -----------------------------


def render(campaign, signer, *, email="reader@example.com", body_text=None):
    content = CampaignContent.of(campaign)
    if body_text is not None:
        content = CampaignContent(content.id, content.account_id, content.subject, body_text,
                                  content.body_html, content.from_email, content.from_name)
    return CampaignRenderer(content, signer=signer).render(
        job_id=f"campaign:{campaign.id}:1", email=email, subscriber_id=1)


@pytest.mark.django_db
def test_a_message_only_djangos_builder_makes_is_signed_on_its_bytes_too(smtp_settings):
    campaign = CampaignFactory()
    signer = dkim.Signer.load(domain="x.example", selector="s", algorithm=dkim.ED25519,
                              private_key=ED25519_KEY, source="test")
    message = render(campaign, signer, body_text="a line longer than SMTP allows: " + "x" * 1200)
    assert message.prebuilt is None  # Django's builder: quoted-printable

    with DjangoMailTransport() as transport:
        (outcome,) = transport.send_bulk([Delivery(1, "campaign:1:1", message)])

    assert outcome.kind == Outcome.SENT
    (raw,) = smtp_settings.handler.raw
    assert raw.startswith(b"DKIM-Signature: ") and dkimpy.verify(raw, dnsfunc=dns(signer))


@pytest.mark.django_db
def test_a_header_a_backend_adds_goes_out_under_the_signature(smtp_settings):
    campaign = CampaignFactory()
    signer = dkim.Signer.load(domain="x.example", selector="s", algorithm=dkim.RSA,
                              private_key=RSA_KEY, source="test")
    message = render(campaign, signer)
    message.add_header("X-Added-Late", "after rendering")

    with DjangoMailTransport() as transport:
        transport.send_bulk([Delivery(1, "campaign:1:1", message)])

    (raw,) = smtp_settings.handler.raw
    assert raw.startswith(b"DKIM-Signature: ") and b"\r\nX-Added-Late: after rendering\r\n" in raw
    assert dkimpy.verify(raw, dnsfunc=dns(signer))


@pytest.mark.django_db
def test_a_message_that_cannot_be_signed_fails_for_good_and_is_not_sent(smtp_settings):
    class Failing:
        def sign(self, data):
            raise dkimpy.ParameterError("no")

    message = render(CampaignFactory(), None)
    message.dkim_signer = Failing()
    with DjangoMailTransport() as transport:
        (outcome,) = transport.send_bulk([Delivery(1, "campaign:1:1", message)])
    assert outcome.kind == Outcome.PERMANENT and outcome.error.startswith("ValueError: DKIM signing")
    assert smtp_settings.handler.raw == []


@pytest.mark.django_db
def test_only_the_plain_smtp_path_signs_and_looks_keys_up(settings, django_assert_num_queries):
    campaign = CampaignFactory()
    key_for(campaign.account, dkim.ED25519)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    assert dkim.transport_signs()
    with django_assert_num_queries(1):  # one look-up per campaign's renderer, none per message
        renderer = CampaignRenderer(CampaignContent.of(campaign))
        for n in range(5):
            assert renderer.render(job_id=f"campaign:{campaign.id}:{n}", email=f"r{n}@example.com",
                                   subscriber_id=n).dkim_signer is renderer.signer
    assert renderer.signer is not None and renderer.signer.algorithm == dkim.ED25519

    for backend in ("anymail.backends.postmark.EmailBackend", "growth.sending.backends.resend.SMTPBackend",
                    "django.core.mail.backends.locmem.EmailBackend",
                    "django.core.mail.backends.filebased.EmailBackend"):
        settings.EMAIL_BACKEND = backend
        assert not dkim.transport_signs(), backend
        with django_assert_num_queries(0):
            assert CampaignRenderer(CampaignContent.of(campaign)).signer is None
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.SENDER_TRANSPORT = "growth.sending.transports.null.NullTransport"
    assert not dkim.transport_signs()


def test_a_plain_email_message_goes_the_way_it_always_went(smtp_settings):
    with DjangoMailTransport() as transport:
        (outcome,) = transport.send_bulk([Delivery(1, "campaign:1:1", EmailMessage(
            "Hi", "Body", "news@tenant.example", ["a@example.com"],
            headers={"Message-ID": "<campaign.1.1@test>"}))])
    assert outcome.kind == Outcome.SENT
    (raw,) = smtp_settings.handler.raw
    assert b"DKIM-Signature" not in raw
    assert smtp_settings.handler.accepted[0].envelope_from == "news@tenant.example"


# --- which key signs what ----------------------------------------------------------------------


@pytest.mark.django_db
def test_the_most_specific_domain_of_the_tenant_or_the_platform_signs(settings):
    tenant = AccountFactory(from_email="news@mail.acme.example")
    stranger = AccountFactory(from_email="hello@acme.example")
    SendingDomain.objects.create(account=tenant, domain="acme.example", selector="parent",
                                 algorithm=dkim.ED25519, private_key=ED25519_KEY,
                                 verified_at=timezone.now())
    assert dkim.signer_for(account_id=tenant.id, from_email=tenant.from_email).selector == "parent"
    # another tenant's domain never signs for anyone else: no key, no platform key
    assert dkim.signer_for(account_id=stranger.id, from_email=stranger.from_email) is None

    SendingDomain.objects.create(account=None, domain="mail.acme.example", selector="platform",
                                 algorithm=dkim.ED25519, private_key=ED25519_KEY)
    assert dkim.signer_for(account_id=tenant.id, from_email=tenant.from_email).selector == "platform"


@pytest.mark.django_db
@pytest.mark.parametrize("tenants_first", [True, False])
def test_of_one_domain_keyed_by_the_tenant_and_the_platform_the_tenants_own_signs(tenants_first):
    tenant = AccountFactory(from_email="news@acme.example")
    owners = [tenant, None] if tenants_first else [None, tenant]
    for owner in owners:
        SendingDomain.objects.create(account=owner, domain="acme.example",
                                     selector="own" if owner else "platform",
                                     algorithm=dkim.ED25519, private_key=ED25519_KEY,
                                     verified_at=timezone.now() if owner else None)
    assert dkim.signer_for(account_id=tenant.id, from_email=tenant.from_email).selector == "own"


@pytest.mark.django_db
def test_the_platform_key_may_live_in_the_admin_and_must_exist_somewhere(settings):
    tenant = AccountFactory()
    settings.DKIM_DOMAIN, settings.DKIM_PRIVATE_KEY_FILE = "growth.example", ""
    with pytest.raises(dkim.DkimKeyError, match=r"DKIM_DOMAIN is growth\.example but there is no key"):
        dkim.signer_for(account_id=tenant.id, from_email=tenant.from_email)
    SendingDomain.objects.create(account=None, domain="growth.example", selector="p2",
                                 algorithm=dkim.RSA, private_key=RSA_PKCS8_KEY)
    signer = dkim.signer_for(account_id=tenant.id, from_email=tenant.from_email)
    assert (signer.domain, signer.selector) == ("growth.example", "p2")


@pytest.mark.parametrize(("key", "algorithm", "says"), [
    (SHORT_RSA_KEY, dkim.RSA, "the RSA key has 1024 bits; 2048 or more are required"),
    # typed by a tenant, signed with for each message on the worker every tenant shares
    (LONG_RSA_KEY, dkim.RSA, "the RSA key has 8192 bits; at most 4096 are allowed"),
    (unreduced(RSA_KEY), dkim.RSA, "the RSA key is not in its usual form"),
    (ED25519_KEY, dkim.RSA, "an RSA key must be in PEM form"),
    (RSA_KEY, dkim.ED25519, "this PEM is not an Ed25519 private key"),
    (ED25519_PEM, dkim.RSA, "this is not an RSA private key"),
    ("hello", dkim.ED25519, "an Ed25519 key is the base64 of its 32-byte private key"),
    ("aGVsbG8=", dkim.ED25519, "an Ed25519 private key is 32 bytes, this is 5"),
    (damaged(RSA_KEY), dkim.RSA, "does not verify against its public key"),
    ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----",
     dkim.RSA, "encrypted"),
])
def test_a_key_that_cannot_sign_is_refused_with_the_reason(key, algorithm, says):
    with pytest.raises(dkim.DkimKeyError, match=re.escape(says)):
        dkim.load_private_key(key, algorithm)


def test_nacls_64_byte_ed25519_key_signs_as_its_seed_and_the_readiness_check_agrees():
    """The readiness check read NaCl's form (seed, then public key) and showed it ready; the
    signer refused it, and every campaign that needed it paused."""
    seed = base64.b64decode(ED25519_KEY)
    nacl_form = base64.b64encode(seed + bytes(nacl.signing.SigningKey(seed).verify_key)).decode()
    assert dkim.load_private_key(nacl_form, dkim.ED25519) == dkim.load_private_key(ED25519_KEY,
                                                                                   dkim.ED25519)
    assert keys.expected_public_key(nacl_form, keys.ED25519) == keys.expected_public_key(
        ED25519_KEY, keys.ED25519)


@pytest.mark.parametrize(("key", "algorithm"), [
    (RSA_KEY, dkim.RSA), (RSA_PKCS8_KEY, dkim.RSA), (ED25519_KEY, dkim.ED25519),
    (ED25519_PEM, dkim.ED25519), (RSA_KEY.replace("\n", "\r\n"), dkim.RSA),
])
def test_keys_load_in_the_forms_people_paste_them(key, algorithm):
    loaded = dkim.load_private_key(key, algorithm)
    assert dkim.load_private_key(loaded, algorithm) == loaded  # stored as loaded: stable


def test_the_dns_record_is_the_public_key_as_openssl_gives_it():
    # the public halves, as `openssl rsa -pubout` / `openssl pkey -pubout` print them
    assert dkim.dns_record(dkim.load_private_key(ED25519_PEM, dkim.ED25519), dkim.ED25519) == (
        "v=DKIM1; k=ed25519; p=nzJTxrufW7XEHtJGwYHz3K9zSidrqpG81xitSOA8XxA=")
    record = dkim.dns_record(dkim.load_private_key(RSA_KEY, dkim.RSA), dkim.RSA)
    assert record.startswith("v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAnCxG")
    assert record.endswith("AQAB")  # e = 65537
    assert dkim.zone_strings(record).count('"') == 4  # longer than one 255-character string


# --- the admin ---------------------------------------------------------------------------------

ADD = reverse("admin:growth_sendingdomain_add")


def change_url(row: SendingDomain) -> str:
    return reverse("admin:growth_sendingdomain_change", args=[row.pk])


def key_material(key: str) -> list[str]:
    """Pieces of a private key that would give it away if a page showed them: of an RSA key,
    past its modulus and public exponent (public, and shown in the DNS record)."""
    body = "".join(line for line in key.splitlines() if not line.startswith("-----"))
    private = body[len(body) * 2 // 5:] if len(body) > 400 else body
    return [private[i:i + 24] for i in range(0, len(private) - 24, 24)] + ["PRIVATE KEY"]


def form(row: SendingDomain | None = None, **changes) -> dict:
    data = {"account": "", "domain": "", "selector": "", "algorithm": dkim.RSA, "private_key": ""}
    if row is not None:
        data.update(account=row.account_id or "", domain=row.domain, selector=row.selector,
                    algorithm=row.algorithm)
    data.update(changes)
    return data


@pytest.mark.django_db
def test_a_superuser_keys_the_platforms_domain_and_never_sees_the_key_again(admin_client):
    response = admin_client.post(ADD, form(domain="Growth.Example.", selector="zy1",
                                           private_key=RSA_KEY.replace("\n", "\r\n")))
    assert response.status_code == 302, texts(response)
    row = SendingDomain.objects.get()
    assert (row.account, row.domain, row.private_key) == (None, "growth.example", RSA_KEY)

    page = admin_client.get(change_url(row)).content.decode()
    assert not any(piece in page for piece in key_material(RSA_KEY))
    record = re.search(r'<code class="dkim-record"[^>]*>(.*?)</code>', page)[1]
    assert record == signer_of(row).dns_record()
    assert "zy1._domainkey.growth.example" in page
    # what the page says to publish verifies what the key signs
    signed = signer_of(row).sign(b"From: a@growth.example\r\nSubject: x\r\n\r\nbody\r\n")
    assert dkimpy.verify(signed, dnsfunc=lambda name, timeout=5: record.encode())
    assert not any(piece in admin_client.get(reverse("admin:growth_sendingdomain_changelist"))
                   .content.decode() for piece in key_material(RSA_KEY))


@pytest.mark.django_db
def test_a_blank_key_on_a_change_keeps_the_stored_one(admin_client, tenant):
    row = key_for(tenant, dkim.RSA)
    response = admin_client.post(change_url(row), form(row, selector="zy2"))
    assert response.status_code == 302, texts(response)
    row.refresh_from_db()
    assert (row.selector, row.private_key) == ("zy2", RSA_KEY)

    response = admin_client.post(change_url(row), form(row, private_key=RSA_PKCS8_KEY))
    assert response.status_code == 302, texts(response)
    row.refresh_from_db()
    assert row.private_key == dkim.load_private_key(RSA_PKCS8_KEY, dkim.RSA)


@pytest.mark.django_db
@pytest.mark.parametrize(("key", "algorithm", "says"), [
    (SHORT_RSA_KEY, dkim.RSA, "This key cannot sign: the RSA key has 1024 bits; 2048 or more"),
    ("not a key", dkim.RSA, "This key cannot sign: an RSA key must be in PEM form"),
    (RSA_KEY, dkim.ED25519, "This key cannot sign: this PEM is not an Ed25519 private key"),
    ("", dkim.RSA, "Paste the domain's private key."),
])
def test_a_bad_or_short_key_is_refused_with_a_message_and_not_echoed(admin_client, key,
                                                                     algorithm, says):
    response = admin_client.post(ADD, form(domain="growth.example", selector="zy1",
                                           algorithm=algorithm, private_key=key))
    assert response.status_code == 200
    assert says in html.unescape(response.content.decode())
    assert not SendingDomain.objects.exists()
    if key.startswith("-----"):
        assert not any(piece in response.content.decode() for piece in key_material(key))


@pytest.mark.django_db
def test_changing_the_algorithm_without_a_new_key_is_refused(admin_client, tenant):
    row = key_for(tenant, dkim.RSA)
    response = admin_client.post(change_url(row), form(row, algorithm=dkim.ED25519))
    assert response.status_code == 200
    assert "The stored key cannot sign with ed25519-sha256" in response.content.decode()
    row.refresh_from_db()
    assert row.algorithm == dkim.RSA


@pytest.mark.django_db
def test_a_tenant_operator_manages_its_own_domains_only(client, staff, tenant, other_tenant):
    theirs = key_for(other_tenant, dkim.ED25519)
    platform = SendingDomain.objects.create(account=None, domain="growth.example", selector="p",
                                            algorithm=dkim.ED25519, private_key=ED25519_KEY)
    assert client.get(change_url(theirs)).status_code == 404
    assert client.get(change_url(platform)).status_code == 404
    listing = client.get(reverse("admin:growth_sendingdomain_changelist")).content.decode()
    assert "growth.example" not in listing and domain_of(other_tenant) not in listing

    # the platform's domain is not theirs to key; an account is required, and only theirs
    refused = client.post(ADD, form(domain="news.example", selector="s", algorithm=dkim.ED25519,
                                    private_key=ED25519_KEY))
    assert refused.status_code == 200 and "This field is required." in refused.content.decode()
    refused = client.post(ADD, form(account=other_tenant.id, domain="news.example", selector="s",
                                    algorithm=dkim.ED25519, private_key=ED25519_KEY))
    assert refused.status_code == 200 and "Select a valid choice." in refused.content.decode()
    added = client.post(ADD, form(account=tenant.id, domain="news.example", selector="s",
                                  algorithm=dkim.ED25519, private_key=ED25519_PEM))
    assert added.status_code == 302, texts(added)
    mine = SendingDomain.objects.get(domain="news.example")
    assert mine.account == tenant
    page = client.get(change_url(mine)).content.decode()
    assert signer_of(mine).dns_record() in page
    assert not any(piece in page for piece in [*key_material(ED25519_PEM), mine.private_key])


@pytest.mark.django_db
def test_a_viewer_reads_the_dns_record_but_never_the_key(client, tenant, other_tenant):
    client.force_login(operator(other_tenant, viewer_of=(tenant,)))
    row = key_for(tenant, dkim.RSA)
    page = client.get(change_url(row))
    assert page.status_code == 200
    body = page.content.decode()
    assert signer_of(row).dns_record() in body and 'name="_save"' not in body
    assert not any(piece in body for piece in key_material(RSA_KEY))
    assert client.post(change_url(row), form(row, selector="x")).status_code == 403


@pytest.mark.django_db
def test_one_key_per_domain(admin_client, tenant):
    key_for(tenant, dkim.ED25519)
    response = admin_client.post(ADD, form(account=tenant.id, domain=domain_of(tenant).upper(),
                                           selector="again", algorithm=dkim.ED25519,
                                           private_key=ED25519_KEY))
    assert response.status_code == 200
    assert f"{domain_of(tenant)} already has a key" in response.content.decode()


@pytest.mark.django_db
def test_a_domain_another_tenant_claimed_first_is_still_its_owners_to_key(client, tenant,
                                                                           other_tenant):
    """Unique across tenants, the first to claim a domain kept its owner from adding a key for
    it, and the owner's error said that someone had."""
    squatter = key_for(other_tenant, dkim.RSA)
    squatter.domain = domain_of(tenant)
    squatter.save()
    client.force_login(operator(tenant))

    response = client.post(ADD, form(account=tenant.id, domain=domain_of(tenant), selector="zy1",
                                     algorithm=dkim.ED25519, private_key=ED25519_KEY))

    assert response.status_code == 302, response.content.decode()
    own = SendingDomain.objects.get(account=tenant)
    SendingDomain.objects.filter(id=own.id).update(verified_at=timezone.now())  # as in DNS
    signer = dkim.signer_for(account_id=tenant.id, from_email=tenant.from_email)
    assert signer.dns_record() == signer_of(own).dns_record() != signer_of(squatter).dns_record()


@pytest.mark.django_db(transaction=True)
def test_a_campaign_paused_for_its_key_is_sent_signed_once_the_key_is_fixed(smtp_settings):
    campaign = approved_campaign(count=3)
    row = key_for(campaign.account, dkim.ED25519, key="bm90IGEga2V5")
    run_worker()
    campaign.refresh_from_db()
    assert campaign.status == "paused" and "32 bytes" in campaign.pause_reason

    SendingDomain.objects.filter(id=row.id).update(private_key=ED25519_KEY)
    # a new key is verified again (its record published) before it signs
    SendingDomain.objects.filter(id=row.id).update(verified_at=timezone.now())
    assert Campaign.objects.resume(campaign_id=campaign.id)
    run_worker()
    assert statuses(campaign) == {"sent": 3}
    row.refresh_from_db()
    assert all(dkimpy.verify(m, dnsfunc=dns(signer_of(row)))
               for m in smtp_settings.handler.raw)


@pytest.mark.django_db
@pytest.mark.parametrize("who", ["superuser", "staff editor"])
def test_hostile_values_in_the_domain_form_never_answer_5xx(client, tenant, who, django_user_model):
    from tests.test_hostile_input import HOSTILE

    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw")
                       if who == "superuser" else operator(tenant))
    row = key_for(tenant, dkim.RSA)
    for url in (ADD, change_url(row)):
        for value in HOSTILE:
            response = client.post(url, dict.fromkeys(form(), value))
            assert response.status_code < 500, (url, value[:40])
        for key in ("-----BEGIN A-----\n" * 5000, "=" * 70_000, "🙂" * 500, "\x00"):
            response = client.post(url, form(row, domain="fresh.example", private_key=key))
            assert response.status_code == 200 and 'class="errorlist' in response.content.decode()
    row.refresh_from_db()
    assert row.private_key == RSA_KEY


def _pkcs8_with_a_null_of_length_one() -> str:
    oid = bytes.fromhex("06092a864886f70d010101")  # rsaEncryption
    algorithm = b"\x30" + bytes([len(oid) + 3]) + oid + b"\x05\x01\x00"  # NULL, length 1
    inner = b"\x02\x01\x00" + algorithm + b"\x04\x00"
    der = b"\x30" + bytes([len(inner)]) + inner
    return ("-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(der).decode()
            + "\n-----END PRIVATE KEY-----\n")


@pytest.mark.django_db
def test_a_damaged_rsa_key_is_refused_with_a_message_not_a_500(client):
    """dkimpy's ASN.1 parser asserts that a NULL is empty."""
    from django.test import Client

    from tests.scenarios import operator

    tenant = AccountFactory()
    client = Client(raise_request_exception=False)
    client.force_login(operator(tenant))
    response = client.post(reverse("admin:growth_sendingdomain_add"), {
        "account": tenant.pk, "domain": "news.example", "selector": "s",
        "algorithm": "rsa-sha256", "private_key": _pkcs8_with_a_null_of_length_one()})
    assert response.status_code == 200, response.status_code
    assert "not an RSA private key" in response.content.decode()
    assert not SendingDomain.objects.exists()
