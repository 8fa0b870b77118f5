-- Campaign transitions. Each is ONE compare-and-set statement: the expected status lives in the
-- WHERE of the UPDATE itself, so of any number of concurrent callers exactly one gets the row
-- back and the others get zero rows. Never SELECT the status and UPDATE it afterwards.

-- approve --
-- draft -> approved, only for the version that was validated (updated_at unchanged since);
-- "send now" sets the start to the database's now in the same statement
UPDATE growth_campaigns
   SET status = 'approved',
       scheduled_for = CASE WHEN %(send_now)s THEN now() ELSE scheduled_for END,
       updated_at = now()
 WHERE id = %(campaign_id)s
   AND status = 'draft'
   AND updated_at = %(version)s
RETURNING id;

-- bring_forward --
-- "send now" for an approved campaign scheduled later: it stays approved, due at once
UPDATE growth_campaigns
   SET scheduled_for = now(), updated_at = now()
 WHERE id = %(campaign_id)s
   AND status = 'approved'
   AND scheduled_for > now()
RETURNING id;

-- start_due --
-- approved -> sending for every campaign whose time has come (the database's clock decides); it
-- takes its account's sender, which every try of every recipient goes out as from then on
UPDATE growth_campaigns c
   SET status = 'sending', started_at = coalesce(c.started_at, now()), updated_at = now(),
       from_email = a.from_email, from_name = a.from_name
  FROM growth_accounts a
 WHERE a.id = c.account_id
   AND c.status = 'approved'
   AND c.scheduled_for <= now()
RETURNING c.id;

-- pause --
-- sending -> paused, by an operator, or by the engine with the reason the campaign cannot be sent
-- as it is (its sender, its templates, its transport): one tenant's campaign stops, not the worker
UPDATE growth_campaigns
   SET status = 'paused', pause_reason = %(reason)s, updated_at = now()
 WHERE id = %(campaign_id)s
   AND status = 'sending'
RETURNING id;

-- resume --
-- paused -> sending; it takes its account's sender again: the way to send the rest as a sender
-- corrected since (one the ESP refused, say) is to pause and resume
UPDATE growth_campaigns c
   SET status = 'sending', pause_reason = '', updated_at = now(),
       from_email = a.from_email, from_name = a.from_name
  FROM growth_accounts a
 WHERE a.id = c.account_id
   AND c.id = %(campaign_id)s
   AND c.status = 'paused'
RETURNING c.id;

-- lock_campaign --
-- Wait for, then hold, the campaign row until commit: a statement run after this one in the
-- same transaction sees every row queued by a transaction that held it before (see
-- lock_finishable). NO KEY UPDATE does not block the FK checks of rows being inserted.
SELECT id FROM growth_campaigns WHERE id = %(campaign_id)s FOR NO KEY UPDATE;

-- lock_cursor --
-- A cancel's second step (after lock_campaign), in a statement of its own: the lease protocol's
-- cursor of the campaign, so that no claim runs while the cancel picks the rows, and the cancel's
-- snapshot, taken after this wait, shows the leases the last claim made (none before the
-- protocol's migration, and nothing to lock).
{{ leases.lock_cursor }}

-- cancel --
-- any unfinished state -> cancelled; its queued rows become cancelled in the same statement, but
-- for the rows on the wire, which their settle writes: 'sending' rows, and the rows of the lease
-- protocol's live leases (its rows in flight are 'queued'). A free lease (given back, or freed by
-- recovery) ends, its rows cancelled with the rest, the ones due again included (their next
-- attempt cleared with them). A queued row whose message may have arrived (to be retried under
-- the same key after its worker was lost or by an operator's retry: sends._doubt_kept; or in a
-- free lease taken over after a hand-over) becomes 'unknown', as recovery writes it in a
-- cancelled campaign: cancelled, it would read as never reached, and a follow-up would send it
-- again under its own key. Run after lock_campaign and lock_cursor. %(expected)s: only from that status (NULL: from
-- any unfinished one). dropped: rows cancelled; in_doubt: rows made 'unknown'.
WITH cancelled AS (
    UPDATE growth_campaigns
       SET status = 'cancelled', finished_at = now(), updated_at = now()
     WHERE id = %(campaign_id)s
       AND status IN ('draft', 'approved', 'sending', 'paused')
       AND (%(expected)s::text IS NULL OR status = %(expected)s)  -- as the operator saw it
    RETURNING id
), free AS (
    DELETE FROM growth_send_leases
     WHERE campaign_id = (SELECT id FROM cancelled) AND worker_id IS NULL
    RETURNING send_ids, takeovers
), doubted AS MATERIALIZED (
    SELECT unnest(send_ids) AS id FROM free WHERE takeovers > 0
), held AS MATERIALIZED (
    SELECT unnest(send_ids) AS id
      FROM growth_send_leases
     WHERE campaign_id = (SELECT id FROM cancelled) AND worker_id IS NOT NULL
), dropped AS (
    UPDATE growth_sends s
       SET status = CASE WHEN {{ sends._doubt_kept }} OR s.id IN (SELECT id FROM doubted)
                         THEN 'unknown' ELSE 'cancelled' END,
           last_error = CASE WHEN {{ sends._doubt_kept }} OR s.id IN (SELECT id FROM doubted)
                             THEN 'cancelled while in doubt: an earlier attempt may have arrived'
                             ELSE s.last_error END,
           next_attempt_at = NULL, updated_at = now()
      FROM cancelled c
     WHERE s.campaign_id = c.id
       AND s.status = 'queued'
       AND s.id NOT IN (SELECT id FROM held)
    RETURNING s.status
)
SELECT c.id, (SELECT count(*) FROM dropped WHERE status = 'cancelled') AS dropped,
       (SELECT count(*) FROM dropped WHERE status = 'unknown') AS in_doubt
  FROM cancelled c;

-- queued_in_doubt --
-- The queued rows a cancel would make 'unknown' (see cancel): through send_queued_doubt_kept,
-- less those of live leases, which their settle writes; and the rows of free leases taken over
-- after a hand-over.
SELECT (SELECT count(*)
          FROM growth_sends s
         WHERE s.campaign_id = %(campaign_id)s
           AND s.status = 'queued' AND {{ sends._doubt_kept }}
           AND s.id NOT IN (SELECT unnest(send_ids) FROM growth_send_leases
                             WHERE campaign_id = %(campaign_id)s AND worker_id IS NOT NULL))
       + (SELECT coalesce(sum(cardinality(send_ids)), 0)
            FROM growth_send_leases
           WHERE campaign_id = %(campaign_id)s AND worker_id IS NULL AND takeovers > 0)
       AS rows;

-- lock_finishable --
-- Lock the built sending campaigns in a statement of their own, before `finish` looks at their
-- rows: `finish` then takes its snapshot after any transaction that requeued rows under this
-- lock (an operator's retry of unknown rows) has committed, and so sees those rows. A single
-- UPDATE could not: it would wait for the lock, then re-check only the campaign row, judging the
-- rows by its older snapshot and finishing a campaign with rows just queued. Campaigns another
-- transaction holds are skipped until the next pass.
SELECT id
  FROM growth_campaigns
 WHERE status = 'sending'
   AND recipients_built_at IS NOT NULL
 ORDER BY id
   FOR NO KEY UPDATE SKIP LOCKED;

-- finish --
-- sending -> sent once the list is built and no row is queued or on the wire (the campaigns
-- given were locked by lock_finishable in this transaction)
UPDATE growth_campaigns c
   SET status = 'sent', finished_at = now(), updated_at = now()
 WHERE c.id = ANY(%(campaign_ids)s)
   AND c.status = 'sending'
   AND c.recipients_built_at IS NOT NULL
   -- a probe that stops at the first open row, by index: as NOT EXISTS it was planned as an
   -- anti-join over the whole of growth_sends (30 ms at 100k rows, once per batch)
   AND (SELECT 1
          FROM growth_sends s
         WHERE s.campaign_id = c.id
           AND s.status IN ('queued', 'sending')
         LIMIT 1) IS NULL
RETURNING c.id;

-- sending --
-- campaigns a worker can claim from, with what paces them: their tenant's buckets (its rate,
-- its warm-up quota; not those of its mail to one destination), its warm-up schedule, the
-- campaign's sending window and the database's clock to read it by; and whether the campaign runs
-- on the lease protocol (it has a cursor); and the sender it goes out as now
SELECT c.id AS campaign_id, c.account_id, c.from_email, c.from_name,
       ARRAY(SELECT rl.id FROM growth_rate_limits rl
              WHERE rl.account_id = c.account_id AND rl.destination_id IS NULL
              ORDER BY rl.id) AS bucket_ids,
       c.window_starts, c.window_ends, a.time_zone, a.warmup_started_on, a.warmup_daily_start,
       a.warmup_daily_growth, a.warmup_until, now() AS now,
       EXISTS (SELECT 1 FROM growth_send_cursors k WHERE k.campaign_id = c.id) AS leases
  FROM growth_campaigns c
  JOIN growth_accounts a ON a.id = c.account_id
 WHERE c.status = 'sending'
   AND c.recipients_built_at IS NOT NULL
 ORDER BY c.id;

-- update_draft --
-- Save edited content only while the campaign is a draft and is the version the editor loaded:
-- an approval (or another editor) that got there first keeps what it saw. The new version is
-- the clock's, not the transaction's start: two edits in one transaction still differ.
UPDATE growth_campaigns
   SET name = %(name)s, subject = %(subject)s, body_text = %(body_text)s,
       body_html = %(body_html)s, scheduled_for = %(scheduled_for)s,
       window_starts = %(window_starts)s, window_ends = %(window_ends)s,
       updated_at = clock_timestamp()
 WHERE id = %(campaign_id)s
   AND status = 'draft'
   AND updated_at = %(version)s
RETURNING updated_at;

-- rename --
-- The only edit left once a campaign has left draft; never touches the status
UPDATE growth_campaigns
   SET name = %(name)s, updated_at = clock_timestamp()
 WHERE id = %(campaign_id)s
   AND updated_at = %(version)s
RETURNING updated_at;

-- status --
SELECT status FROM growth_campaigns WHERE id = %(campaign_id)s;

-- outlook --
-- busy: a campaign is sending or due to start. next_in: seconds until the earliest scheduled
-- start, retry or lease expiry (NULL: nothing is waiting), by the database's clock.
SELECT EXISTS (SELECT 1
                 FROM growth_campaigns
                WHERE status = 'sending'
                   OR (status = 'approved' AND scheduled_for <= now())) AS busy,
       -- none waiting: no row, so NULL (greatest() skips a NULL: "nothing" read as "due now",
       -- and an idle worker looked again every 50 ms instead of sleeping its tick)
       (SELECT greatest(0, extract(epoch FROM first - now()))::float
          FROM (SELECT min(t) AS first
                  FROM (SELECT min(scheduled_for) FROM growth_campaigns WHERE status = 'approved'
                        UNION ALL
                        SELECT min(next_attempt_at) FROM growth_sends
                         WHERE status = 'queued' AND next_attempt_at IS NOT NULL
                        UNION ALL
                        SELECT min(lease_expires_at) FROM growth_sends WHERE status = 'sending'
                       ) AS waiting(t)) AS earliest
         WHERE first IS NOT NULL) AS next_in;

-- progress --
-- rows per status for the given campaigns, from their tallies (tallies.sql): a few rows a
-- campaign whatever its size, never its sends; the lease protocol's rows on the wire as
-- 'sending' (leases._on_the_wire)
WITH on_the_wire AS MATERIALIZED (
    {{ leases._on_the_wire }}
)
SELECT campaign_id, status, sum(sends)::bigint AS sends
  FROM (SELECT campaign_id, status, sends
          FROM growth_send_counts
         WHERE campaign_id = ANY(%(campaign_ids)s)
        UNION ALL
        SELECT campaign_id, status, sends FROM on_the_wire
       ) counted
 GROUP BY campaign_id, status
HAVING sum(sends) <> 0;

-- needing_review --
-- the unknown and failed rows of every campaign of the given accounts (NULL: of every account),
-- from the tallies: the admin index's badge
SELECT coalesce(sum(k.sends) FILTER (WHERE k.status = 'unknown'), 0)::bigint AS unknown,
       coalesce(sum(k.sends) FILTER (WHERE k.status = 'failed'), 0)::bigint AS failed
  FROM growth_campaigns c
 CROSS JOIN LATERAL (SELECT status, sum(sends) AS sends  -- per campaign, as in metrics
                       FROM growth_send_counts
                      WHERE campaign_id = c.id
                        AND status IN ('unknown', 'failed')
                      GROUP BY status) AS k
 WHERE %(account_ids)s::bigint[] IS NULL OR c.account_id = ANY(%(account_ids)s);

-- audience --
-- who the campaign's segments hold and why some are not recipients (for reports)
WITH members AS (
    SELECT s.*
      FROM growth_subscribers s
      JOIN growth_campaigns c ON c.account_id = s.account_id
     WHERE c.id = %(campaign_id)s
       AND (NOT EXISTS (SELECT 1 FROM growth_campaigns_segments cs WHERE cs.campaign_id = c.id)
            OR s.segment_id IN (SELECT cs.segment_id
                                  FROM growth_campaigns_segments cs
                                 WHERE cs.campaign_id = c.id))
)
SELECT count(*) AS subscriber_rows,
       count(DISTINCT email_lower) AS addresses,
       -- what build_recipients would create: addresses with a confirmed row, not suppressed
       count(DISTINCT email_lower) FILTER (
           WHERE status = 'confirmed'
             AND NOT EXISTS (SELECT 1 FROM growth_suppressions x
                              WHERE x.account_id = members.account_id
                                AND x.email_lower = members.email_lower)) AS recipients,
       count(DISTINCT email_lower) FILTER (
           WHERE EXISTS (SELECT 1 FROM growth_suppressions x
                          WHERE x.account_id = members.account_id
                            AND x.email_lower = members.email_lower)) AS suppressed,
       count(DISTINCT email_lower) FILTER (WHERE status <> 'confirmed') AS not_confirmed_rows
  FROM members;

-- metrics --
-- for Prometheus: campaigns by status, and the rows of the sending campaigns by status (from
-- their tallies, the lease protocol's on the wire as 'sending'), in one statement;
-- %(campaign_ids)s: NULL (every campaign's leases)
SELECT 'campaigns' AS counted, status, count(*) AS n
  FROM growth_campaigns
 GROUP BY status
 UNION ALL
SELECT 'sending_rows', r.status, sum(r.sends)::bigint
  FROM (SELECT k.status, k.sends
          FROM growth_campaigns c
         CROSS JOIN LATERAL (SELECT status, sum(sends) AS sends  -- per campaign: c.id reaches
                               FROM growth_send_counts        -- the view's indexes (a join
                              WHERE campaign_id = c.id        -- would sum every campaign)
                              GROUP BY status) AS k
         WHERE c.status = 'sending'
        UNION ALL  -- the lease protocol's rows on the wire, 'queued' in the tallies
        SELECT w.status, w.sends
          FROM ({{ leases._on_the_wire }}) w
          JOIN growth_campaigns c ON c.id = w.campaign_id AND c.status = 'sending'
       ) r
 GROUP BY r.status
HAVING sum(r.sends) <> 0;

-- _audience_holds_segments --
-- Campaign c is still to be built (not cancelled) and its audience holds one of the segments
-- %(segment_ids)s: it names one, or it names none (every segment of its account).
(c.recipients_built_at IS NULL
 AND c.status <> 'cancelled'
 AND (EXISTS (SELECT 1 FROM growth_campaigns_segments cs
               WHERE cs.campaign_id = c.id AND cs.segment_id = ANY(%(segment_ids)s))
      OR (NOT EXISTS (SELECT 1 FROM growth_campaigns_segments cs WHERE cs.campaign_id = c.id)
          AND c.account_id IN (SELECT g.account_id FROM growth_segments g
                                WHERE g.id = ANY(%(segment_ids)s)))))

-- _audiences_of_segments --
-- The campaigns whose audience still to be built holds the segments, in id order (every
-- statement that locks several campaigns takes them in that order).
SELECT c.id
  FROM growth_campaigns c
 WHERE {{ _audience_holds_segments }}
 ORDER BY c.id

-- lock_audiences_of_segments --
-- A deletion of segments, step 1: wait for, then hold until it commits, the campaigns whose
-- audience still to be built holds them, in id order. A build holds its campaign's row (FOR KEY
-- SHARE) from before it reads the segments to its commit (sends.sql, still_unbuilt), and so does
-- an edit of a campaign's segments (the foreign key's check of each link it inserts): FOR UPDATE
-- waits for both, so a build reads the segments before the deletion (and the deletion then finds
-- the campaign built) or after it, never in between.
{{ _audiences_of_segments }}
   FOR UPDATE;

-- lock_segments --
-- A deletion of segments, step 1b, between two runs of step 1: the segments themselves, so that
-- a campaign edited, cloned or added meanwhile to name one of them either committed before this
-- (and step 1 run again holds it, step 2 judges it) or waits at its commit for the deletion's
-- (its link's foreign key check) and then fails: never a link that the deletion's cascade
-- removes after step 2 judged the campaign without it, leaving it no segment.
SELECT g.id
  FROM growth_segments g
 WHERE g.id = ANY(%(segment_ids)s)
 ORDER BY g.id
   FOR UPDATE;

-- lock_audiences_of_segments_nowait --
-- Step 1 again, after step 1b: a campaign held by another transaction now is one that came to
-- name the segments after step 1; that holder may wait for step 1b's lock (its link's foreign
-- key check), so this does not wait for it (the caller undoes its locks and starts again).
{{ _audiences_of_segments }}
   FOR UPDATE NOWAIT;

-- audiences_of_segments --
-- Step 2, in a statement of its own: its snapshot, taken after step 1's wait, shows what the
-- holders of those rows committed (a build, an edit of the campaign's segments, another deletion).
-- Each campaign whose audience still to be built holds the segments: those of them it names
-- (none: it names no segment), and whether it names another segment, which stays.
SELECT c.id AS campaign_id, c.account_id, c.name, c.status,
       c.resend_of_id IS NOT NULL AS follow_up,
       ARRAY(SELECT cs.segment_id
               FROM growth_campaigns_segments cs
              WHERE cs.campaign_id = c.id AND cs.segment_id = ANY(%(segment_ids)s)
              ORDER BY cs.segment_id) AS segment_ids,
       EXISTS (SELECT 1
                 FROM growth_campaigns_segments cs
                WHERE cs.campaign_id = c.id
                  AND NOT cs.segment_id = ANY(%(segment_ids)s)) AS keeps_others
  FROM growth_campaigns c
 WHERE {{ _audience_holds_segments }}
 ORDER BY c.id;
