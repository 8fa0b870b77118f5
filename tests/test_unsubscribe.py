"""Unsubscribe tokens and the public one-click unsubscribe view (RFC 8058)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.test import Client
from django.urls import reverse

from growth.models import Subscriber, Suppression
from growth.sending.unsubscribe import SALT, BadToken, UnsubscribeTarget, make_token, read_token
from tests.factories import AccountFactory, CampaignFactory, SegmentFactory, SubscriberFactory
from tests.helpers import concurrently

ONE_CLICK = "List-Unsubscribe=One-Click"
FORM = "application/x-www-form-urlencoded"


def flip(token: str, index: int) -> str:
    """The token with one character changed."""
    replacement = "A" if token[index] != "A" else "B"
    return token[:index] + replacement + token[index + 1:]


def url(token: str) -> str:
    return reverse("growth:unsubscribe", args=[token])


def done_url(token: str) -> str:
    return reverse("growth:unsubscribe-done", args=[token])


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


def post_from_the_page(client: Client, token: str):
    """The confirmation page's button."""
    return client.post(url(token), {"source": "page"})


@pytest.mark.django_db
def test_post_from_the_confirmation_page_button_unsubscribes_then_redirects(csrf_client, world):
    page = csrf_client.get(url(world["token"])).content.decode()
    assert '<input type="hidden" name="source" value="page">' in page
    response = post_from_the_page(csrf_client, world["token"])  # Post/Redirect/Get: to the done page
    assert response.status_code == 303
    assert response["Location"].startswith(done_url(world["token"]) + "?undo=")
    assert_unsubscribed(world)


@pytest.mark.django_db
@pytest.mark.parametrize("body", [b"", b"List-Unsubscribe=Whatever", b"source=elsewhere"])
def test_any_other_post_is_answered_at_once_like_a_one_click(csrf_client, world, body):
    # a mail client that does not quite follow RFC 8058 gets its answer, not a redirect
    response = csrf_client.post(url(world["token"]), body, content_type=FORM)
    assert response.status_code == 200 and "Location" not in response.headers
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


# --- the page: masked address, sender, already unsubscribed --------------------------------------

@pytest.mark.parametrize("address, masked", [
    ("john@example.com", "j•••@e•••.com"),
    ("j@example.com", "•••@e•••.com"),  # one letter: shown, it would be the whole local part
    ("jo@x.io", "j•••@•••.io"),
    ("anna.smith@mail.eu.bigcorp.co.uk", "a•••@m•••.uk"),  # subdomains say where one works
    ("reader@xn--bcher-kva.example", "r•••@b•••.example"),  # stored IDNA, shown in Unicode
    ("ivan@xn--d1acufc.xn--p1ai", "i•••@д•••.рф"),
    ("ñandú@example.com", "ñ•••@e•••.com"),
    ('"john doe"@example.com', "j•••@e•••.com"),
    ("a@xn--zz.example", "•••@x•••.example"),  # not valid punycode: as stored
    ("root@localhost", "r•••@l•••"),
])
def test_addresses_are_masked(address, masked):
    from growth.audience.opt_outs import mask_address

    assert mask_address(address) == masked


@pytest.mark.parametrize("address, hidden", [
    ("john@mydomain.com", ["john", "mydomain"]), ("ab@cd.org", ["ab", "cd"]), ("x@y.net", ["x", "y"]),
    ("reader@xn--bcher-kva.shop", ["reader", "bücher", "bcher"]),
    ("jane@mail.bigcorp.co.uk", ["jane", "mail", "bigcorp", "co."]),
])
def test_a_masked_address_never_shows_a_whole_part_but_the_last_label(address, hidden):
    from growth.audience.opt_outs import mask_address

    masked = mask_address(address)
    assert masked.count("•••") == 2
    assert not any(part in masked for part in hidden), masked


@pytest.mark.django_db
def test_the_page_names_the_sender_and_the_masked_address_never_the_address(csrf_client, world):
    account = world["account"]
    account.from_name, account.name = "Acme Books", "acme-internal"
    account.save()
    body = csrf_client.get(url(world["token"])).content.decode()
    assert "Unsubscribe from Acme Books?" in body and "acme-internal" not in body
    assert "s•••@e•••.com" in body
    assert "shared@example.com" not in body.lower()
    account.from_name = ""
    account.save()
    assert "Unsubscribe from acme-internal?" in csrf_client.get(url(world["token"])).content.decode()


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["unsubscribed", "bounced", "manual"])
def test_an_address_already_suppressed_is_shown_unsubscribed_with_no_second_form(
        csrf_client, world, reason):
    Suppression.objects.create(account=world["account"], email_lower="shared@example.com",
                               reason=reason)
    before = all_statuses()
    response = csrf_client.get(url(world["token"]))
    assert response.status_code == 200
    assert response.templates[0].name == "growth/unsubscribe_already.html"
    body = response.content.decode()
    assert "You are already unsubscribed" in body and "s•••@e•••.com" in body
    assert "<form" not in body
    assert all_statuses() == before


@pytest.mark.django_db
def test_another_tenants_suppression_of_the_address_is_not_this_ones(csrf_client, world):
    Suppression.objects.create(account=world["other_account"], email_lower="shared@example.com")
    assert csrf_client.get(url(world["token"])).templates[0].name == "growth/unsubscribe_confirm.html"


# --- Post/Redirect/Get ---------------------------------------------------------------------------

def undo_token_of(location: str) -> str:
    from urllib.parse import parse_qs

    return parse_qs(urlsplit(location).query)["undo"][0]


@pytest.mark.django_db
def test_the_done_page_offers_the_undo_and_a_reload_posts_nothing(csrf_client, world):
    response = post_from_the_page(csrf_client, world["token"])
    assert response.status_code == 303
    done = csrf_client.get(response["Location"])
    assert done.status_code == 200
    assert done.templates[0].name == "growth/unsubscribe_done.html"
    body = done.content.decode()
    assert "You are unsubscribed" in body and "s•••@e•••.com" in body
    undo = reverse("growth:unsubscribe-undo", args=[undo_token_of(response["Location"])])
    assert f'Unsubscribed by mistake? <a href="{undo}">Resubscribe</a>' in body
    assert "no-store" in done.headers["Cache-Control"]
    snapshot = (all_statuses(), list(Suppression.objects.values_list("id", "reason")))
    for _ in range(2):  # reloads
        assert csrf_client.get(response["Location"]).status_code == 200
    assert (all_statuses(), list(Suppression.objects.values_list("id", "reason"))) == snapshot
    assert Client().post(response["Location"]).status_code == 405


@pytest.mark.django_db
def test_the_done_page_of_an_address_not_unsubscribed_asks_instead(csrf_client, world):
    before = all_statuses()
    response = csrf_client.get(done_url(world["token"]))
    assert response.status_code == 302 and response["Location"] == url(world["token"])
    assert_nothing_changed(before)


@pytest.mark.django_db
def test_posting_again_from_a_second_tab_offers_no_undo(csrf_client, world):
    first = post_from_the_page(csrf_client, world["token"])
    second = post_from_the_page(csrf_client, world["token"])
    assert second.status_code == 303 and second["Location"] == done_url(world["token"])
    assert "Resubscribe" not in csrf_client.get(second["Location"]).content.decode()
    assert "Resubscribe" in csrf_client.get(first["Location"]).content.decode()
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_one_click_answers_200_with_no_redirect_and_stays_idempotent(csrf_client, world):
    first = post_one_click(csrf_client, world["token"])
    assert first.status_code == 200 and "Location" not in first.headers
    assert "Resubscribe" in first.content.decode()
    again = post_one_click(csrf_client, world["token"])
    assert again.status_code == 200 and "Resubscribe" not in again.content.decode()
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_a_body_that_cannot_be_read_still_unsubscribes(csrf_client, world):
    response = csrf_client.post(url(world["token"]), b"--x\r\nbroken",
                                content_type="multipart/form-data; boundary=")
    assert response.status_code == 200
    assert_unsubscribed(world)


ONE_CLICK_PART = (b'--zz\r\nContent-Disposition: form-data; name="List-Unsubscribe"\r\n\r\n'
                  b"One-Click\r\n--zz--\r\n")


@pytest.mark.django_db
@pytest.mark.parametrize("charset", ["rot13", "hex", "base64", "zlib", "undefined", "no-such-charset"])
def test_a_one_click_in_a_charset_that_is_no_text_encoding_still_unsubscribes(
        csrf_client, world, charset):
    """Python's codecs know rot13 and its kind, so Django kept the name, and reading the body
    raised LookupError: a 500, and the opt-out lost."""
    response = csrf_client.generic(
        "POST", url(world["token"]), ONE_CLICK_PART,
        content_type=f"multipart/form-data; boundary=zz; charset={charset}")
    assert response.status_code == 200
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_a_form_posted_in_a_charset_that_is_no_text_encoding_is_read_not_a_500(csrf_client):
    """The CSRF check reads the body of every form: it raised the LookupError itself."""
    login = reverse("growth:tenant:login")
    csrf_client.get(login)
    token = csrf_client.cookies["csrftoken"].value
    body = "".join(f'--zz\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                   for name, value in [("csrfmiddlewaretoken", token), ("username", "nobody"),
                                       ("password", "wrong")]) + "--zz--\r\n"
    response = csrf_client.generic("POST", login, body.encode(),
                                   content_type="multipart/form-data; boundary=zz; charset=rot13")
    assert response.status_code == 200
    assert response.context["form"].errors  # read, and refused as a wrong password


@pytest.mark.django_db
@pytest.mark.parametrize("undo", ["garbage", "a:b:c", "\x00", "x" * 5000])
def test_the_done_page_refuses_a_damaged_undo_token(csrf_client, world, undo):
    response = post_from_the_page(csrf_client, world["token"])
    genuine = undo_token_of(response["Location"])
    for bad in (undo, flip(genuine, 1), flip(genuine, len(genuine) - 2)):
        page = csrf_client.get(done_url(world["token"]), {"undo": bad})
        assert page.status_code == 400, bad
        assert page.templates[0].name == "growth/unsubscribe_invalid.html"
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_the_done_page_refuses_an_undo_token_of_someone_else(csrf_client, world):
    mine = post_from_the_page(csrf_client, world["token"])
    bystander = make_token(account_id=world["account"].id, subscriber_id=world["bystander"].id,
                           campaign_id=None)
    theirs = post_from_the_page(csrf_client, bystander)
    assert csrf_client.get(done_url(bystander),
                           {"undo": undo_token_of(mine["Location"])}).status_code == 400
    assert csrf_client.get(done_url(world["token"]),
                           {"undo": undo_token_of(theirs["Location"])}).status_code == 400


# --- the undo ------------------------------------------------------------------------------------

@pytest.fixture
def browser() -> Client:
    """A recipient's browser: cookies, and the CSRF check a browser's form posts go through."""
    return Client(enforce_csrf_checks=True)


def undo_url(undo_token: str) -> str:
    return reverse("growth:unsubscribe-undo", args=[undo_token])


def unsubscribe_for_undo(client: Client, token: str) -> str:
    """Unsubscribe with the page's button and open the undo the done page offers (which gives the
    browser its CSRF cookie); return the undo page's URL."""
    undo = undo_url(undo_token_of(post_from_the_page(client, token)["Location"]))
    assert client.get(undo).status_code == 200
    return undo


def confirm_undo(client: Client, undo: str):
    """The undo page's button."""
    return client.post(undo, {"csrfmiddlewaretoken": client.cookies["csrftoken"].value})


@pytest.mark.django_db
def test_the_undo_asks_first_then_resubscribes_as_before(browser, world):
    world["second"].status = Subscriber.Status.PENDING
    world["second"].save()
    old = SubscriberFactory(segment=SegmentFactory(account=world["account"]), email="shared@example.com",
                            status="unsubscribed")  # left that segment long ago
    undo = unsubscribe_for_undo(browser, world["token"])
    assert all_statuses()[world["second"].id] == "unsubscribed"

    snapshot = (all_statuses(), Suppression.objects.count())
    page = browser.get(undo)
    assert page.templates[0].name == "growth/unsubscribe_undo.html"
    body = page.content.decode()
    assert "Resubscribe to" in body and "s•••@e•••.com" in body and 'name="csrfmiddlewaretoken"' in body
    assert (all_statuses(), Suppression.objects.count()) == snapshot  # a GET changes nothing

    response = browser.post(undo, {"csrfmiddlewaretoken": browser.cookies["csrftoken"].value})
    assert response.status_code == 303 and response["Location"] == undo
    assert not Suppression.objects.exists()
    statuses = all_statuses()
    assert statuses[world["first"].id] == "confirmed"
    assert statuses[world["second"].id] == "pending"  # back to what it was, never confirmed
    assert statuses[old.id] == "unsubscribed"  # not this opt-out's doing
    assert statuses[world["bystander"].id] == statuses[world["elsewhere"].id] == "confirmed"
    assert "You are subscribed again" in browser.get(undo).content.decode()
    # posting again (a reload before the redirect, a second tab) changes nothing
    snapshot = all_statuses()
    assert confirm_undo(browser, undo).status_code == 303
    assert all_statuses() == snapshot and not Suppression.objects.exists()
    # and the emailed link works as before
    assert browser.get(url(world["token"])).templates[0].name == "growth/unsubscribe_confirm.html"


@pytest.mark.django_db
def test_the_undo_needs_the_pages_csrf_token(browser, world):
    undo = unsubscribe_for_undo(browser, world["token"])
    assert Client(enforce_csrf_checks=True).post(undo).status_code == 403
    assert_unsubscribed(world)


@pytest.mark.django_db
@pytest.mark.parametrize("reason", ["bounced", "complained", "manual", "imported"])
def test_the_undo_never_lifts_a_suppression_for_another_reason(browser, world, reason):
    undo = unsubscribe_for_undo(browser, world["token"])
    Suppression.objects.filter(account=world["account"]).update(reason=reason)
    snapshot = all_statuses()
    assert "This can no longer be undone here" in browser.get(undo).content.decode()
    assert confirm_undo(browser, undo).status_code == 303
    assert Suppression.objects.get(account=world["account"]).reason == reason
    assert all_statuses() == snapshot


@pytest.mark.django_db
def test_an_address_suppressed_before_the_opt_out_gets_no_undo(browser, world):
    Suppression.objects.create(account=world["account"], email_lower="shared@example.com",
                               reason="bounced")
    response = post_from_the_page(browser, world["token"])
    assert response["Location"] == done_url(world["token"])  # no undo token
    body = browser.get(response["Location"]).content.decode()
    assert "You are unsubscribed" in body and "Resubscribe" not in body


@pytest.mark.django_db
def test_the_undo_is_refused_once_a_bounce_was_reported_since(browser, world):
    from growth.models import FeedbackEvent

    undo = unsubscribe_for_undo(browser, world["token"])
    FeedbackEvent.objects.create(esp="Postmark", event_id="e1", event_type="bounced",
                                 email_lower="shared@example.com", account=world["account"],
                                 suppressed=True)
    assert confirm_undo(browser, undo).status_code == 303
    assert_unsubscribed(world)
    assert "This can no longer be undone here" in browser.get(undo).content.decode()


@pytest.mark.django_db
def test_the_undo_is_refused_once_a_send_to_the_address_failed_since(browser, world):
    from growth.models import Send

    undo = unsubscribe_for_undo(browser, world["token"])
    Send.objects.create(campaign=world["campaign"], account=world["account"], subscriber=world["first"],
                        email="shared@example.com", email_lower="shared@example.com", status="failed",
                        last_error="550 5.1.1 No such user")
    assert confirm_undo(browser, undo).status_code == 303
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_a_suppression_removed_and_made_again_is_not_the_one_the_undo_names(browser, world):
    undo = unsubscribe_for_undo(browser, world["token"])
    Suppression.objects.all().delete()
    assert post_from_the_page(Client(), world["token"]).status_code == 303  # a new opt-out, a new undo
    assert confirm_undo(browser, undo).status_code == 303
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_another_tenants_undo_never_touches_this_one(browser, world):
    # the same address opts out of both tenants; undoing it at one leaves the other alone
    undo = unsubscribe_for_undo(browser, world["token"])
    theirs = make_token(account_id=world["other_account"].id, subscriber_id=world["elsewhere"].id,
                        campaign_id=None)
    their_undo = unsubscribe_for_undo(browser, theirs)
    assert confirm_undo(browser, their_undo).status_code == 303
    assert not Suppression.objects.filter(account=world["other_account"]).exists()
    assert all_statuses()[world["elsewhere"].id] == "confirmed"
    assert_unsubscribed(world)
    assert confirm_undo(browser, undo).status_code == 303
    assert not Suppression.objects.exists()


@pytest.mark.django_db
def test_a_forged_undo_naming_another_tenants_suppression_changes_nothing(browser, world):
    from growth.sending.unsubscribe import UndoTarget, make_undo_token

    theirs = Suppression.objects.create(account=world["other_account"], email_lower="shared@example.com",
                                        reason="unsubscribed")
    Subscriber.objects.filter(id=world["elsewhere"].id).update(status="unsubscribed")
    # genuinely signed (as if the key had leaked): our account and subscriber, their suppression
    forged = make_undo_token(UndoTarget(world["account"].id, world["first"].id, theirs.id,
                                        (world["elsewhere"].id,), ()))
    before = all_statuses()
    assert Client().post(undo_url(forged)).status_code == 303
    assert Suppression.objects.filter(pk=theirs.pk).exists()
    assert all_statuses() == before


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_a_damaged_undo_token_gets_the_400_page_and_changes_nothing(world, method):
    client = Client()  # no CSRF check: the token alone must stop it
    undo = undo_token_of(post_from_the_page(client, world["token"])["Location"])
    for bad in [flip(undo, 1), flip(undo, len(undo) - 2), undo[:-1], undo.split(":")[0], "garbage",
                "x" * 5000, world["token"],  # an unsubscribe token is no undo token
                signing.TimestampSigner(salt="other").sign_object([1, 2, 3, [], []])]:
        response = getattr(client, method)(undo_url(bad))
        assert response.status_code == 400, bad
        assert response.templates[0].name == "growth/unsubscribe_invalid.html"
    assert_unsubscribed(world)


@pytest.mark.django_db
def test_an_undo_token_is_no_unsubscribe_token(csrf_client, world):
    undo = undo_token_of(post_from_the_page(Client(), world["token"])["Location"])
    Suppression.objects.all().delete()
    Subscriber.objects.update(status="confirmed")
    before = all_statuses()
    for method in ("get", "post"):
        assert getattr(csrf_client, method)(url(undo)).status_code == 400
    assert_nothing_changed(before)


@pytest.mark.django_db
def test_an_expired_undo_says_so_and_changes_nothing(browser, world, monkeypatch):
    from growth.sending import unsubscribe

    undo = unsubscribe_for_undo(browser, world["token"])
    monkeypatch.setattr(unsubscribe, "UNDO_MAX_AGE", timedelta(seconds=-1))
    response = browser.get(undo)
    assert response.status_code == 400 and "This link has expired" in response.content.decode()
    assert Client().post(undo).status_code == 400
    # the done page simply offers no undo any more
    done = browser.get(done_url(world["token"]), {"undo": undo.split("/")[-3]})
    assert done.status_code == 200 and "Resubscribe" not in done.content.decode()
    assert_unsubscribed(world)


# --- undo tokens ---------------------------------------------------------------------------------

def test_undo_token_round_trip_and_its_own_salt():
    from growth.sending.unsubscribe import UNDO_SALT, UndoTarget, make_undo_token, read_undo_token

    target = UndoTarget(3, 7, 11, tuple(range(1000, 1300)), (5,))
    token = make_undo_token(target)
    assert read_undo_token(token) == target
    assert len(token) < 1500 and "/" not in token  # many rows, compressed, one path segment
    assert UNDO_SALT != SALT
    with pytest.raises(BadToken):
        read_token(token)
    with pytest.raises(BadToken):
        read_undo_token(make_token(account_id=3, subscriber_id=7, campaign_id=11))


@pytest.mark.parametrize("payload", [[3, 7, 11, [], []][:4], [3, 7, 11, [], [], 1], [3, 7, None, [], []],
                                     [True, 7, 11, [], []], [3, -7, 11, [], []], [3, 7, 11, ["1"], []],
                                     [3, 7, 11, [], [2**63]], {"a": 1}, "3:7"])
def test_a_well_signed_undo_token_with_a_malformed_payload_is_refused(payload):
    from growth.sending.unsubscribe import UNDO_SALT, read_undo_token

    with pytest.raises(BadToken):
        read_undo_token(signing.TimestampSigner(salt=UNDO_SALT).sign_object(payload))


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["a:b:c", "W10:1abc", "nul\x00byte", "x" * 70_000, "🙂" * 500,
                                   "<script>alert(1)</script>", "Acme\r\nBcc: x@example.com", "%00"])
def test_hostile_tokens_on_the_done_and_undo_pages_are_400s_that_change_nothing(world, value):
    client = Client()
    before = all_statuses()
    path_value = value.replace("/", "").replace("\r\n", "")
    for response in (client.get(done_url(path_value)), client.get(undo_url(path_value)),
                     client.post(undo_url(path_value)),
                     client.get(done_url(world["token"]), {"undo": value})):
        assert response.status_code in (302, 400), value  # 302: nothing to be done yet, ask
        assert "<script>alert" not in response.content.decode()
    assert_nothing_changed(before)


@pytest.mark.django_db(transaction=True)
def test_racing_opt_outs_hand_out_one_undo_and_it_restores_every_row(world):
    from growth.audience import opt_outs

    recipient = opt_outs.find_recipient(account_id=world["account"].id,
                                        subscriber_id=world["first"].id)
    undos = concurrently(8, lambda _: opt_outs.unsubscribe(recipient, campaign_id=None))
    (undo,) = [u for u in undos if u is not None]  # one opt-out created the suppression
    assert sorted(undo.confirmed_ids) == sorted([world["first"].id, world["second"].id])
    assert all_statuses()[world["second"].id] == "unsubscribed"
    lifted = concurrently(4, lambda _: opt_outs.resubscribe(recipient, undo))
    assert sorted(lifted) == [False, False, False, True]
    assert not Suppression.objects.exists()
    assert set(all_statuses().values()) == {"confirmed"}


@pytest.mark.django_db
def test_a_link_opts_out_the_address_its_message_went_to_after_an_operator_edited_it(client):
    """The link names a subscriber row; an operator changed the row's address since. Its click
    comes from the address the message went to: that one is suppressed (and its rows in other
    segments marked), not the new one."""
    from growth.models import Campaign, Send
    from growth.operations.campaigns import approve_campaign

    account = AccountFactory()
    edited = SubscriberFactory(segment=SegmentFactory(account=account), email="old@example.com")
    elsewhere = SubscriberFactory(segment=SegmentFactory(account=account), email="old@example.com")
    campaign = CampaignFactory(account=account)
    approve_campaign(campaign_id=campaign.id)
    assert campaign.id in Campaign.objects.start_due()
    Send.objects.build_recipients(campaign_id=campaign.id)
    assert Send.objects.get(campaign=campaign).subscriber_id == edited.id
    edited.email = "new@example.com"
    edited.save()
    token = make_token(account_id=account.id, subscriber_id=edited.id, campaign_id=campaign.id)
    assert "o•••@e•••.com" in client.get(url(token)).content.decode()
    client.post(url(token), {"List-Unsubscribe": "One-Click"})
    assert list(Suppression.objects.values_list("email_lower", flat=True)) == ["old@example.com"]
    assert Subscriber.objects.get(id=elsewhere.id).status == "unsubscribed"
    assert Subscriber.objects.get(id=edited.id).status == "confirmed"  # new@ did not opt out
