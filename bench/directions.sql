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

-- _settled --
-- The settle's new values where the claim wrote the row (the attempt, the lease, the hand-over).
{{ _settled_outcome }},
attempts = s.attempts - CASE WHEN r.outcome = 'throttled' THEN 1 ELSE 0 END,
lease_expires_at = NULL,
handed_over_at = CASE WHEN r.outcome IN ('transient', 'throttled') THEN NULL
                      ELSE s.handed_over_at END

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
