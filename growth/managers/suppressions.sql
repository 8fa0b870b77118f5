-- Per-tenant suppressions: an address here is never mailed by that tenant again, whatever its
-- subscriber rows say. Inserts are idempotent: the first reason recorded stays.

-- suppress --
INSERT INTO growth_suppressions (account_id, email_lower, reason, campaign_id)
VALUES (%(account_id)s, %(email_lower)s, %(reason)s, %(campaign_id)s)
ON CONFLICT (account_id, email_lower) DO NOTHING
RETURNING id;

-- unsubscribe --
-- A recipient's opt-out: suppress the address for the tenant and mark every subscriber row of
-- that address unsubscribed, in one statement. Returns nothing for an unknown subscriber.
WITH subscriber AS (
    SELECT account_id, email_lower
      FROM growth_subscribers
     WHERE id = %(subscriber_id)s AND account_id = %(account_id)s
), suppressed AS (
    INSERT INTO growth_suppressions (account_id, email_lower, reason, campaign_id)
    SELECT account_id, email_lower, 'unsubscribed',
           (SELECT c.id FROM growth_campaigns c     -- only a campaign of this tenant
             WHERE c.id = %(campaign_id)s AND c.account_id = subscriber.account_id)
      FROM subscriber
    ON CONFLICT (account_id, email_lower) DO NOTHING
    RETURNING id
), marked AS (
    UPDATE growth_subscribers s
       SET status = 'unsubscribed'
      FROM subscriber
     WHERE s.account_id = subscriber.account_id
       AND s.email_lower = subscriber.email_lower
       AND s.status <> 'unsubscribed'
    RETURNING s.id
)
-- (data-modifying CTEs run whether or not the SELECT reads them)
SELECT subscriber.email_lower
  FROM subscriber;

-- suppress_many --
-- Several addresses at once, in one statement (all or nothing); returns the ones that were new.
INSERT INTO growth_suppressions (account_id, email_lower, reason)
SELECT %(account_id)s, e, %(reason)s
  FROM unnest(%(emails)s::text[]) AS e
ON CONFLICT (account_id, email_lower) DO NOTHING
RETURNING email_lower;

-- remove --
-- Lift one suppression of this tenant (the account in the WHERE: another tenant's id is no row)
DELETE FROM growth_suppressions
 WHERE id = %(suppression_id)s
   AND account_id = %(account_id)s
RETURNING email_lower;
