-- edit --
-- A save of a membership (growth.admin.membership_edits: its own page, or its account's members),
-- only onto the version its form was loaded from: after a save since it writes nothing and
-- returns no row, for the caller to refuse. A change of what its page shows is a new version; a
-- save of the same values is none.
UPDATE growth_memberships
   SET user_id = %(user_id)s, account_id = %(account_id)s, role = %(role)s,
       version = version
                 + CASE WHEN (user_id, account_id, role)
                             IS DISTINCT FROM (%(user_id)s, %(account_id)s, %(role)s)
                        THEN 1 ELSE 0 END
 WHERE id = %(id)s
   AND version = %(version)s
RETURNING version;
