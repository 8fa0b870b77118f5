"""Reading address lists (CSV uploads, pasted text) and importing them: whole or not at all."""

from __future__ import annotations

import io

import pytest
from django.core.exceptions import ValidationError

from growth.audience.address_files import MAX_FILE_BYTES, UnreadableFile, read_csv, read_text
from growth.audience.imports import import_subscribers, import_suppressions
from growth.models import Subscriber, Suppression
from tests.factories import SegmentFactory, SubscriberFactory


def csv_file(text: str | bytes) -> io.BytesIO:
    return io.BytesIO(text.encode() if isinstance(text, str) else text)


def lines(found) -> dict[str, list]:
    return {
        "entries": [(e.line, e.address.email_lower) for e in found.entries],
        "repeats": [(r.line, r.first_line) for r in found.repeats],
        "invalid": [(i.line, i.value) for i in found.invalid],
    }


# --- reading -----------------------------------------------------------------------------------

def test_a_headed_column_is_found_wherever_it_is_and_lines_are_the_files_lines():
    found = read_csv(csv_file("name;E-mail;city\n"
                              "Ann;Ann@Example.com;Paris\n"
                              "Bob;bob@@example.com;Oslo\n"
                              "\n"
                              "Ann again;ann@example.COM;Rome\n"
                              "Cy;;Lima\n"))
    assert lines(found) == {
        "entries": [(2, "ann@example.com")],
        "repeats": [(5, 2)],
        "invalid": [(3, "bob@@example.com"), (6, "")],
    }
    assert "@" in found.invalid[0].reason
    assert found.invalid[1].reason == "no address"


def test_an_email_column_wins_over_a_postal_address_column_wherever_they_are():
    found = read_csv(csv_file("name,address,Email\nAnn,1 Rue de Rivoli,ann@example.com\n"))
    assert lines(found) == {"entries": [(2, "ann@example.com")], "repeats": [], "invalid": []}


def test_two_columns_headed_alike_are_refused_rather_than_one_read_silently():
    with pytest.raises(UnreadableFile, match='Columns 1, 3 are all headed "email"'):
        read_csv(csv_file("email,name,Email\na@example.com,Ann,b@example.com\n"))


def test_without_a_header_the_first_column_is_read_from_the_first_line():
    found = read_csv(csv_file("a@example.com,x\nb@example.com,y\n"))
    assert lines(found)["entries"] == [(1, "a@example.com"), (2, "b@example.com")]


def test_an_export_reads_back_and_a_bom_is_ignored():
    found = read_csv(csv_file("\ufeffemail,reason,suppressed_at,campaign\n"
                              "a@example.com,manual,2026-01-01T00:00:00+00:00,\n"))
    assert lines(found)["entries"] == [(2, "a@example.com")]


@pytest.mark.parametrize("cell", ["550; 'no'; such user", "Spring; 'VIP'; sale"])
def test_a_header_decides_the_delimiter_whatever_quotes_the_cells_hold(cell):
    """An export of ours whose error or campaign name holds quoted text between semicolons: the
    sniffer alone took ';' for the delimiter, and every line, the header's too, was invalid."""
    rows = "".join(f'{name}@example.com,"{cell}"\n' for name in ("a", "b", "c"))
    found = read_csv(csv_file("email,last_error\n" + rows))
    assert lines(found) == {"entries": [(2, "a@example.com"), (3, "b@example.com"),
                                        (4, "c@example.com")], "repeats": [], "invalid": []}


def test_a_header_of_semicolons_is_read_as_one():
    found = read_csv(csv_file("name;email\nAda, the first;a@example.com\n"))
    assert lines(found)["entries"] == [(2, "a@example.com")]


def test_a_quoted_field_over_two_lines_is_one_invalid_value_and_later_lines_keep_their_numbers():
    found = read_csv(csv_file('email\n"a\nb@example.com"\nc@example.com\n'))
    assert lines(found) == {"entries": [(4, "c@example.com")], "repeats": [],
                            "invalid": [(3, "a\nb@example.com")]}


@pytest.mark.parametrize(("content", "message"), [
    (b"email\na@example.com\n\xff\xfe@example.com\n", "Line 3 is not UTF-8"),
    (b"", "empty"),
    (b"  \n\n", "empty"),
    (b'email\n"a@example.com\x00\n', "cannot be read as CSV"),
])
def test_an_unreadable_file_is_refused_whole_with_the_line(content, message):
    with pytest.raises(UnreadableFile, match=message):
        read_csv(csv_file(content))


def test_a_file_over_the_limit_is_refused():
    with pytest.raises(UnreadableFile, match="larger than"):
        read_csv(csv_file(b"a@example.com\n" * (MAX_FILE_BYTES // 14 + 1)))


def test_pasted_text_takes_any_separator_and_counts_lines():
    found = read_text("a@example.com, b@example.com; c@example.com\n\n  nope  \nA@example.com a@example.com")
    assert lines(found) == {
        "entries": [(1, "a@example.com"), (1, "b@example.com"), (1, "c@example.com")],
        "repeats": [(4, 1), (4, 1)],
        "invalid": [(3, "nope")],
    }


# --- importing ---------------------------------------------------------------------------------

@pytest.mark.django_db
def test_subscriber_import_reports_accepted_duplicates_and_nothing_else_changes():
    segment = SegmentFactory()
    SubscriberFactory(segment=segment, email="gone@example.com", status="unsubscribed")
    report = import_subscribers(segment_id=segment.id, status="confirmed", addresses=read_csv(csv_file(
        "email\nNew@Example.com\nGONE@example.com\nnew@example.com\nsecond@example.com\n")))
    assert report.imported and not report.refused
    assert [(e.line, e.address.email) for e in report.accepted] == [
        (2, "New@Example.com"), (5, "second@example.com")]
    assert [(d.line, d.why) for d in report.duplicates] == [
        (3, "already in the segment"), (4, "repeats line 2")]
    assert report.invalid == []
    rows = dict(Subscriber.objects.filter(segment=segment).values_list("email_lower", "status"))
    assert rows == {"new@example.com": "confirmed", "second@example.com": "confirmed",
                    "gone@example.com": "unsubscribed"}  # an import never re-subscribes anyone


@pytest.mark.django_db
def test_a_list_with_an_invalid_line_imports_nothing_unless_told_to_skip_it():
    segment = SegmentFactory()
    addresses = read_csv(csv_file("a@example.com\nnot an address\nb@example.com\n"))
    refused = import_subscribers(segment_id=segment.id, status="pending", addresses=addresses)
    assert refused.refused and not refused.imported
    assert [(i.line, i.value) for i in refused.invalid] == [(2, "not an address")]
    assert len(refused.accepted) == 2  # what would have gone in
    assert not Subscriber.objects.exists()
    skipped = import_subscribers(segment_id=segment.id, status="pending", addresses=addresses,
                                 skip_invalid=True)
    assert skipped.imported and len(skipped.accepted) == 2
    assert Subscriber.objects.filter(segment=segment, status="pending").count() == 2


@pytest.mark.django_db
def test_check_only_reports_exactly_and_writes_nothing():
    segment = SegmentFactory()
    SubscriberFactory(segment=segment, email="old@example.com")
    report = import_subscribers(segment_id=segment.id, status="confirmed", check_only=True,
                                addresses=read_text("old@example.com\nnew@example.com"))
    assert report.checked_only and not report.imported and not report.refused
    assert [e.address.email for e in report.accepted] == ["new@example.com"]
    assert [(d.line, d.why) for d in report.duplicates] == [(1, "already in the segment")]
    assert list(Subscriber.objects.values_list("email_lower", flat=True)) == ["old@example.com"]


@pytest.mark.django_db
def test_a_repeated_import_is_all_duplicates():
    segment = SegmentFactory()
    addresses = read_text("a@example.com\nb@example.com")
    first = import_subscribers(segment_id=segment.id, status="confirmed", addresses=addresses)
    assert len(first.accepted) == 2
    again = import_subscribers(segment_id=segment.id, status="confirmed", addresses=addresses)
    assert again.accepted == [] and len(again.duplicates) == 2
    assert Subscriber.objects.count() == 2


@pytest.mark.django_db
def test_an_address_that_needs_smtputf8_is_an_invalid_subscriber_but_may_be_suppressed():
    segment = SegmentFactory()
    addresses = read_text("a@example.com\njosé@example.com\nuser@bücher.example")
    report = import_subscribers(segment_id=segment.id, status="confirmed", addresses=addresses)
    assert report.refused and not Subscriber.objects.exists()
    [(line, value, reason)] = [(i.line, i.value, i.reason) for i in report.invalid]
    assert (line, value) == (2, "josé@example.com") and "needs SMTPUTF8" in reason
    report = import_subscribers(segment_id=segment.id, status="confirmed", addresses=addresses,
                                skip_invalid=True)
    assert sorted(Subscriber.objects.values_list("email", flat=True)) == [
        "a@example.com", "user@bücher.example"]
    assert import_suppressions(account_id=segment.account_id, addresses=addresses).imported
    assert Suppression.objects.filter(email_lower="josé@example.com").exists()


@pytest.mark.django_db
def test_subscriber_import_refuses_an_unknown_segment_or_status():
    with pytest.raises(ValidationError, match="no such segment"):
        import_subscribers(segment_id=10**9, status="confirmed", addresses=read_text("a@example.com"))
    with pytest.raises(ValidationError, match="pending or confirmed"):
        import_subscribers(segment_id=SegmentFactory().id, status="unsubscribed",
                           addresses=read_text("a@example.com"))
    assert not Subscriber.objects.exists()


@pytest.mark.django_db
def test_suppression_import_keeps_the_first_reason_and_touches_no_other_tenant():
    mine, theirs = SegmentFactory().account, SegmentFactory().account
    Suppression.objects.create(account=mine, email_lower="old@example.com", reason="bounced")
    Suppression.objects.create(account=theirs, email_lower="new@example.com", reason="manual")
    report = import_suppressions(account_id=mine.id, addresses=read_text("old@example.com\nnew@example.com"))
    assert [e.address.email for e in report.accepted] == ["new@example.com"]
    assert [(d.line, d.why) for d in report.duplicates] == [(1, "already suppressed")]
    assert dict(Suppression.objects.filter(account=mine).values_list("email_lower", "reason")) == {
        "old@example.com": "bounced", "new@example.com": "imported"}
    assert Suppression.objects.get(account=theirs).reason == "manual"


@pytest.mark.django_db
def test_a_large_list_goes_in_whole_in_one_statement(django_assert_max_num_queries):
    segment = SegmentFactory()
    addresses = read_text("\n".join(f"user{n}@example.com" for n in range(5000)))
    with django_assert_max_num_queries(4):  # segment check, savepoint, insert, release
        report = import_subscribers(segment_id=segment.id, status="confirmed", addresses=addresses)
    assert len(report.accepted) == 5000
    assert Subscriber.objects.filter(segment=segment).count() == 5000


@pytest.mark.django_db
def test_an_import_into_another_segment_does_not_subscribe_again_who_unsubscribed():
    """Ana unsubscribed from the newsletter; the tenant lifted the suppression since (the page
    says she stays unsubscribed). A webinar list that holds her must not make her a confirmed
    subscriber again: the next campaign to the webinar segment would mail her."""
    from growth.audience.opt_outs import find_recipient, remove_suppression, unsubscribe

    newsletter = SegmentFactory()
    webinar = SegmentFactory(account=newsletter.account)
    ana = SubscriberFactory(segment=newsletter, email="ana@example.com")
    unsubscribe(find_recipient(account_id=ana.account_id, subscriber_id=ana.id), campaign_id=None)
    remove_suppression(account_id=ana.account_id,
                       suppression_id=Suppression.objects.get(email_lower="ana@example.com").id)
    report = import_subscribers(segment_id=webinar.id, status="confirmed",
                                addresses=read_csv(io.BytesIO(b"email\nANA@example.com\nbo@example.com\n")))
    assert [e.address.email_lower for e in report.accepted] == ["bo@example.com"]
    assert [(d.email, d.why) for d in report.duplicates] == [
        ("ANA@example.com", "unsubscribed from this sender: only they can subscribe again")]
    assert not Subscriber.objects.filter(segment=webinar, email_lower="ana@example.com").exists()
