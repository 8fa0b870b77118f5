"""Unsubscribe tokens and the public one-click unsubscribe view (RFC 8058)."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.test import Client
from django.urls import reverse

from growth.models import Subscriber, Suppression
from growth.sending.unsubscribe import SALT, BadToken, UnsubscribeTarget, make_token, read_token
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory

ONE_CLICK = "List-Unsubscribe=One-Click"
FORM = "application/x-www-form-urlencoded"


def flip(token: str, index: int) -> str:
    """The token with one character changed."""
    replacement = "A" if token[index] != "A" else "B"
    return token[:index] + replacement + token[index + 1:]


def url(token: str) -> str:
    return reverse("growth:unsubscribe", args=[token])


@pytest.fixture
def csrf_client() -> Client:
    # what a mail client's one-click POST looks like: no cookie, no CSRF token
    return Client(enforce_csrf_checks=True)


@pytest.fixture
def world():
    """One address in two segments of account A (different case), the same address in account B,
    and an unrelated subscriber of A."""
    account = AccountFactory()
    campaign = CampaignFactory(account=account)
    first = SubscriberFactory(segment=SegmentFactory(account=account), email="Shared@Example.com")
    second = SubscriberFactory(segment=SegmentFactory(account=account), email="shared@example.com")
    bystander = SubscriberFactory(segment=first.segment, email="bystander@example.com")
    other_account = AccountFactory()
    elsewhere = SubscriberFactory(segment=SegmentFactory(account=other_account),
                                  email="shared@example.com")
    token = make_token(account_id=account.id, subscriber_id=first.id, campaign_id=campaign.id)
    return {"account": account, "campaign": campaign, "first": first, "second": second,
            "bystander": bystander, "other_account": other_account, "elsewhere": elsewhere,
            "token": token}


def all_statuses() -> dict[int, str]:
    return dict(Subscriber.objects.values_list("id", "status"))


def assert_nothing_changed(before: dict[int, str]) -> None:
    assert not Suppression.objects.exists()
    assert all_statuses() == before


# --- tokens --------------------------------------------------------------------------------------

@pytest.mark.parametrize("campaign_id", [9, None])
def test_token_round_trip(campaign_id):
    token = make_token(account_id=3, subscriber_id=7, campaign_id=campaign_id)
    assert read_token(token) == UnsubscribeTarget(3, 7, campaign_id)


def test_token_is_url_path_safe():
    token = make_token(account_id=3, subscriber_id=7, campaign_id=9)
    assert "/" not in token and "?" not in token and "#" not in token and " " not in token


@pytest.mark.parametrize("where", ["payload", "signature"])
def test_tampered_token_is_refused(where):
    token = make_token(account_id=3, subscriber_id=7, campaign_id=9)
    index = 1 if where == "payload" else len(token) - 2
    with pytest.raises(BadToken):
        read_token(flip(token, index))


def test_token_with_a_forged_payload_and_a_genuine_signature_is_refused():
    genuine = make_token(account_id=3, subscriber_id=7, campaign_id=9)
    forged = make_token(account_id=3, subscriber_id=8, campaign_id=9)
    spliced = forged.split(":")[0] + ":" + genuine.split(":")[1]
    with pytest.raises(BadToken):
        read_token(spliced)


@pytest.mark.parametrize("cut", [
    lambda t: t[:-1],
    lambda t: t[:-10],
    lambda t: t.split(":")[0],
    lambda t: t.split(":")[0] + ":",
    lambda t: t[1:],
])
def test_truncated_token_is_refused(cut):
    token = make_token(account_id=3, subscriber_id=7, campaign_id=9)
    with pytest.raises(BadToken):
        read_token(cut(token))


@pytest.mark.parametrize("garbage", ["", "garbage", ":", "a:b", "WzMsNyw5XQ", "é:ü", "%00:%ff",
                                     "::::"])
def test_garbage_token_is_refused(garbage):
    with pytest.raises(BadToken):
        read_token(garbage)


def test_token_signed_with_another_salt_is_refused():
    token = signing.Signer(salt="other").sign_object([3, 7, 9])
    with pytest.raises(BadToken):
        read_token(token)


@pytest.mark.parametrize("payload", [[3, 7], [3, 7, 9, 1], {"a": 3}, 5, ["3", 7, 9], [3, 7, "9"],
                                     [3, None, 9], "3:7:9"])
def test_well_signed_token_with_a_malformed_payload_is_refused(payload):
    token = signing.Signer(salt=SALT).sign_object(payload)
    with pytest.raises(BadToken):
        read_token(token)


def test_old_token_still_reads_after_a_key_rotation_with_the_old_key_as_fallback(settings):
    old = settings.SECRET_KEY
    token = make_token(account_id=3, subscriber_id=7, campaign_id=9)
    settings.SECRET_KEY = "new-secret-key-for-the-rotation-test-0123456789"
    settings.SECRET_KEY_FALLBACKS = [old]
    assert read_token(token) == UnsubscribeTarget(3, 7, 9)
    # new tokens are signed with the new key
    assert make_token(account_id=3, subscriber_id=7, campaign_id=9) != token


def test_old_token_is_refused_after_a_key_rotation_without_fallback(settings):
    token = make_token(account_id=3, subscriber_id=7, campaign_id=9)
    settings.SECRET_KEY = "new-secret-key-for-the-rotation-test-0123456789"
    settings.SECRET_KEY_FALLBACKS = []
    with pytest.raises(BadToken):
        read_token(token)


# --- the view: GET -------------------------------------------------------------------------------

@pytest.mark.django_db
def test_get_shows_a_confirmation_and_changes_nothing(csrf_client, world):
    before = all_statuses()
    response = csrf_client.get(url(world["token"]))
    assert response.status_code == 200
    assert response.templates[0].name == "growth/unsubscribe_confirm.html"
    body = response.content.decode()
    assert world["account"].name in body
    assert '<form method="post">' in body
    assert_nothing_changed(before)
    assert before[world["first"].id] == "confirmed"


@pytest.mark.django_db
def test_repeated_gets_change_nothing(csrf_client, world):
    before = all_statuses()
    for _ in range(3):
        assert csrf_client.get(url(world["token"])).status_code == 200
    assert_nothing_changed(before)


# --- the view: POST ------------------------------------------------------------------------------

def post_one_click(client: Client, token: str, *, multipart: bool = False):
    if multipart:
        return client.post(url(token), {"List-Unsubscribe": "One-Click"})
    return client.post(url(token), ONE_CLICK, content_type=FORM)


def assert_unsubscribed(world) -> None:
    (suppression,) = Suppression.objects.all()
    assert suppression.account_id == world["account"].id
    assert suppression.email_lower == world["first"].email_lower == "shared@example.com"
    assert suppression.reason == Suppression.Reason.UNSUBSCRIBED
    assert suppression.campaign_id == world["campaign"].id
    statuses = all_statuses()
    assert statuses[world["first"].id] == "unsubscribed"
    assert statuses[world["second"].id] == "unsubscribed"
    assert statuses[world["bystander"].id] == "confirmed"
    assert statuses[world["elsewhere"].id] == "confirmed"
    assert not Suppression.objects.filter(account=world["other_account"]).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("multipart", [False, True], ids=["urlencoded", "multipart"])
def test_one_click_post_without_cookies_or_csrf_token_unsubscribes(csrf_client, world, multipart):
    assert not csrf_client.cookies
    response = post_one_click(csrf_client, world["token"], multipart=multipart)
    assert response.status_code == 200
    assert "Location" not in response.headers
    assert response.templates[0].name == "growth/unsubscribe_done.html"
    assert world["account"].name in response.content.decode()
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_post_from_the_confirmation_page_button_unsubscribes(csrf_client, world):
    # the page's form posts an empty body
    response = csrf_client.post(url(world["token"]))
    assert response.status_code == 200
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_repeating_the_post_is_harmless(csrf_client, world):
    for multipart in (False, True, False):
        response = post_one_click(csrf_client, world["token"], multipart=multipart)
        assert response.status_code == 200
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_post_for_an_already_suppressed_address_keeps_the_first_reason(csrf_client, world):
    Suppression.objects.create(account=world["account"], email_lower="SHARED@example.com",
                               reason=Suppression.Reason.BOUNCED)
    assert post_one_click(csrf_client, world["token"]).status_code == 200
    (suppression,) = Suppression.objects.filter(account=world["account"])
    assert suppression.reason == Suppression.Reason.BOUNCED
    assert all_statuses()[world["second"].id] == "unsubscribed"


@pytest.mark.django_db
def test_post_with_a_token_without_campaign_records_no_campaign(csrf_client, world):
    token = make_token(account_id=world["account"].id, subscriber_id=world["second"].id,
                       campaign_id=None)
    assert post_one_click(csrf_client, token).status_code == 200
    (suppression,) = Suppression.objects.all()
    assert suppression.campaign_id is None
    assert suppression.email_lower == "shared@example.com"
    assert all_statuses()[world["first"].id] == "unsubscribed"


# --- the view: refusals --------------------------------------------------------------------------

def bad_tokens(token: str) -> list[str]:
    return [flip(token, 1), flip(token, len(token) - 2), token[:-1], token.split(":")[0],
            "garbage", "a:b", signing.Signer(salt="other").sign_object([1, 2, 3])]


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_tampered_or_garbage_token_is_refused_with_400_and_no_change(csrf_client, world, method):
    before = all_statuses()
    for token in bad_tokens(world["token"]):
        response = (csrf_client.get(url(token)) if method == "get"
                    else post_one_click(csrf_client, token))
        assert response.status_code == 400, token
        assert response.templates[0].name == "growth/unsubscribe_invalid.html"
    assert_nothing_changed(before)


@pytest.mark.django_db
def test_post_naming_a_subscriber_of_another_account_is_refused(csrf_client, world):
    before = all_statuses()
    token = make_token(account_id=world["account"].id, subscriber_id=world["elsewhere"].id,
                       campaign_id=world["campaign"].id)
    response = post_one_click(csrf_client, token)
    assert response.status_code == 400
    assert_nothing_changed(before)


@pytest.mark.django_db
def test_get_with_a_subscriber_of_another_account_changes_nothing(csrf_client, world):
    before = all_statuses()
    token = make_token(account_id=world["account"].id, subscriber_id=world["elsewhere"].id,
                       campaign_id=world["campaign"].id)
    assert csrf_client.get(url(token)).status_code == 400  # the same answer the POST would give
    assert_nothing_changed(before)


@pytest.mark.django_db
def test_a_token_naming_a_deleted_or_foreign_campaign_still_unsubscribes(csrf_client, world):
    token = make_token(account_id=world["account"].id, subscriber_id=world["first"].id,
                       campaign_id=world["campaign"].id + 1000)
    assert post_one_click(csrf_client, token).status_code == 200
    suppression = Suppression.objects.get(account=world["account"])
    assert suppression.campaign_id is None


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_token_for_an_unknown_account_is_refused(csrf_client, world, method):
    before = all_statuses()
    token = make_token(account_id=world["other_account"].id + 1000,
                       subscriber_id=world["first"].id, campaign_id=None)
    response = getattr(csrf_client, method)(url(token))
    assert response.status_code == 400
    assert_nothing_changed(before)


@pytest.mark.django_db
def test_post_for_an_unknown_subscriber_is_refused(csrf_client, world):
    before = all_statuses()
    token = make_token(account_id=world["account"].id, subscriber_id=max(before) + 1000,
                       campaign_id=world["campaign"].id)
    assert post_one_click(csrf_client, token).status_code == 400
    assert_nothing_changed(before)


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["put", "patch", "delete", "options", "head", "trace"])
def test_other_methods_are_not_allowed(csrf_client, world, method):
    before = all_statuses()
    response = getattr(csrf_client, method)(url(world["token"]))
    assert response.status_code == 405
    assert sorted(response.headers["Allow"].split(", ")) == ["GET", "POST"]
    assert_nothing_changed(before)


@pytest.mark.parametrize("ids", [(1, 2, 3), (10**12, 7, None)])
def test_links_carry_exactly_the_token_make_token_signs(ids, settings):
    from growth.sending.unsubscribe import LinkMaker

    settings.SECRET_KEY = "another-key-than-the-default-one-for-this-test-0123456789"
    account_id, subscriber_id, campaign_id = ids
    link = LinkMaker("https://growth.example").url(
        account_id=account_id, subscriber_id=subscriber_id, campaign_id=campaign_id)
    token = make_token(account_id=account_id, subscriber_id=subscriber_id, campaign_id=campaign_id)
    assert link == f"https://growth.example/u/{token}/"
    assert read_token(token).subscriber_id == subscriber_id


@pytest.mark.django_db
def test_no_answer_is_cached_or_indexed(csrf_client, world):
    for response in (csrf_client.get(url(world["token"])), post_one_click(csrf_client, world["token"]),
                     csrf_client.get(url("garbage"))):
        assert "no-store" in response.headers["Cache-Control"]
        assert '<meta name="robots" content="noindex">' in response.content.decode()


@pytest.mark.django_db
def test_the_email_body_and_the_header_carry_the_same_working_link(csrf_client, world):
    from growth.sending.rendering import CampaignContent, CampaignRenderer

    campaign, first = world["campaign"], world["first"]
    message = CampaignRenderer(CampaignContent.of(campaign)).render(
        job_id=f"campaign:{campaign.id}:{first.id}", email=first.email, subscriber_id=first.id)
    link = message.extra_headers["List-Unsubscribe"][1:-1]
    assert link in message.body
    path = urlsplit(link).path
    assert csrf_client.get(path).status_code == 200
    assert not Suppression.objects.exists()
    assert post_one_click(csrf_client, path.split("/")[-2]).status_code == 200
    assert_unsubscribed(world)
