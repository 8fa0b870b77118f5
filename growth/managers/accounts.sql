-- edit --
-- An editor's save of the account's change form (growth.admin.account_edits), only onto the
-- version the form was loaded from: after a save since (another editor's, or another tab's) it
-- writes nothing and returns no row, for the caller to refuse. A change of what the form shows,
-- its fields or its members (memberships_changed: saved with it, in the same transaction), is a
-- new version; a save of the same values is none.
UPDATE growth_accounts
   SET name = %(name)s, slug = %(slug)s, from_email = %(from_email)s, from_name = %(from_name)s,
       time_zone = %(time_zone)s, warmup_started_on = %(warmup_started_on)s,
       warmup_daily_start = %(warmup_daily_start)s, warmup_daily_growth = %(warmup_daily_growth)s,
       warmup_until = %(warmup_until)s,
       version = version
                 + CASE WHEN %(memberships_changed)s
                          OR (name, slug, from_email, from_name, time_zone, warmup_started_on,
                              warmup_daily_start, warmup_daily_growth, warmup_until)
                             IS DISTINCT FROM (%(name)s, %(slug)s, %(from_email)s, %(from_name)s,
                                               %(time_zone)s, %(warmup_started_on)s::date,
                                               %(warmup_daily_start)s, %(warmup_daily_growth)s,
                                               %(warmup_until)s)
                        THEN 1 ELSE 0 END
 WHERE id = %(id)s
   AND version = %(version)s
RETURNING version;

-- members_changed --
-- A membership of these accounts was changed or deleted on its own page: what their change forms
-- show moved, so a form loaded before is refused (its members' inline would post the old role
-- back and, unrefused, restore it). A member added there is no new version: a form that does not
-- list it cannot undo it.
UPDATE growth_accounts SET version = version + 1 WHERE id = ANY(%(ids)s::bigint[]);
