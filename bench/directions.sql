-- The claim and settle of the directions measured by bench/directions.py, on copies of
-- growth_sends (never on growth_sends itself). Each is the engine's statement from
-- growth/managers/sends.sql with the same checks (opt-outs and the subscriber's status at the
-- claim, the campaign's status, only this claim's rows at the settle), changed only where the
-- table's shape changes it. Loaded after sends.sql, so {{ _blocked }} and {{ _retried }} are the
-- engine's own fragments: `s` is the row with the address (subscriber_id, account_id,
-- email_lower) in a claim, the row with the state (first_attempt_at) in a settle.
--
-- (c) split: dir_wide holds what a send is (address, subscriber, campaign, job id), written once
-- by the build; dir_state (send_id = dir_wide.id) holds what changes, with the indexes that read
-- those columns. (d) lease: a claim does not change status; it writes lease_id, a row of
-- dir_leases (one per batch: its rows, its worker, its expiry), and columns no index reads, so
-- its row versions can be HOT. A row is in flight while status = 'queued' and lease_id is set.
-- (e) both.
--
-- Every claim walks the campaign's queued rows as sends.sql's claim does, through (campaign_id,
-- id) named by a row comparison, so that the planner cannot take the primary key in id order
-- instead (on a table holding one campaign, all of it queued when analysed, it did).

-- _settled_outcome --
-- What every shape's settle writes of an outcome, as sends.sql's settle writes it (s: the row
-- with the state; r: the outcome, r.attempt the attempt it answers; c: the campaign, locked FOR
-- SHARE). 'suppressed': the claim of g or h found the row blocked by an opt-out.
status = CASE
    WHEN r.outcome = 'sent' THEN 'sent'
    WHEN r.outcome = 'suppressed' THEN 'suppressed'
    WHEN {{ _retried }} THEN 'queued'
    WHEN r.outcome IN ('transient', 'throttled') AND c.status = 'cancelled' THEN 'cancelled'
    ELSE 'failed' END,
sent_at = CASE WHEN r.outcome = 'sent' THEN now() END,
provider_message_id = CASE WHEN r.outcome = 'sent' THEN left(r.provider_message_id, 255)
                           ELSE s.provider_message_id END,
last_error = r.error,
next_attempt_at = CASE
    WHEN {{ _retried }} AND r.outcome = 'throttled'
    THEN now() + make_interval(secs => coalesce(r.retry_after, %(throttle_delay)s))
    WHEN {{ _retried }}
    THEN now() + make_interval(secs => least(%(backoff_base)s * 2 ^ (r.attempt - 1),
                                             %(backoff_max)s) * (0.9 + random() * 0.2)) END,
updated_at = now()

-- _settled --
-- The settle's new values where the claim wrote the row (the attempt, the lease, the hand-over).
{{ _settled_outcome }},
attempts = s.attempts - CASE WHEN r.outcome = 'throttled' THEN 1 ELSE 0 END,
lease_expires_at = NULL,
handed_over_at = CASE WHEN r.outcome IN ('transient', 'throttled') THEN NULL
                      ELSE s.handed_over_at END

-- _outcomes --
unnest(%(ids)s::bigint[], %(attempts)s::int[], %(outcomes)s::text[],
       %(provider_ids)s::text[], %(errors)s::text[], %(retry_afters)s::float8[])
    AS r(id, attempt, outcome, provider_message_id, error, retry_after)

-- _campaign_for_share --
campaign AS MATERIALIZED (
    SELECT id, status FROM growth_campaigns WHERE id = %(campaign_id)s FOR SHARE
)

-- _new_lease --
-- One row of dir_leases for the batch (none if nothing was due).
lease AS (
    INSERT INTO dir_leases (campaign_id, worker_id, expires_at, send_ids)
    SELECT %(campaign_id)s, %(worker_id)s, now() + make_interval(secs => %(lease)s), batch.ids
      FROM (SELECT ARRAY(SELECT id FROM due ORDER BY id) AS ids) batch
     WHERE cardinality(batch.ids) > 0
    RETURNING id
)

-- claim_state --
-- (c) The claim, its queue and state in dir_state; dir_wide is read (the opt-out check and what
-- the worker renders), never written.
WITH due AS (
    SELECT st.send_id AS id
      FROM dir_state st
     WHERE (st.campaign_id, st.send_id) < (%(campaign_id)s + 1, 0)
       AND EXISTS (SELECT 1 FROM growth_campaigns c
                    WHERE c.id = %(campaign_id)s AND c.status = 'sending')
       AND (st.campaign_id, st.send_id) > (%(campaign_id)s, 0)
       AND st.status = 'queued'
       AND (st.next_attempt_at IS NULL OR st.next_attempt_at <= now())
     ORDER BY st.campaign_id, st.send_id
     LIMIT %(batch_size)s
       FOR UPDATE OF st SKIP LOCKED
), blocked AS MATERIALIZED (
    SELECT s.id
      FROM dir_wide s
     WHERE s.id = ANY(ARRAY(SELECT id FROM due))
       AND {{ _blocked }}
)
UPDATE dir_state st
   SET status           = CASE WHEN st.send_id IN (SELECT id FROM blocked) THEN 'suppressed'
                               ELSE 'sending' END,
       attempts         = st.attempts + CASE WHEN st.send_id IN (SELECT id FROM blocked) THEN 0
                                             ELSE 1 END,
       lease_expires_at = CASE WHEN st.send_id IN (SELECT id FROM blocked) THEN NULL
                               ELSE now() + make_interval(secs => %(lease)s) END,
       handed_over_at   = CASE WHEN %(hand_over)s AND st.send_id NOT IN (SELECT id FROM blocked)
                               THEN now() END,
       first_attempt_at = CASE WHEN %(hand_over)s AND st.send_id NOT IN (SELECT id FROM blocked)
                               THEN coalesce(st.first_attempt_at, now())
                               ELSE st.first_attempt_at END,
       claimed_by       = %(worker_id)s,
       updated_at       = now()
  FROM dir_wide s
 WHERE st.send_id = ANY(ARRAY(SELECT id FROM due))
   AND s.id = ANY(ARRAY(SELECT id FROM due))
   AND s.id = st.send_id
RETURNING s.id, s.campaign_id, s.subscriber_id, s.email, s.job_id, st.status, st.attempts,
          s.destination_id;

-- settle_state --
-- (c) The settle, on dir_state.
WITH {{ _campaign_for_share }}
UPDATE dir_state s
   SET {{ _settled }}
  FROM campaign c, {{ _outcomes }}
 WHERE s.send_id = ANY(%(ids)s::bigint[])
   AND s.send_id = r.id
   AND s.campaign_id = c.id
   AND s.claimed_by = %(worker_id)s
   AND s.attempts = r.attempt
   AND (s.status = 'sending' OR (s.status = 'unknown' AND r.outcome = 'sent'))
RETURNING s.send_id AS id, s.status;

-- claim_lease --
-- (d) The claim as a lease per batch: status stays 'queued' (a blocked row still becomes
-- 'suppressed'), lease_id names the batch's lease. No indexed column changes: HOT when the page
-- has room. Rows held by another lease are passed over (lease_id IS NOT NULL): at most the
-- batches in flight, as the engine's claim passes over rows other claims have locked.
WITH due AS (
    SELECT s.id
      FROM dir_sends s
     WHERE {{ _of_the_campaign }}
       AND (s.campaign_id, s.id) > (%(campaign_id)s, 0)
       AND s.status = 'queued'
       AND s.lease_id IS NULL
       AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= now())
     ORDER BY s.campaign_id, s.id
     LIMIT %(batch_size)s
       FOR UPDATE OF s SKIP LOCKED
), {{ _new_lease }}, blocked AS MATERIALIZED (
    SELECT s.id
      FROM dir_sends s
     WHERE s.id = ANY(ARRAY(SELECT id FROM due))
       AND {{ _blocked }}
)
UPDATE dir_sends s
   SET status           = CASE WHEN s.id IN (SELECT id FROM blocked) THEN 'suppressed'
                               ELSE s.status END,
       lease_id         = CASE WHEN s.id IN (SELECT id FROM blocked) THEN NULL
                               ELSE (SELECT id FROM lease) END,
       attempts         = s.attempts + CASE WHEN s.id IN (SELECT id FROM blocked) THEN 0 ELSE 1 END,
       handed_over_at   = CASE WHEN %(hand_over)s AND s.id NOT IN (SELECT id FROM blocked)
                               THEN now() END,
       first_attempt_at = CASE WHEN %(hand_over)s AND s.id NOT IN (SELECT id FROM blocked)
                               THEN coalesce(s.first_attempt_at, now())
                               ELSE s.first_attempt_at END,
       claimed_by       = %(worker_id)s,
       updated_at       = now()
 WHERE s.id = ANY(ARRAY(SELECT id FROM due))
RETURNING s.id, s.campaign_id, s.subscriber_id, s.email, s.job_id,
          CASE WHEN s.status = 'queued' THEN 'sending' ELSE s.status END AS status, s.attempts,
          s.destination_id, s.lease_id;

-- settle_lease --
-- (d) The settle of one lease's rows (lease_id stands for claimed_by + attempts: a lease is one
-- claim), which then ends the lease. (With a plain receiver the engine settles a batch chunk by
-- chunk: the lease would end with the batch's last settle.)
WITH {{ _campaign_for_share }}, settled AS (
    UPDATE dir_sends s
       SET {{ _settled }},
           lease_id = NULL
      FROM campaign c, {{ _outcomes }}
     WHERE s.id = ANY(%(ids)s::bigint[])
       AND s.id = r.id
       AND s.campaign_id = c.id
       AND s.lease_id = %(lease_id)s
       AND (s.status = 'queued' OR (s.status = 'unknown' AND r.outcome = 'sent'))
    RETURNING s.id, s.status
), ended AS (
    DELETE FROM dir_leases WHERE id = %(lease_id)s RETURNING id
)
SELECT id, status FROM settled WHERE (SELECT count(*) FROM ended) >= 0;

-- claim_state_lease --
-- (e) (c) and (d): the lease per batch on dir_state.
WITH due AS (
    SELECT st.send_id AS id
      FROM dir_state st
     WHERE (st.campaign_id, st.send_id) < (%(campaign_id)s + 1, 0)
       AND EXISTS (SELECT 1 FROM growth_campaigns c
                    WHERE c.id = %(campaign_id)s AND c.status = 'sending')
       AND (st.campaign_id, st.send_id) > (%(campaign_id)s, 0)
       AND st.status = 'queued'
       AND st.lease_id IS NULL
       AND (st.next_attempt_at IS NULL OR st.next_attempt_at <= now())
     ORDER BY st.campaign_id, st.send_id
     LIMIT %(batch_size)s
       FOR UPDATE OF st SKIP LOCKED
), {{ _new_lease }}, blocked AS MATERIALIZED (
    SELECT s.id
      FROM dir_wide s
     WHERE s.id = ANY(ARRAY(SELECT id FROM due))
       AND {{ _blocked }}
)
UPDATE dir_state st
   SET status           = CASE WHEN st.send_id IN (SELECT id FROM blocked) THEN 'suppressed'
                               ELSE st.status END,
       lease_id         = CASE WHEN st.send_id IN (SELECT id FROM blocked) THEN NULL
                               ELSE (SELECT id FROM lease) END,
       attempts         = st.attempts + CASE WHEN st.send_id IN (SELECT id FROM blocked) THEN 0
                                             ELSE 1 END,
       handed_over_at   = CASE WHEN %(hand_over)s AND st.send_id NOT IN (SELECT id FROM blocked)
                               THEN now() END,
       first_attempt_at = CASE WHEN %(hand_over)s AND st.send_id NOT IN (SELECT id FROM blocked)
                               THEN coalesce(st.first_attempt_at, now())
                               ELSE st.first_attempt_at END,
       claimed_by       = %(worker_id)s,
       updated_at       = now()
  FROM dir_wide s
 WHERE st.send_id = ANY(ARRAY(SELECT id FROM due))
   AND s.id = ANY(ARRAY(SELECT id FROM due))
   AND s.id = st.send_id
RETURNING s.id, s.campaign_id, s.subscriber_id, s.email, s.job_id,
          CASE WHEN st.status = 'queued' THEN 'sending' ELSE st.status END AS status,
          st.attempts, s.destination_id, st.lease_id;

-- settle_state_lease --
-- (e) The settle of one lease's rows on dir_state.
WITH {{ _campaign_for_share }}, settled AS (
    UPDATE dir_state s
       SET {{ _settled }},
           lease_id = NULL
      FROM campaign c, {{ _outcomes }}
     WHERE s.send_id = ANY(%(ids)s::bigint[])
       AND s.send_id = r.id
       AND s.campaign_id = c.id
       AND s.lease_id = %(lease_id)s
       AND (s.status = 'queued' OR (s.status = 'unknown' AND r.outcome = 'sent'))
    RETURNING s.send_id AS id, s.status
), ended AS (
    DELETE FROM dir_leases WHERE id = %(lease_id)s RETURNING id
)
SELECT id, status FROM settled WHERE (SELECT count(*) FROM ended) >= 0;

-- claim_cursor --
-- (g) A lease per batch that writes no send row: the campaign's cursor (dir_cursors, one row per
-- campaign, locked for the claim's few milliseconds: claims of one campaign take turns, never
-- the same rows) moves past the next batch of queued rows, and one row of dir_leases names them.
-- The opt-out check is a read; what it finds is settled 'suppressed' with the others. A row is
-- in flight while its id is in a live lease; each is written once, by its settle. (Rows queued
-- again behind the cursor, by a retry or a recovery, would need a second, small path: not here.)
WITH {{ _campaign_cursor }}, due AS MATERIALIZED (
    SELECT s.id
      FROM dir_sends s
     WHERE {{ _of_the_campaign }}
       AND (s.campaign_id, s.id) > (%(campaign_id)s, (SELECT claimed_to FROM cursor))
       AND s.status = 'queued'
       AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= now())
     ORDER BY s.campaign_id, s.id
     LIMIT %(batch_size)s
), {{ _lease_the_due }};

-- claim_cursor_by_id --
-- (h) The same claim where no index reads a row's state: the campaign's rows after the cursor
-- in id order, through the primary key (a campaign's rows are one range of ids, built by one
-- INSERT), queued ones taken.
WITH {{ _campaign_cursor }}, due AS MATERIALIZED (
    SELECT s.id
      FROM dir_sends s
     WHERE s.campaign_id = %(campaign_id)s
       AND s.id > (SELECT claimed_to FROM cursor)
       AND EXISTS (SELECT 1 FROM growth_campaigns c
                    WHERE c.id = %(campaign_id)s AND c.status = 'sending')
       AND s.status = 'queued'
       AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= now())
     ORDER BY s.id
     LIMIT %(batch_size)s
), {{ _lease_the_due }};

-- _campaign_cursor --
cursor AS MATERIALIZED (
    SELECT claimed_to FROM dir_cursors WHERE campaign_id = %(campaign_id)s FOR UPDATE
)

-- _lease_the_due --
-- The cursor moved past the rows of `due`, their lease, and the rows as the worker wants them.
moved AS (
    UPDATE dir_cursors SET claimed_to = (SELECT max(id) FROM due)
     WHERE campaign_id = %(campaign_id)s AND EXISTS (SELECT 1 FROM due)
), {{ _new_lease }}
SELECT s.id, s.campaign_id, s.subscriber_id, s.email, s.job_id,
       CASE WHEN {{ _blocked }} THEN 'suppressed' ELSE 'sending' END AS status,
       s.attempts + 1 AS attempts, s.destination_id, (SELECT id FROM lease) AS lease_id
  FROM dir_sends s
 WHERE s.id = ANY(ARRAY(SELECT id FROM due))

-- settle_cursor --
-- (g, h) The settle of one lease: it ends the lease (DELETE ... WHERE worker_id = me: a lease taken
-- over by a recovery is no longer ours, and then nothing is written), and writes each of its rows
-- once, with what the claim did not write (the attempt, the hand-over's times). A row that
-- recovery made 'unknown' from this very lease (it wrote the lease's id on the row) while the
-- worker was slow, and that is now known accepted, becomes 'sent', as in today's settle.
WITH {{ _campaign_for_share }}, ended AS MATERIALIZED (
    DELETE FROM dir_leases
     WHERE id = %(lease_id)s AND worker_id = %(worker_id)s
    RETURNING send_ids
)
UPDATE dir_sends s
   SET {{ _settled_outcome }},
       attempts = s.attempts + CASE WHEN r.outcome IN ('throttled', 'suppressed') THEN 0
                                    ELSE 1 END,
       handed_over_at = CASE WHEN r.outcome IN ('sent', 'permanent') THEN now() END,
       first_attempt_at = CASE WHEN r.outcome = 'suppressed' THEN s.first_attempt_at
                               ELSE coalesce(s.first_attempt_at, now()) END,
       claimed_by = %(worker_id)s
  FROM campaign c, {{ _outcomes }}
 WHERE s.id = ANY(%(ids)s::bigint[])
   AND s.id = r.id
   AND s.campaign_id = c.id
   AND ((s.id = ANY(coalesce((SELECT send_ids FROM ended), '{}'))
         AND s.status = 'queued' COLLATE "C")
        OR (r.outcome = 'sent' AND s.status = 'unknown' COLLATE "C"
            AND s.claimed_by = 'lease ' || %(lease_id)s))
RETURNING s.id, s.status;

-- lock_cursor --
-- (i) The claim's first statement, sent in the same string and so in the same transaction: wait
-- for the campaign cursor's lock and take it. The claim that follows takes its snapshot only then,
-- and sees what the claim before it committed. As one statement, the claim's snapshot predated
-- its wait: its list of due rows was stale, and its UPDATE locked the newest version of rows the
-- claim before had leased meanwhile (to recheck them and pass them over, keeping the lock) while
-- that lease's settle was writing the others. The racing test deadlocked about one run in four.
SELECT claimed_to FROM dir_cursors WHERE campaign_id = %(campaign_id)s FOR UPDATE;

-- claim_complete --
-- (i) g's claim with everything else the engine's claim has to do, in one statement under the
-- campaign cursor's lock. Every claim of a campaign takes that lock first, so claims of one
-- campaign take turns and none can take a row another holds. The batch is either:
-- 1. a free lease of the campaign, whole, under a new id: given back by a worker, or freed by
--    recovery after its worker died (its rows were never handed over, or were handed to a
--    receiver that de-duplicates: then they go again under the same job ids); or
-- 2. rows behind the cursor that are due again: retries, rows an operator queued again, rows of
--    a paced destination set aside. Those of a destination not paced, and of each paced one up
--    to its share (share_ids, share_counts: the tokens it has now); and after them
-- 3. rows after the cursor, up to the batch's size. While destinations are paced, at most `scan`
--    of them are walked, and those of a paced destination among them are set aside: due now,
--    behind the cursor, where 2 takes them as their destination's tokens allow. A row set aside
--    costs a second write; only a paced destination's rows, sent at the paced rate, pay it.
-- Whatever is behind the cursor, queued and in no lease has next_attempt_at set: that is how 2
-- finds it. The opt-out check is a read, as in g; the settle writes what it found. Run after
-- lock_cursor, in the same transaction (see there); its own FOR UPDATE then costs nothing.
WITH cursor AS MATERIALIZED (
    SELECT claimed_to
      FROM dir_cursors
     WHERE campaign_id = %(campaign_id)s
       AND EXISTS (SELECT 1 FROM growth_campaigns c
                    WHERE c.id = %(campaign_id)s AND c.status = 'sending')
       FOR UPDATE
), freed AS MATERIALIZED (
    DELETE FROM dir_leases l
     WHERE l.id = (SELECT f.id
                     FROM dir_leases f
                    WHERE f.campaign_id = %(campaign_id)s
                      AND f.worker_id IS NULL
                      AND EXISTS (SELECT 1 FROM cursor)
                    ORDER BY f.id
                    LIMIT 1
                      FOR UPDATE SKIP LOCKED)
    RETURNING l.send_ids, l.takeovers
), retried AS MATERIALIZED (
    UPDATE dir_sends s
       SET next_attempt_at = NULL
     WHERE s.id = ANY(ARRAY(
               (SELECT r.id
                  FROM dir_sends r
                 WHERE r.campaign_id = %(campaign_id)s
                   AND r.next_attempt_at <= now()
                   AND r.status = 'queued'
                   AND (r.destination_id IS NULL OR r.destination_id <> ALL(%(paced)s::int[]))
                   AND EXISTS (SELECT 1 FROM cursor)
                   AND NOT EXISTS (SELECT 1 FROM freed)
                 ORDER BY r.next_attempt_at
                 LIMIT %(batch_size)s)
               UNION ALL
               (SELECT share.id
                  FROM unnest(%(share_ids)s::int[], %(share_counts)s::int[]) AS g(destination_id, n)
                 CROSS JOIN LATERAL (
                       SELECT r.id
                         FROM dir_sends r
                        WHERE r.campaign_id = %(campaign_id)s
                          AND r.destination_id = g.destination_id
                          AND r.next_attempt_at <= now()
                          AND r.status = 'queued'
                          AND EXISTS (SELECT 1 FROM cursor)
                          AND NOT EXISTS (SELECT 1 FROM freed)
                        ORDER BY r.next_attempt_at
                        LIMIT g.n) share)))
       AND s.next_attempt_at <= now()
       AND s.status = 'queued'
    RETURNING s.id
), walked AS MATERIALIZED (
    SELECT w.id, w.paced
      FROM (SELECT s.id,
                   coalesce(s.destination_id = ANY(%(paced)s::int[]), false) AS paced,
                   count(*) FILTER (WHERE s.destination_id IS NULL
                                       OR s.destination_id <> ALL(%(paced)s::int[]))
                       OVER (ORDER BY s.campaign_id, s.id) AS unpaced_so_far
              FROM dir_sends s
             WHERE (s.campaign_id, s.id) > (%(campaign_id)s, (SELECT claimed_to FROM cursor))
               AND (s.campaign_id, s.id) < (%(campaign_id)s + 1, 0)
               AND s.status = 'queued'
               AND NOT EXISTS (SELECT 1 FROM freed)
             ORDER BY s.campaign_id, s.id
             LIMIT CASE WHEN cardinality(%(paced)s::int[]) = 0
                        THEN greatest(%(batch_size)s - (SELECT count(*) FROM retried), 0)
                        ELSE %(scan)s END) w
     -- the room left: every row up to the last one taken, and the paced ones before the next
     WHERE w.unpaced_so_far < greatest(%(batch_size)s - (SELECT count(*) FROM retried), 0)
        OR (NOT w.paced
            AND w.unpaced_so_far = greatest(%(batch_size)s - (SELECT count(*) FROM retried), 0))
), set_aside AS (
    UPDATE dir_sends s
       SET next_attempt_at = now()
     WHERE s.id = ANY(ARRAY(SELECT id FROM walked WHERE paced))
), due AS MATERIALIZED (
    SELECT unnest(send_ids) AS id FROM freed
    UNION ALL
    SELECT id FROM retried
    UNION ALL
    SELECT id FROM walked WHERE NOT paced
), moved AS (
    UPDATE dir_cursors
       SET claimed_to = (SELECT max(id) FROM walked)
     WHERE campaign_id = %(campaign_id)s AND EXISTS (SELECT 1 FROM walked)
), lease AS (
    INSERT INTO dir_leases (campaign_id, worker_id, expires_at, send_ids, handed_over_at,
                            takeovers)
    SELECT %(campaign_id)s, %(worker_id)s, now() + make_interval(secs => %(lease)s), batch.ids,
           CASE WHEN %(hand_over)s THEN now() END, coalesce((SELECT takeovers FROM freed), 0)
      FROM (SELECT ARRAY(SELECT id FROM due ORDER BY id) AS ids) batch
     WHERE cardinality(batch.ids) > 0
    RETURNING id
)
SELECT s.id, s.campaign_id, s.subscriber_id, s.email, s.job_id,
       CASE WHEN {{ _blocked }} THEN 'suppressed' ELSE 'sending' END AS status,
       s.attempts + 1 AS attempts, s.destination_id, (SELECT id FROM lease) AS lease_id
  FROM dir_sends s
 WHERE s.id = ANY(ARRAY(SELECT id FROM due))
   AND s.status = 'queued';  -- a free lease's row another writer moved on is not sent again

-- recover_leases --
-- (i) Leases whose worker died or stalled past their expiry, in one statement. A lease never
-- handed over (nothing of it went out), or handed to a receiver that de-duplicates and taken
-- over fewer than max_attempts times, is freed: a claim takes it over whole, under a new id, so
-- that the late settle of the lease's first holder matches nothing. Otherwise, or in a cancelled
-- campaign, the lease ends and its rows are written: 'unknown' if it was handed over (nobody can
-- know whether they went out), 'cancelled' if not. The only write to a send row outside the
-- settle, and only after a crash. The campaign is read under FOR SHARE, so that a cancel
-- committing meanwhile cannot leave a freed lease in a cancelled campaign, where nothing claims.
-- (The engine locks the campaigns first, in a statement of their own, as recover_expired does.)
WITH expired AS MATERIALIZED (
    SELECT l.id, l.send_ids, l.handed_over_at IS NOT NULL AS handed,
           c.status <> 'cancelled'
           AND (l.handed_over_at IS NULL
                OR (%(idempotent)s AND l.takeovers + 1 < %(max_attempts)s)) AS again
      FROM dir_leases l
      JOIN growth_campaigns c ON c.id = l.campaign_id
     WHERE l.worker_id IS NOT NULL AND l.expires_at < now()
     ORDER BY l.id
     LIMIT %(limit)s
       FOR SHARE OF c FOR UPDATE OF l SKIP LOCKED
), freed AS (
    UPDATE dir_leases l
       SET worker_id = NULL, expires_at = NULL, handed_over_at = NULL,
           takeovers = l.takeovers + CASE WHEN e.handed THEN 1 ELSE 0 END
      FROM expired e
     WHERE l.id = e.id AND e.again
    RETURNING l.id
), lost AS (
    DELETE FROM dir_leases l
     USING expired e
     WHERE l.id = e.id AND NOT e.again
    RETURNING l.id
), written AS (
    UPDATE dir_sends s
       SET status = CASE WHEN e.handed THEN 'unknown' ELSE 'cancelled' END,
           -- the lease's id: its late settle may still say 'sent' (see settle_cursor)
           claimed_by = 'lease ' || e.lease_id,
           last_error = 'lease expired', updated_at = now()
      FROM (SELECT unnest(send_ids) AS id, handed, id AS lease_id
              FROM expired WHERE NOT again) e
     WHERE s.id = e.id
       AND s.status = 'queued'
    RETURNING s.status
)
SELECT (SELECT count(*) FROM freed) AS freed, (SELECT count(*) FROM lost) AS lost,
       (SELECT count(*) FROM written WHERE status = 'unknown') AS unknown,
       (SELECT count(*) FROM written WHERE status = 'cancelled') AS cancelled;

-- release_lease --
-- (i) A worker gives back the lease it will not send (the engine paused the campaign): freed for
-- a take-over if nothing of it went out, or it went to a receiver that de-duplicates; in a
-- cancelled campaign (locked first, as cancel locks it) the lease ends and its rows are
-- cancelled. A lease handed to a plain receiver stays to its expiry: its rows may have gone out.
WITH campaign AS MATERIALIZED (
    SELECT status FROM growth_campaigns WHERE id = %(campaign_id)s FOR NO KEY UPDATE
), mine AS MATERIALIZED (
    SELECT l.id, l.send_ids
      FROM dir_leases l
     WHERE l.id = %(lease_id)s AND l.worker_id = %(worker_id)s
       AND (l.handed_over_at IS NULL OR %(idempotent)s)
       AND EXISTS (SELECT 1 FROM campaign)
       FOR UPDATE
), freed AS (
    UPDATE dir_leases l
       SET worker_id = NULL, expires_at = NULL, handed_over_at = NULL
     WHERE l.id IN (SELECT id FROM mine) AND (SELECT status FROM campaign) <> 'cancelled'
    RETURNING l.id
), ended AS (
    DELETE FROM dir_leases l
     WHERE l.id IN (SELECT id FROM mine) AND (SELECT status FROM campaign) = 'cancelled'
    RETURNING l.send_ids
), cancelled AS (
    UPDATE dir_sends s
       SET status = 'cancelled', updated_at = now()
     WHERE s.id = ANY(ARRAY(SELECT unnest(send_ids) FROM ended))
       AND s.status = 'queued'
    RETURNING s.id
)
SELECT (SELECT count(*) FROM freed) AS freed, (SELECT count(*) FROM cancelled) AS cancelled;

-- cancel_rows --
-- (i) A cancel's rows, after the campaign row was locked and set 'cancelled' (lock_campaign,
-- cancel): under the cursor's lock, so that no claim runs meanwhile, the free leases end, and
-- every queued row no worker holds is cancelled, the ones due again included (their
-- next_attempt_at cleared with them: nothing else behind the cursor has one). The rows of a live
-- lease are on the wire: their settle writes them (a transient outcome as 'cancelled').
WITH cursor AS MATERIALIZED (
    SELECT claimed_to FROM dir_cursors WHERE campaign_id = %(campaign_id)s FOR UPDATE
), free AS (
    DELETE FROM dir_leases
     WHERE campaign_id = %(campaign_id)s AND worker_id IS NULL
       AND EXISTS (SELECT 1 FROM cursor)
), held AS MATERIALIZED (
    SELECT unnest(send_ids) AS id
      FROM dir_leases
     WHERE campaign_id = %(campaign_id)s AND worker_id IS NOT NULL
       AND EXISTS (SELECT 1 FROM cursor)
)
UPDATE dir_sends s
   SET status = 'cancelled', next_attempt_at = NULL, updated_at = now()
 WHERE s.campaign_id = %(campaign_id)s
   AND s.status = 'queued'
   AND s.id NOT IN (SELECT id FROM held)
   AND EXISTS (SELECT 1 FROM cursor)
RETURNING s.id;

-- requeue_unknown --
-- (i) An operator's retry of 'unknown' rows: queued again with the same job id, due at once
-- behind the cursor, where the claim's retry path finds them.
UPDATE dir_sends s
   SET status = 'queued', next_attempt_at = now(), updated_at = now(),
       last_error = 'requeued by an operator after: ' || s.last_error
 WHERE s.id = ANY(%(ids)s::bigint[])
   AND s.status = 'unknown'
RETURNING s.id;

-- on_the_wire --
-- (i) The rows each worker holds, from the live leases: what the admin's workers page and the
-- live monitor count as on the wire. A row in flight is 'queued' in growth_sends.
SELECT worker_id, sum(cardinality(send_ids))::int AS rows_held, min(expires_at) AS lease_ends_at
  FROM dir_leases
 WHERE campaign_id = %(campaign_id)s AND worker_id IS NOT NULL
 GROUP BY worker_id
 ORDER BY worker_id;

-- finished --
-- (i) Nothing left to send: no row queued, since a row in flight, in a free lease or due again
-- is 'queued'. One probe that stops at the first.
SELECT (SELECT 1
          FROM dir_sends s
         WHERE s.campaign_id = %(campaign_id)s AND s.status = 'queued'
         LIMIT 1) IS NULL AS finished;

-- hand_over_lease --
-- (i) A plain receiver's hand-over: this claim's lease stamped, committed (and flushed) before
-- the wire takes its rows, with the opt-outs read once more: its rows, and which of them an
-- opt-out now blocks. A lease no longer this claim's (taken over, ended) is not stamped and
-- returns nothing: nothing of it is sent.
WITH stamped AS MATERIALIZED (
    UPDATE dir_leases
       SET handed_over_at = now()
     WHERE id = %(lease_id)s AND worker_id = %(worker_id)s
    RETURNING send_ids
)
SELECT s.id, {{ _blocked }} AS blocked
  FROM dir_sends s
 WHERE s.id = ANY(ARRAY(SELECT unnest(send_ids) FROM stamped));

-- blocked_rows --
-- (i) A receiver that de-duplicates, before the wire: a read of which of these rows an opt-out
-- now blocks (the claim handed them over already).
SELECT s.id
  FROM dir_sends s
 WHERE s.id = ANY(%(ids)s::bigint[])
   AND {{ _blocked }};
