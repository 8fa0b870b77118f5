"""The reputation guard's hard refusals counted from an index, not from the rows' reply text.

growth_hard_refusal(reply) is the one SQL statement of the rule that
growth.feedback.bounces.smtp_hard_bounce states in Python (tests/test_reputation.py checks that
the two agree): our relay refused the message for good because of its address, a 5.1.x or 5.2.1
reply, not 5.1.7 / 5.1.8 (those are about the sender).

send_hard_refused holds only such failed rows, by (campaign_id, updated_at): the figures count a
campaign's refusals in the window with an index-only range and find the newest by its last entry.
Reading the rows instead took 1.2 s beside 500,000 of them (25 ms from the index, vacuumed).
Rows that fail otherwise, and every other row, never enter it; built CONCURRENTLY, so a live send
is not held up. reputation.sql's _hard_refused is this predicate, as its queries write it.
"""

from django.db import migrations

HARD_REFUSAL = r"""
CREATE FUNCTION growth_hard_refusal(reply text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN reply ~ '^5[0-9]{2} 5\.(1\.[0-9]{1,3}|2\.1)(\s|$)'
       AND reply !~ '^5[0-9]{2} 5\.1\.[78](\s|$)';
"""


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY

    dependencies = [
        ('growth', '0015_send_tallies'),
    ]

    operations = [
        migrations.RunSQL(HARD_REFUSAL, reverse_sql="DROP FUNCTION growth_hard_refusal(text);"),
        migrations.RunSQL(
            "CREATE INDEX CONCURRENTLY send_hard_refused ON growth_sends (campaign_id, updated_at) "
            "WHERE status = 'failed' AND growth_hard_refusal(last_error);",
            reverse_sql="DROP INDEX CONCURRENTLY send_hard_refused;"),
    ]
