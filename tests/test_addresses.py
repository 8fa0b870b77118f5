"""Email addresses: parsing, the dedup key ``email_lower``, and the models that store it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given, settings
from hypothesis import strategies as st

from growth.audience.addresses import (
    Address,
    _common_address,
    _validated,
    email_lower,
    on_the_wire,
    parse_address,
)
from growth.models import Subscriber, Suppression
from tests.factories import AccountFactory, SegmentFactory, SubscriberFactory


def test_surrounding_whitespace_is_trimmed_from_the_address_and_its_key():
    address = parse_address("  \tFoo.Bar@Example.COM \n")
    assert address == Address(email="Foo.Bar@Example.COM", email_lower="foo.bar@example.com")


def test_the_address_as_entered_keeps_its_case():
    assert parse_address("Foo@EXAMPLE.com").email == "Foo@EXAMPLE.com"


@pytest.mark.parametrize(("raw", "key"), [
    ("Foo@EXAMPLE.com", "foo@example.com"),
    ("already@lower.example", "already@lower.example"),
    ("JOSÉ@Bücher.DE", "josÉ@xn--bcher-kva.de"),
    ("ÄBC@x.de", "Äbc@x.de"),
    ("Pelé@Example.com", "pelé@example.com"),
    ("ΩMEGA@EXAMPLE.COM", "Ωmega@example.com"),
])
def test_key_lowercases_ascii_only_in_the_local_part_and_idna_encodes_the_domain(raw, key):
    assert parse_address(raw).email_lower == key
    assert email_lower(raw) == key


def test_non_ascii_local_part_characters_are_kept_exactly():
    key = email_lower("JOSÉ@example.com")
    assert key.startswith("josÉ@")
    assert key != "josé@example.com"


def test_unicode_domain_is_stored_as_lowercase_punycode():
    assert email_lower("user@BÜCHER.example") == "user@xn--bcher-kva.example"
    assert email_lower("user@bücher.example") == email_lower("USER@Bücher.Example")


@pytest.mark.parametrize("raw", ["bad@", "", "no-at-sign", "a@b@c", "@example.com",
                                 "a b@c.example"])
def test_invalid_addresses_raise_a_validation_error_naming_the_address(raw):
    with pytest.raises(ValidationError) as caught:
        parse_address(raw)
    assert caught.value.code == "invalid_email"
    (message,) = caught.value.messages
    assert repr(raw) in message
    assert "not a valid email address" in message


def test_email_lower_raises_the_same_validation_error():
    with pytest.raises(ValidationError, match="no-at-sign"):
        email_lower("no-at-sign")


@pytest.mark.parametrize("raw", [
    "a@example.com\nBcc: x@evil.example",
    "a@example.com\r\nBcc: x@evil.example",
    "a@example.com\rBcc: x@evil.example",
    "a\n@example.com",
    "a@exam\nple.com",
    "a\x00@example.com",
])
def test_line_breaks_inside_an_address_are_refused(raw):
    with pytest.raises(ValidationError, match="line break") as caught:
        parse_address(raw)
    assert caught.value.code == "invalid_email"


@pytest.mark.django_db
def test_subscriber_save_fills_email_lower_and_trims_the_email():
    subscriber = SubscriberFactory(email="  JOSÉ@Bücher.DE ")
    stored = Subscriber.objects.get(pk=subscriber.pk)
    assert stored.email == "JOSÉ@Bücher.DE"
    assert stored.email_lower == "josÉ@xn--bcher-kva.de"


@pytest.mark.django_db
def test_subscriber_save_recomputes_email_lower_when_the_email_changes():
    subscriber = SubscriberFactory(email="first@example.com")
    subscriber.email = "Second@EXAMPLE.com"
    subscriber.save()
    assert Subscriber.objects.get(pk=subscriber.pk).email_lower == "second@example.com"


@pytest.mark.django_db
def test_subscriber_with_an_invalid_email_is_refused_and_not_stored():
    segment = SegmentFactory()
    with pytest.raises(ValidationError, match="nope"):
        SubscriberFactory(segment=segment, email="nope")
    with pytest.raises(ValidationError, match="line break"):
        SubscriberFactory(segment=segment, email="a@example.com\nBcc: x@evil.example")
    assert not Subscriber.objects.exists()


@pytest.mark.django_db
def test_suppression_save_normalises_email_lower():
    account = AccountFactory()
    suppression = Suppression(account=account, email_lower="  Foo@Bücher.DE ")
    suppression.save()
    assert Suppression.objects.get(pk=suppression.pk).email_lower == "foo@xn--bcher-kva.de"


@pytest.mark.django_db
def test_suppression_save_refuses_an_invalid_address():
    account = AccountFactory()
    with pytest.raises(ValidationError):
        Suppression(account=account, email_lower="not an address").save()
    assert not Suppression.objects.exists()


@pytest.mark.parametrize(("typed", "wire"), [
    ("ana@example.com", "ana@example.com"),
    ("john@straße.de", "john@xn--strae-oqa.de"),  # IDNA 2003 would say strasse.de
    ("ana@bücher.example", "ana@xn--bcher-kva.example"),
])
def test_an_address_goes_on_the_wire_with_its_dedup_keys_domain(typed, wire):
    assert on_the_wire(typed) == wire
    assert email_lower(wire) == email_lower(typed)


# --- the common addresses' shortcut (read once per domain) against validate_email, whole --------

_ATEXT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_!#$%&'*+/=?^`{|}~-"
_LOCAL = st.text(alphabet=_ATEXT + "...", min_size=1, max_size=70)
_LABEL = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-",
                 min_size=1, max_size=66) | st.sampled_from([
    "xn--strae-oqa", "xn--bcher-kva", "xn--", "xn--zz", "localhost", "test", "invalid", "arpa",
    "onion", "local", "com", "COM", "123", "example", "a" * 63, "a" * 64, "-a", "a-", "_dmarc"])
_DOMAIN = st.lists(_LABEL, min_size=1, max_size=6).map(".".join) | st.sampled_from(
    ["", "[127.0.0.1]", "a..b", ".a.b", "a.b.", "x.com.", "b\u00fccher.de", "@x.com"])
_LONG = st.builds("{}@{}.com".format, st.text(alphabet="abc.", min_size=40, max_size=70),
                  st.lists(st.text(alphabet="abc", min_size=40, max_size=63), min_size=2,
                           max_size=3).map(".".join))  # about the 254 characters an address may have
_ADDRESS = st.one_of(st.builds("{}@{}".format, _LOCAL, _DOMAIN), _LONG, st.emails(),
                     st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126),
                              max_size=40))


@settings(max_examples=2000, deadline=None)
@given(_ADDRESS)
def test_the_common_addresses_shortcut_says_what_validate_email_says(raw):
    email = raw.strip()
    common = _common_address(email)
    if common is not None:  # otherwise validate_email reads it whole
        assert _validated(email, raw=raw) == common


@pytest.mark.parametrize("raw", ["John.Doe@Example.COM", "o'brien+news@mail.example.org",
                                 "postmaster@Sub.Example.co.uk", "x@xn--bcher-kva.de"])
def test_common_addresses_take_the_shortcut(raw):
    assert _common_address(raw) == _validated(raw, raw=raw)


@pytest.mark.parametrize("raw", ["a@localhost", "a@b@example.com", "a..b@example.com",
                                 "a@[127.0.0.1]", "jos\u00e9@example.com", "a@b\u00fccher.de",
                                 "a@" + "b" * 64 + ".com", "a" * 200 + "@" + "b" * 60 + ".com"])
def test_other_addresses_are_left_to_validate_email(raw):
    assert _common_address(raw) is None
