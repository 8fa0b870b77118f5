"""The named-SQL-block loader every manager uses."""

from __future__ import annotations

import pytest
from django.db import transaction

from growth.managers import campaigns, feedback, sends, suppressions
from growth.managers.queries import Queries, load


def write(tmp_path, text):
    path = tmp_path / "q.sql"
    path.write_text(text)
    return path


def test_blocks_are_split_by_name_without_their_comments(tmp_path):
    path = write(tmp_path, """-- A file comment before any block is ignored.

-- first --
-- Describes the first query
SELECT 1;

-- second_one --
SELECT *
  -- an indented comment line goes too
  FROM t  -- a trailing comment stays
 WHERE x = %(x)s;
""")
    assert load(path) == {
        "first": "SELECT 1",
        "second_one": "SELECT *\n  FROM t  -- a trailing comment stays\n WHERE x = %(x)s",
    }


def test_a_name_used_twice_is_refused(tmp_path):
    with pytest.raises(ValueError, match="used twice"):
        load(write(tmp_path, "-- a --\nSELECT 1;\n-- a --\nSELECT 2;\n"))


def test_an_empty_block_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'a' is empty"):
        load(write(tmp_path, "-- a --\n-- only a comment\n-- b --\nSELECT 2;\n"))


def test_a_block_uses_another_by_name_and_fragments_are_not_queries(tmp_path):
    path = write(tmp_path, """-- _active --
-- a condition
status = 'active'

-- active_ids --
SELECT id FROM t WHERE {{ _active }};

-- count_active --
SELECT count(*) FROM ({{ active_ids }}) AS a;
""")
    assert load(path) == {
        "active_ids": "SELECT id FROM t WHERE status = 'active'",
        "count_active": "SELECT count(*) FROM (SELECT id FROM t WHERE status = 'active') AS a",
    }


@pytest.mark.parametrize("text, error", [
    ("-- a --\nSELECT {{ b }};\n", "'a' uses 'b', which is no block"),
    ("-- a --\nSELECT {{ b }};\n-- b --\nSELECT {{ a }};\n", "'a' uses itself"),
])
def test_a_use_of_a_missing_or_circular_block_is_refused(tmp_path, text, error):
    with pytest.raises(ValueError, match=error):
        load(write(tmp_path, text))


def test_the_opt_out_condition_is_written_once_and_stands_in_claim_hand_over_and_blocked():
    condition = "(SELECT sub.status FROM growth_subscribers sub WHERE sub.id = s.subscriber_id)"
    assert sends.QUERIES.path.read_text().count(condition) == 1
    for name in ("claim", "hand_over", "blocked"):
        assert condition in sends.QUERIES[name]


@pytest.mark.parametrize("module", [campaigns, feedback, sends, suppressions])
def test_every_manager_query_file_loads(module):
    assert module.QUERIES.statements and all(q.strip() for q in module.QUERIES.statements.values())


def _setting_in_statement(tmp_path, **options) -> str:
    queries = Queries(write(tmp_path, "-- setting --\nSELECT current_setting('synchronous_commit') AS s;"))
    return queries.rows("setting", **options)[0]["s"]


@pytest.mark.django_db(transaction=True)
def test_a_statement_may_commit_without_waiting_for_the_disk_and_leaves_the_session_as_it_was(tmp_path):
    assert _setting_in_statement(tmp_path, wait_for_flush=False) == "off"
    assert _setting_in_statement(tmp_path) == "on"  # the setting ended with that statement's transaction


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_the_caller_keeps_its_durability(tmp_path):
    with transaction.atomic():
        assert _setting_in_statement(tmp_path, wait_for_flush=False) == "on"
        assert _setting_in_statement(tmp_path) == "on"
