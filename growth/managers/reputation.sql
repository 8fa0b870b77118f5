-- The reputation guard's reads (growth.reputation.guard): each tenant's bounce and complaint
-- figures over the sends of the last %(days)s days, and the lock under which the guard pauses a
-- tenant's sending campaigns with the engine's own `pause` compare-and-set.
--
-- The window is counted per campaign, never by account alone (growth_sends has no account index,
-- on purpose): the tenant's campaigns that can have sent in the window (started, not finished
-- before it) through growth_campaigns' account_id index, then per campaign a few rows of its
-- tallies (sent, and of those the ones reported bounced or complained about), one range each of
-- the partial indexes send_hard_refused, send_bounced_unsent and send_complained_unsent (relay
-- refusals; reported rows not 'sent'), and one probe of feedback_campaign_news per kind. No
-- event is read one by one and no send is probed: the reported kinds are kept on the sends
-- (migration 0017), where the tallies see them. Before that, each event's send was probed by
-- primary key: 245 ms beside 40,000 events at 1M.

-- _hard_refused --
-- The row failed because our relay refused it for good for its address (growth_hard_refusal(),
-- migration 0016): the predicate of the partial index send_hard_refused, written as the index
-- has it so that the planner can use it. Unqualified: the growth_sends of the innermost FROM.
(status = 'failed' AND growth_hard_refusal(last_error))

-- _bounced_unsent --
-- A hard bounce was reported about the row, it is not 'sent', and it is not a refusal (counted
-- with those): the predicate of the partial index send_bounced_unsent (migration 0018), as the
-- index has it. Unqualified.
(bounce_reported AND NOT status = 'sent'
 AND NOT (status = 'failed' AND growth_hard_refusal(last_error)))

-- _complained_unsent --
-- A complaint was reported about the row and it is not 'sent': the predicate of the partial
-- index send_complained_unsent (migration 0018), as the index has it. Unqualified.
(complaint_reported AND NOT status = 'sent')

-- _rates --
-- The body shared by `rates` and `rates_of_sending_tenants`, after their `accounts` CTE.
--   sent             rows accepted by the receiving side in the window (status 'sent')
--   bounced_sent     of those, rows a hard bounce was reported for afterwards (ESP, mailbox)
--   bounced_failed   rows refused for good in the window: by our relay at once (a 5.1.x reply,
--                    growth_hard_refusal(), migration 0016) or not 'sent' with a reported hard
--                    bounce (a send in doubt settled by it); a row that is both counts once
--   complained       rows a complaint was reported for (a Postmark SpamNotification, a receiving
--                    filter, is recorded unsuppressed and is not one)
--   bounced_at       when the newest hard bounce about the campaigns, or refusal in the window,
--                    reached us (the database's clock)
--   complained_at    when the newest complaint about the campaigns reached us
-- A send counts once per kind, whichever ESP or mailbox reported it and however often. Sent rows
-- are in the window from the start of its first minute on (the tallies' minutes); other rows by
-- their last change (updated_at).
campaigns AS (
    SELECT c.id, c.account_id
      FROM growth_campaigns c
     WHERE c.account_id IN (SELECT account_id FROM accounts)
       AND c.started_at IS NOT NULL
       AND (c.finished_at IS NULL OR c.finished_at >= now() - make_interval(days => %(days)s))
), sent AS (
    -- from each campaign's tallies of sent rows (tallies.sql), not its rows. LATERAL: the
    -- campaign's id reaches the view's indexes.
    SELECT c.account_id, sum(k.n)::bigint AS n, sum(k.bounced)::bigint AS bounced,
           sum(k.complained)::bigint AS complained
      FROM campaigns c
     CROSS JOIN LATERAL (
           SELECT sum(t.sends) AS n,
                  sum(t.sends) FILTER (WHERE t.bounce_reported) AS bounced,
                  sum(t.sends) FILTER (WHERE t.complaint_reported) AS complained
             FROM growth_send_counts t
            WHERE t.campaign_id = c.id
              AND t.status = 'sent'
              AND t.sent_minute >= date_trunc('minute', now() - make_interval(days => %(days)s),
                                              'UTC')) AS k
     GROUP BY c.account_id
), unsent AS (
    -- the reported rows that are not 'sent' (in doubt, or failed when the report came), dated by
    -- their last change: per campaign and kind a range of a partial index that holds only them,
    -- counted index-only
    SELECT c.account_id, sum(b.n)::bigint AS bounced, sum(p.n)::bigint AS complained
      FROM campaigns c
     CROSS JOIN LATERAL (
           SELECT count(*) AS n
             FROM growth_sends s
            WHERE s.campaign_id = c.id
              AND {{ _bounced_unsent }}
              AND s.updated_at >= now() - make_interval(days => %(days)s)) AS b
     CROSS JOIN LATERAL (
           SELECT count(*) AS n
             FROM growth_sends s
            WHERE s.campaign_id = c.id
              AND {{ _complained_unsent }}
              AND s.updated_at >= now() - make_interval(days => %(days)s)) AS p
     GROUP BY c.account_id
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
), news AS (
    -- per campaign and kind, the last entry of its range of feedback_campaign_news
    SELECT c.account_id, max(b.at) AS bounced_at, max(p.at) AS complained_at
      FROM campaigns c
     CROSS JOIN LATERAL (
           SELECT max(e.received_at) AS at
             FROM growth_feedback_events e
            WHERE e.campaign_id = c.id AND e.event_type = 'bounced' AND e.suppressed) AS b
     CROSS JOIN LATERAL (
           SELECT max(e.received_at) AS at
             FROM growth_feedback_events e
            WHERE e.campaign_id = c.id AND e.event_type = 'complained' AND e.suppressed) AS p
     GROUP BY c.account_id
)
SELECT a.account_id,
       acc.name AS account_name,
       coalesce(s.n, 0) AS sent,
       coalesce(s.bounced, 0) AS bounced_sent,
       coalesce(f.n, 0) + coalesce(u.bounced, 0) AS bounced_failed,
       coalesce(s.complained, 0) + coalesce(u.complained, 0) AS complained,
       greatest(n.bounced_at, f.at) AS bounced_at,
       n.complained_at
  FROM accounts a
  JOIN growth_accounts acc ON acc.id = a.account_id
  LEFT JOIN sent s ON s.account_id = a.account_id
  LEFT JOIN unsent u ON u.account_id = a.account_id
  LEFT JOIN refused f ON f.account_id = a.account_id
  LEFT JOIN news n ON n.account_id = a.account_id
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
