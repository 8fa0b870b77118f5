"""A tenant's opt-out clock (growth.models.OptOutClock): ticks once in every transaction that writes
something that may make a send row ``_blocked`` (sends.sql): a suppression inserted or changed,
a confirmed subscriber no longer confirmed. A worker that looked at its rows' opt-outs, and reads
the same ticks just before the wire, knows that look still stands and does not read the rows
again (sends.sql, ``opt_outs_moved``).

Triggers, not the managers, move it: every writer of those tables does, raw SQL and the admin
included. A deleted suppression or subscriber blocks nothing, so no trigger is on DELETE (one
would write the clock of an account being deleted again, under its delete).

Deferred to the commit (constraint triggers, INITIALLY DEFERRED): the tick locks the tenant's
clock row, and taken at the write, that lock lasted the writer's whole transaction, so every other
opt-out of the tenant waited for it, the public unsubscribe page included (the chaos harness's
opt-out driver, which suppresses and clicks one-click links within one transaction, waited on
itself through the web server). At the commit it lasts the commit. Visibility is unchanged: the
tick commits with the write. One tick a tenant a transaction is enough (a reader only asks
whether the clock moved): the transaction remembers it ticked in a setting of its own.
"""

import django.db.models.deletion
from django.db import migrations, models

TICK = """
CREATE FUNCTION growth_tick_opt_outs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ticked text := 'growth.opt_outs_ticked_' || NEW.account_id;
BEGIN
    IF current_setting(ticked, true) IS DISTINCT FROM 'yes' THEN
        INSERT INTO growth_opt_out_clocks AS k (account_id, ticks) VALUES (NEW.account_id, 1)
        ON CONFLICT (account_id) DO UPDATE SET ticks = k.ticks + 1;
        PERFORM set_config(ticked, 'yes', true);  -- until this transaction ends
    END IF;
    RETURN NULL;
END $$;

CREATE CONSTRAINT TRIGGER growth_suppressions_tick AFTER INSERT OR UPDATE ON growth_suppressions
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION growth_tick_opt_outs();
-- The WHEN keeps the function off every other update of a subscriber (an import's, a
-- confirmation's): only an unsubscribe, or an unconfirm, queues it.
CREATE CONSTRAINT TRIGGER growth_subscribers_tick_unconfirmed
    AFTER UPDATE OF status ON growth_subscribers
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (OLD.status = 'confirmed' AND NEW.status <> 'confirmed')
    EXECUTE FUNCTION growth_tick_opt_outs();
"""

UNTICK = """
DROP TRIGGER growth_subscribers_tick_unconfirmed ON growth_subscribers;
DROP TRIGGER growth_suppressions_tick ON growth_suppressions;
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
