"""A tenant's opt-out clock (growth.models.OptOutClock): ticks once in every transaction that writes
something that may make a send row ``_blocked`` (sends.sql): a suppression inserted or changed,
a confirmed subscriber no longer confirmed. A worker that looked at its rows' opt-outs, and reads
the same ticks just before the wire, knows that look still stands and does not read the rows
again (sends.sql, ``_opt_outs_moved``).

Triggers, not the managers, move it: every writer of those tables does, raw SQL and the admin
included. A deleted suppression or subscriber blocks nothing, so no trigger is on DELETE (one
would write the clock of an account being deleted again, under its delete). The upsert locks
the tenant's clock row until the writer commits: concurrent opt-outs of one tenant take turns
for that long, those of other tenants do not meet.
"""

import django.db.models.deletion
from django.db import migrations, models

TICK = """
CREATE FUNCTION growth_tick_opt_outs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'ROW' THEN
        INSERT INTO growth_opt_out_clocks AS k (account_id, ticks) VALUES (NEW.account_id, 1)
        ON CONFLICT (account_id) DO UPDATE SET ticks = k.ticks + 1;
    ELSE
        INSERT INTO growth_opt_out_clocks AS k (account_id, ticks)
        SELECT DISTINCT account_id, 1 FROM new_rows ORDER BY account_id
        ON CONFLICT (account_id) DO UPDATE SET ticks = k.ticks + 1;
    END IF;
    RETURN NULL;
END $$;

-- A trigger with transition tables serves one event only.
CREATE TRIGGER growth_suppressions_tick_insert AFTER INSERT ON growth_suppressions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_tick_opt_outs();
CREATE TRIGGER growth_suppressions_tick_update AFTER UPDATE ON growth_suppressions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION growth_tick_opt_outs();
-- Per row, so that the WHEN keeps the function off every other update of a subscriber (an
-- import's, a confirmation's): only an unsubscribe, or an unconfirm, calls it.
CREATE TRIGGER growth_subscribers_tick_unconfirmed AFTER UPDATE OF status ON growth_subscribers
    FOR EACH ROW WHEN (OLD.status = 'confirmed' AND NEW.status <> 'confirmed')
    EXECUTE FUNCTION growth_tick_opt_outs();
"""

UNTICK = """
DROP TRIGGER growth_subscribers_tick_unconfirmed ON growth_subscribers;
DROP TRIGGER growth_suppressions_tick_update ON growth_suppressions;
DROP TRIGGER growth_suppressions_tick_insert ON growth_suppressions;
DROP FUNCTION growth_tick_opt_outs();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('growth', '0021_queued_walk_in_order'),
    ]

    operations = [
        migrations.CreateModel(
            name='OptOutClock',
            fields=[
                ('account', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='+', serialize=False, to='growth.account')),
                ('ticks', models.BigIntegerField(db_default=0)),
            ],
            options={
                'db_table': 'growth_opt_out_clocks',
            },
        ),
        migrations.RunSQL(TICK, reverse_sql=UNTICK),
    ]
