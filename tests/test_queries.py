"""The named-SQL-block loader every manager uses."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from growth.managers import campaigns, feedback, leases, sends, suppressions
from growth.managers.queries import Prepared, Queries, array_literal, load
from growth.models import Send
from growth.sending.transports import Outcome
from tests.helpers import subprocess_env
from tests.scenarios import sending_campaign


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


def test_a_block_of_the_file_beside_is_spliced_in_by_its_stem(tmp_path):
    (tmp_path / "rules.sql").write_text("-- _active --\nstatus = 'active'\n")
    (tmp_path / "users.sql").write_text("-- active --\nSELECT id FROM u WHERE {{ rules._active }};\n")
    assert load(tmp_path / "users.sql") == {"active": "SELECT id FROM u WHERE status = 'active'"}


def test_two_files_may_use_each_other_s_blocks_but_not_in_a_circle(tmp_path):
    (tmp_path / "a.sql").write_text("-- _x --\nx = 1\n-- q --\nSELECT {{ b.r }};\n")
    (tmp_path / "b.sql").write_text("-- r --\nSELECT 1 WHERE {{ a._x }};\n"
                                    "-- s --\nSELECT {{ a.q }};\n-- _loop --\n{{ a.loop }}\n")
    assert load(tmp_path / "b.sql")["s"] == "SELECT SELECT SELECT 1 WHERE x = 1"
    (tmp_path / "a.sql").write_text("-- loop --\nSELECT {{ b._loop }};\n")
    with pytest.raises(ValueError, match="'loop' uses itself"):
        load(tmp_path / "a.sql")
    with pytest.raises(ValueError, match=r"'q' uses 'b\.nothing', which is no block"):
        (tmp_path / "a.sql").write_text("-- q --\nSELECT {{ b.nothing }};\n")
        load(tmp_path / "a.sql")


def test_the_settle_policy_is_written_once_and_stands_in_both_protocols_settles():
    policy = "2 ^ (r.attempt - 1)"
    assert sends.QUERIES.path.read_text().count(policy) == 1
    assert policy in sends.QUERIES["settle"] and policy in leases.QUERIES["settle"]


def test_the_opt_out_condition_is_written_once_and_stands_in_claim_hand_over_and_blocked():
    condition = "(SELECT sub.status FROM growth_subscribers sub WHERE sub.id = s.subscriber_id)"
    assert sends.QUERIES.path.read_text().count(condition) == 1
    for name in ("claim", "hand_over", "blocked"):
        assert condition in sends.QUERIES[name]
    for name in ("claim", "hand_over"):  # the lease protocol's
        assert condition in leases.QUERIES[name]


def test_the_opt_out_clock_is_read_in_one_place_for_the_claim_and_the_look_before_the_wire():
    clock = "FROM growth_opt_out_clocks k"
    assert sends.QUERIES.path.read_text().count(clock) == 1
    assert clock in sends.QUERIES["opt_outs_moved"] and clock in leases.QUERIES["claim"]
    assert clock not in leases.QUERIES["hand_over"]  # a plain receiver's: it writes what it finds


@pytest.mark.parametrize("module", [campaigns, feedback, leases, sends, suppressions])
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


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("prepared", [True, False])
def test_statements_run_together_may_commit_without_waiting_for_the_disk(tmp_path, settings,
                                                                         prepared):
    settings.DATABASE_PREPARED_STATEMENTS = prepared
    queries = Queries(write(tmp_path, "-- setting --\n"
                                      "SELECT current_setting('synchronous_commit') AS s;"))
    (rows,) = queries.together(("setting", {}), wait_for_flush=False)
    assert rows == [{"s": "off"}]
    assert queries.together(("setting", {})) == [[{"s": "on"}]]


def test_a_prepared_block_numbers_its_parameters_by_first_use_and_leaves_its_settings_out():
    prepared = Prepared.of("growth_q_x", "SET LOCAL enable_nestloop = off;\n"
                                         "SELECT %(b)s, %(a)s, %(b)s, 10 %% 3")
    assert prepared.name.startswith("growth_q_x_")
    assert prepared.definition == f"PREPARE {prepared.name} AS SELECT $1, $2, $1, 10 % 3"
    assert prepared.execute == f"EXECUTE {prepared.name}(%(b)s, %(a)s)"
    assert prepared.set_locals == "SET LOCAL enable_nestloop = off;\n"  # sent before each call
    other = Prepared.of("growth_q_x", "SELECT 1")  # same name, another text: another statement
    assert other.execute == f"EXECUTE {other.name}" and other.name != prepared.name


def _chunks_on_a_wire(campaign, count: int) -> dict[int, str]:
    """What a wire does: hand over a chunk, then settle it with the next one's hand-over."""
    claimed = Send.objects.claim(worker_id="w", batch_size=count, lease=60)
    attempts = {row.id: row.attempts for row in claimed}
    ids = [row.id for row in claimed]
    handed = Send.objects.hand_over(claimed[:1], worker_id="w")
    for previous, current in itertools.pairwise(claimed):
        settled, now_handed = Send.objects.settle_and_hand_over(
            [Outcome(previous.id, Outcome.SENT)], [current], campaign_id=campaign.id,
            worker_id="w", attempts=attempts, retry_for=60, backoff_base=1.0, backoff_max=1.0)
        assert settled == {previous.id: "sent"}
        handed |= now_handed
    Send.objects.settle([Outcome(ids[-1], Outcome.SENT)], campaign_id=campaign.id,
                        worker_id="w", attempts=attempts, retry_for=60, backoff_base=1.0,
                        backoff_max=1.0)
    return handed


def _prepared_here() -> dict[str, tuple[int, int]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, generic_plans, custom_plans FROM pg_prepared_statements")
        return {name.rsplit("_", 1)[0]: (generic, custom)  # less its text's hash
                for name, generic, custom in cursor.fetchall()}


@pytest.mark.django_db(transaction=True)
def test_the_wire_statements_are_prepared_once_per_connection_and_planned_once(settings):
    settings.DATABASE_PREPARED_STATEMENTS = True
    campaign = sending_campaign(count=6)
    connection.close()  # a connection of its own: nothing prepared on it yet
    assert set(_chunks_on_a_wire(campaign, 3).values()) == {"sending"}
    plans = _prepared_here()
    assert set(plans) == {"growth_sends_hand_over", "growth_sends_settle"}
    assert plans["growth_sends_hand_over"] == (3, 0)  # one generic plan, used 3 times
    assert plans["growth_sends_settle"] == (3, 0)
    connection.close()  # a new connection prepares them again
    assert set(_chunks_on_a_wire(campaign, 3).values()) == {"sending"}
    assert _prepared_here() == plans
    assert Send.objects.filter(status="sent").count() == 6


@pytest.mark.django_db(transaction=True)
def test_with_the_setting_off_nothing_is_prepared(settings):
    settings.DATABASE_PREPARED_STATEMENTS = False
    campaign = sending_campaign(count=3)
    connection.close()
    assert set(_chunks_on_a_wire(campaign, 3).values()) == {"sending"}
    assert _prepared_here() == {}
    assert Send.objects.filter(status="sent").count() == 3


@pytest.mark.parametrize(("pool_mode", "asked", "prepared"), [
    ("session", "", "True"), ("session", "false", "False"), ("transaction", "true", "False")])
def test_behind_transaction_pooling_nothing_is_ever_prepared(pool_mode, asked, prepared):
    env = subprocess_env(DATABASE_POOL_MODE=pool_mode, DATABASE_PREPARED_STATEMENTS=asked)
    if not asked:
        del env["DATABASE_PREPARED_STATEMENTS"]
    shown = subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings; "
                               "print(settings.DATABASE_PREPARED_STATEMENTS)"],
        env={**env, "DJANGO_SETTINGS_MODULE": "zylior.settings"}, capture_output=True,
        text=True, check=True)
    assert shown.stdout.strip() == prepared


_ELEMENT_TYPES = {str: "text", int: "bigint", float: "float8"}


@pytest.mark.django_db
@hypothesis_settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(
    # text PostgreSQL can hold: UTF-8, so no lone surrogate, and no NUL
    st.lists(st.one_of(st.none(), st.text(st.characters(codec="utf-8",
                                                        exclude_characters="\x00")))),
    st.lists(st.one_of(st.none(), st.integers(min_value=-2**63, max_value=2**63 - 1))),
    st.lists(st.one_of(st.none(), st.floats(allow_nan=False)))))
def test_an_array_literal_reads_back_as_the_values_it_was_made_of(values):
    kind = next((type(v) for v in values if v is not None), str)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT %(values)s::{_ELEMENT_TYPES[kind]}[]",
                       {"values": array_literal(values)})
        assert cursor.fetchone()[0] == values


@pytest.mark.parametrize("value", [True, b"bytes", object()])
def test_an_array_literal_refuses_what_it_cannot_quote(value):
    with pytest.raises(TypeError):
        array_literal([value])
