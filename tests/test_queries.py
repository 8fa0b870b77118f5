"""The named-SQL-block loader every manager uses."""

from __future__ import annotations

import pytest
from django.db import transaction

from growth.managers import campaigns, feedback, sends, suppressions
from growth.managers.queries import fetchall, load


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


@pytest.mark.parametrize("module", [campaigns, feedback, sends, suppressions])
def test_every_manager_query_file_loads(module):
    assert module.QUERIES and all(q.strip() for q in module.QUERIES.values())


def _setting_in_statement(**options) -> str:
    return fetchall("SELECT current_setting('synchronous_commit')", **options)[0][0]


@pytest.mark.django_db(transaction=True)
def test_a_statement_may_commit_without_waiting_for_the_disk_and_leaves_the_session_as_it_was():
    assert _setting_in_statement(wait_for_flush=False) == "off"
    assert _setting_in_statement() == "on"  # the setting ended with that statement's transaction


@pytest.mark.django_db(transaction=True)
def test_inside_a_transaction_the_caller_keeps_its_durability():
    with transaction.atomic():
        assert _setting_in_statement(wait_for_flush=False) == "on"
        assert _setting_in_statement() == "on"
