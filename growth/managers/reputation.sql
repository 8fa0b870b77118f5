-- The reputation guard's reads (growth.reputation.guard): each tenant's bounce and complaint
-- figures over the sends of the last %(days)s days, and the lock under which the guard pauses a
-- tenant's sending campaigns with the engine's own `pause` compare-and-set.
--
-- The window is counted per campaign, never by account alone (growth_sends has no account index,
-- on purpose): the tenant's campaigns that can have sent in the window (started, not finished
-- before it) through growth_campaigns' account_id index, then per campaign a few rows of its
-- tallies (sent) and one range of the partial index send_hard_refused. Feedback comes from
-- growth_feedback_events by its campaign_id index, each event's send by primary key: events are
-- few, sends are many, so the join goes from the events to the sends, never the other way.

-- _hard_refused --
-- The row failed because our relay refused it for good for its address (growth_hard_refusal(),
-- migration 0016): the predicate of the partial index send_hard_refused, written as the index
-- has it so that the planner can use it. Unqualified: the growth_sends of the innermost FROM.
(status = 'failed' AND growth_hard_refusal(last_error))

-- _rates --
-- The body shared by `rates` and `rates_of_sending_tenants`, after their `accounts` CTE.
--   sent             rows accepted by the receiving side in the window (status 'sent')
--   bounced_sent     of those, rows a hard bounce was reported for afterwards (ESP, mailbox)
--   bounced_failed   rows refused for good in the window: by our relay at once (a 5.1.x reply,
--                    growth_hard_refusal(), migration 0016) or failed with a reported hard
--                    bounce (a send in doubt settled by it); a row that is both counts once
--   complained       rows a complaint was reported for (a Postmark SpamNotification, a receiving
--                    filter, is recorded unsuppressed and is not one)
--   *_at             when the newest of that evidence reached us (the database's clock)
-- A send counts once per kind, whichever ESP or mailbox reported it and however often.
campaigns AS (
    SELECT c.id, c.account_id
      FROM growth_campaigns c
     WHERE c.account_id IN (SELECT account_id FROM accounts)
       AND c.started_at IS NOT NULL
       AND (c.finished_at IS NULL OR c.finished_at >= now() - make_interval(days => %(days)s))
), sent AS (
    -- from each campaign's tallies of sent rows (tallies.sql), not its rows: the window starts
    -- at the start of its first minute. LATERAL: the campaign's id reaches the view's indexes.
    SELECT c.account_id, sum(k.n)::bigint AS n
      FROM campaigns c
     CROSS JOIN LATERAL (
           SELECT sum(t.sends) AS n
             FROM growth_send_counts t
            WHERE t.campaign_id = c.id
              AND t.status = 'sent'
              AND t.sent_minute >= date_trunc('minute', now() - make_interval(days => %(days)s),
                                              'UTC')) AS k
     GROUP BY c.account_id
), reported AS (
    SELECT c.account_id, e.event_type, e.send_id, s.status AS send_status, s.refused,
           max(e.received_at) AS at
      FROM campaigns c
      JOIN growth_feedback_events e
        ON e.campaign_id = c.id
       AND e.account_id = c.account_id
       AND e.event_type IN ('bounced', 'complained')
       AND e.suppressed
     -- each event's send by primary key (OFFSET 0 keeps the probe: as a join, the planner
     -- hashed a scan of every send, 416 ms for a tenant with no events beside 1M sends)
     CROSS JOIN LATERAL (SELECT x.status, x.sent_at, x.updated_at,
                                {{ _hard_refused }} AS refused  -- counted in `refused` already
                           FROM growth_sends x
                          WHERE x.id = e.send_id
                         OFFSET 0) AS s
     WHERE coalesce(s.sent_at, s.updated_at) >= now() - make_interval(days => %(days)s)
     GROUP BY c.account_id, e.event_type, e.send_id, s.status, s.refused
), refused AS (
    -- per campaign, a range of the partial index send_hard_refused (campaign_id, updated_at),
    -- which holds only failed rows with a hard refusal: counted index-only, the newest its last
    -- entry; the rows' reply text is never read (it was: 1.2 s beside 500,000 of them)
    SELECT c.account_id, sum(k.n)::bigint AS n, max(k.at) AS at
      FROM campaigns c
     CROSS JOIN LATERAL (
           SELECT count(*) AS n, max(s.updated_at) AS at
             FROM growth_sends s
            WHERE s.campaign_id = c.id
              AND {{ _hard_refused }}
              AND s.updated_at >= now() - make_interval(days => %(days)s)) AS k
     GROUP BY c.account_id
)
SELECT a.account_id,
       acc.name AS account_name,
       coalesce((SELECT n FROM sent WHERE sent.account_id = a.account_id), 0) AS sent,
       (SELECT count(*) FROM reported r
         WHERE r.account_id = a.account_id AND r.event_type = 'bounced'
           AND r.send_status = 'sent') AS bounced_sent,
       coalesce((SELECT n FROM refused f WHERE f.account_id = a.account_id), 0)
       + (SELECT count(*) FROM reported r
           WHERE r.account_id = a.account_id AND r.event_type = 'bounced'
             AND r.send_status <> 'sent' AND NOT r.refused) AS bounced_failed,
       (SELECT count(*) FROM reported r
         WHERE r.account_id = a.account_id AND r.event_type = 'complained') AS complained,
       greatest((SELECT max(r.at) FROM reported r
                  WHERE r.account_id = a.account_id AND r.event_type = 'bounced'),
                (SELECT f.at FROM refused f WHERE f.account_id = a.account_id)) AS bounced_at,
       (SELECT max(r.at) FROM reported r
         WHERE r.account_id = a.account_id AND r.event_type = 'complained') AS complained_at
  FROM accounts a
  JOIN growth_accounts acc ON acc.id = a.account_id
 ORDER BY a.account_id

-- rates --
-- The figures of the given tenants (the admin's panel and warnings, the feedback path's check).
-- No JIT: the estimates over a big tenant's sends cross jit_above_cost, and compiling took 80 of
-- a page's 129 ms beside 1M sends (a small tenant's figures, nothing to compile for).
SET LOCAL jit = off;
WITH accounts AS (
    SELECT DISTINCT unnest(%(account_ids)s::bigint[]) AS account_id
), {{ _rates }};

-- rates_of_sending_tenants --
-- The figures of every tenant with a campaign sending now: the only ones the guard can pause.
-- Found through the partial index campaign_sending (status = 'sending'). No JIT, as in rates.
SET LOCAL jit = off;
WITH accounts AS (
    SELECT DISTINCT account_id FROM growth_campaigns WHERE status = 'sending'
), {{ _rates }};

-- lock_to_pause --
-- The tenant's sending campaigns that the evidence is news to: started, built, resumed or
-- otherwise moved (updated_at) before the newest evidence reached us. Locked until the caller's
-- transaction ends, so that none of them is resumed, paused or cancelled between this read and
-- the pause that follows it in the same transaction (EvalPlanQual re-checks the condition on a
-- row another transaction changed first); a campaign someone else holds now is skipped until the
-- next pass, never waited for. Served by growth_campaigns' account_id index.
SELECT id
  FROM growth_campaigns
 WHERE account_id = %(account_id)s
   AND status = 'sending'
   AND updated_at < %(evidence_at)s
 ORDER BY id
   FOR NO KEY UPDATE SKIP LOCKED;
