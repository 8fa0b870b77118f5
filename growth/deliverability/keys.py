"""DKIM public keys: the one a private key makes, and whether a published p= is that key.

RSA keys are read with dkimpy's ASN.1 code and Ed25519 keys with PyNaCl, as the signer does
(growth.sending.dkim, which also encodes the RSA public key the way p= carries it).

Accepted private keys, as growth_sending_domains and DKIM_PRIVATE_KEY_FILE hold them: RSA in PEM
(PKCS#1 "RSA PRIVATE KEY" or PKCS#8 "PRIVATE KEY"); Ed25519 as the base64 of its 32-byte seed
(dkimpy's form), of seed + public key (NaCl's 64 bytes), or OpenSSL's PKCS#8 PEM.
"""

from __future__ import annotations

import base64
import binascii
import re

import nacl.signing
from dkim import crypto as dkim_crypto
from dkim.asn1 import ASN1FormatError

from growth.sending.dkim import ED25519, RSA, DkimKeyError, ed25519_seed, rsa_public_key_info

__all__ = ["ED25519", "RSA", "KeyUnreadable", "expected_public_key", "same_key"]

_PEM = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----\s*(.*?)\s*-----END \1-----", re.DOTALL)


class KeyUnreadable(Exception):
    """The private key (ours) cannot be read: the message says why."""


def expected_public_key(private_key: str | bytes, algorithm: str) -> str:
    """The base64 p= that publishes this private key's public half (RSA: SubjectPublicKeyInfo
    DER, as ``openssl rsa -pubout`` gives it; Ed25519: the raw 32 bytes, RFC 8463).
    KeyUnreadable when the key is not one."""
    text = private_key.decode("ascii", "replace") if isinstance(private_key, bytes) else private_key
    text = text.replace("\r\n", "\n").strip()
    if algorithm == ED25519:
        public = bytes(nacl.signing.SigningKey(_ed25519_seed(text)).verify_key)
    else:
        public = rsa_public_key_info(*_rsa_numbers(text))
    return base64.b64encode(public).decode("ascii")


def same_key(published: str, expected: str, algorithm: str) -> bool:
    """Whether the published p= is the expected key: for RSA the same modulus and exponent
    (a PKCS#1 RSAPublicKey published instead of the usual SubjectPublicKeyInfo is the same key),
    for Ed25519 the same 32 bytes."""
    try:
        theirs = base64.b64decode("".join(published.split()), validate=True)
        ours = base64.b64decode(expected, validate=True)
    except (binascii.Error, ValueError):
        return False
    if algorithm == ED25519 or theirs == ours:
        return theirs == ours
    published_numbers = _rsa_public_numbers(theirs)
    return published_numbers is not None and published_numbers == _rsa_public_numbers(ours)


# --- RSA ---------------------------------------------------------------------------------------


def _rsa_numbers(text: str) -> tuple[int, int]:
    match = _PEM.search(text)
    if match is None or match[1] not in ("RSA PRIVATE KEY", "PRIVATE KEY"):
        raise KeyUnreadable("an RSA key must be a PEM private key (BEGIN RSA PRIVATE KEY or "
                            "BEGIN PRIVATE KEY)")
    try:
        der = base64.b64decode("".join(match[2].split()), validate=True)
    except (binascii.Error, ValueError):
        raise KeyUnreadable("the PEM's body is not base64") from None
    try:
        key = dkim_crypto.parse_private_key(der)
    except (dkim_crypto.UnparsableKeyError, ASN1FormatError, IndexError, ValueError):
        raise KeyUnreadable("this is not an RSA private key") from None
    return key["modulus"], key["publicExponent"]


def _rsa_public_numbers(der: bytes) -> tuple[int, int] | None:
    try:
        key = dkim_crypto.parse_public_key(der)
    except (dkim_crypto.UnparsableKeyError, ASN1FormatError, IndexError, ValueError):
        return None
    return key["modulus"], key["publicExponent"]


# --- Ed25519 -----------------------------------------------------------------------------------


def _ed25519_seed(text: str) -> bytes:
    try:
        return ed25519_seed(text)  # the signer's own reading: what shows ready here signs
    except DkimKeyError as exc:
        raise KeyUnreadable(str(exc)) from None
