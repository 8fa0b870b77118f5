-- Subscriber writes that must not race a recipient's opt-out: a status is only ever moved by a
-- compare-and-set, and an import never touches a row that already exists.

-- add_many --
-- An import: every new address of the segment, in one statement (all or nothing). An address
-- already in the segment keeps its row, status included, and one that unsubscribed from any
-- segment of the tenant is not added: an import never re-subscribes anyone (a suppression
-- lifted since does not subscribe them again either; only they can).
INSERT INTO growth_subscribers (account_id, segment_id, email, email_lower, status)
SELECT g.account_id, g.id, r.email, r.email_lower, %(status)s
  FROM growth_segments g,
       unnest(%(emails)s::text[], %(email_lowers)s::text[]) AS r(email, email_lower)
 WHERE g.id = %(segment_id)s
   AND NOT EXISTS (SELECT 1
                     FROM growth_subscribers u
                    WHERE u.account_id = g.account_id
                      AND u.email_lower = r.email_lower
                      AND u.status = 'unsubscribed')
ON CONFLICT (segment_id, email_lower) DO NOTHING
RETURNING email_lower;

-- confirm_pending --
-- pending -> confirmed only: an unsubscribed address is never confirmed again from here
UPDATE growth_subscribers
   SET status = 'confirmed'
 WHERE id = ANY(%(ids)s)
   AND status = 'pending'
RETURNING id;

-- unsubscribe_address --
-- A complaint or an opt-out reported by a provider: every subscriber row of the address in this
-- tenant (the same address may be in several segments), and no other tenant's.
UPDATE growth_subscribers
   SET status = 'unsubscribed'
 WHERE account_id = %(account_id)s
   AND email_lower = %(email_lower)s
   AND status <> 'unsubscribed'
RETURNING id;
