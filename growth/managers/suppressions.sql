-- Per-tenant suppressions: an address here is never mailed by that tenant again, whatever its
-- subscriber rows say. Inserts are idempotent: the first reason recorded stays.

-- suppress --
INSERT INTO growth_suppressions (account_id, email_lower, reason, campaign_id)
VALUES (%(account_id)s, %(email_lower)s, %(reason)s, %(campaign_id)s)
ON CONFLICT (account_id, email_lower) DO NOTHING
RETURNING id;

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

-- suppress_bounced --
-- Hard bounces at our own relay: the addresses of these failed sends, each for the tenant of its
-- send and with its campaign, as an ESP's hard bounce does. An address already suppressed keeps
-- its first reason. In address order, so that two workers inserting overlapping addresses wait
-- for each other instead of deadlocking.
INSERT INTO growth_suppressions (account_id, email_lower, reason, campaign_id)
SELECT s.account_id, s.email_lower, 'bounced', s.campaign_id
  FROM growth_sends s
 WHERE s.id = ANY(%(send_ids)s::bigint[])
   AND s.status = 'failed'
 ORDER BY s.account_id, s.email_lower
ON CONFLICT (account_id, email_lower) DO NOTHING
RETURNING email_lower;

-- unsubscribe --
-- A recipient's opt-out: suppress the address for the tenant and mark every subscriber row of
-- that address unsubscribed, in one statement (nothing for an unknown subscriber). The address
-- is the one the message went to (opt_outs.find_recipient), which is the subscriber's own unless
-- an operator edited it since. It says what
-- it changed, for the recipient's undo (resubscribe): the suppression it created (NULL when the
-- address was already suppressed: nothing to undo then) and the subscriber rows it marked, by
-- the status each had. The rows are locked in id order before they are read, so that each one's
-- previous status is its latest.
WITH subscriber AS (
    SELECT account_id, %(email_lower)s::text AS email_lower
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
), previous AS (
    SELECT s.id, s.status
      FROM growth_subscribers s
      JOIN subscriber ON s.account_id = subscriber.account_id
                     AND s.email_lower = subscriber.email_lower
     WHERE s.status <> 'unsubscribed'
     ORDER BY s.id
       FOR UPDATE OF s
), marked AS (
    UPDATE growth_subscribers s
       SET status = 'unsubscribed'
      FROM previous
     WHERE s.id = previous.id
    RETURNING s.id, previous.status AS was
)
SELECT subscriber.email_lower,
       (SELECT id FROM suppressed) AS suppression_id,
       ARRAY(SELECT id FROM marked WHERE was = 'confirmed' ORDER BY id) AS confirmed_ids,
       ARRAY(SELECT id FROM marked WHERE was = 'pending' ORDER BY id) AS pending_ids
  FROM subscriber;

-- _undoable --
-- The recipient's opt-out that an undo token names may still be undone: its suppression is still
-- there, this tenant's and this address's, still 'unsubscribed' (a bounce, a complaint, a
-- tenant's own suppression is never lifted this way), and nothing since has said the address
-- must not be mailed: no ESP feedback that suppressed it, no send to it that failed (a later
-- bounce finds the address suppressed already and leaves only these traces).
x.id = %(suppression_id)s
AND x.account_id = %(account_id)s
AND x.email_lower = %(email_lower)s
AND x.reason = 'unsubscribed'
AND NOT EXISTS (SELECT 1
                  FROM growth_feedback_events f
                 WHERE f.account_id = x.account_id
                   AND f.email_lower = x.email_lower
                   AND f.suppressed
                   AND f.received_at >= x.created_at)
AND NOT EXISTS (SELECT 1                           -- one probe of (campaign, address) a campaign
                  FROM growth_campaigns c
                  JOIN growth_sends s ON s.campaign_id = c.id AND s.email_lower = x.email_lower
                 WHERE c.account_id = x.account_id
                   AND s.status = 'failed'
                   AND s.updated_at >= x.created_at)

-- undoable --
SELECT EXISTS (SELECT 1 FROM growth_suppressions x WHERE {{ _undoable }}) AS undoable;

-- resubscribe --
-- A recipient undoes their own opt-out: lift its suppression if it is _undoable and, in the same
-- statement, set the subscriber rows that opt-out marked back to the status each had, where they
-- are still unsubscribed. Nothing lifted, nothing set back: a row unsubscribed before that
-- opt-out, or by anything else, stays unsubscribed.
WITH lifted AS (
    DELETE FROM growth_suppressions x
     WHERE {{ _undoable }}
    RETURNING x.account_id, x.email_lower
), restored AS (
    UPDATE growth_subscribers s
       SET status = CASE WHEN s.id = ANY(%(confirmed_ids)s::bigint[]) THEN 'confirmed'
                         ELSE 'pending' END
      FROM lifted
     WHERE s.account_id = lifted.account_id
       AND s.email_lower = lifted.email_lower
       AND s.id = ANY(%(confirmed_ids)s::bigint[] || %(pending_ids)s::bigint[])
       AND s.status = 'unsubscribed'
    RETURNING s.id
)
SELECT EXISTS (SELECT 1 FROM lifted) AS lifted, (SELECT count(*) FROM restored) AS restored;
