-- The lease protocol (docs/one-write-per-recipient.md): a campaign's rows are claimed in leases,
-- one row of growth_send_leases per batch (or per wire's chunk), behind the campaign's cursor
-- (growth_send_cursors). A claim writes no send row: a row in flight stays 'queued', and its
-- settle, which ends the lease, writes it once. The compare-and-set of the whole batch is the
-- settle's DELETE of its own lease: a lease taken over (under a new id) is no longer the late
-- settle's, and then nothing is written. Every writer of a campaign's queued rows takes the
-- cursor's lock first (a claim, a cancel, a follow-up's build), so they take turns.
-- Checked by verify/lease_protocol.pml, tests/test_lease_protocol_stateful.py and
-- tests/test_leases.py; measured as the bench's direction i on copies of these tables.
-- Times are the database's now(), never a worker's clock.

-- open_cursor --
-- A campaign built to run on this protocol (leases: true) gets its cursor, before its first row,
-- with its recipient list and in its transaction. A campaign runs on the lease protocol if and
-- only if it has a cursor.
INSERT INTO growth_send_cursors (campaign_id)
SELECT %(campaign_id)s WHERE %(leases)s
ON CONFLICT (campaign_id) DO NOTHING;

-- lock_cursor --
-- The claim's first statement, sent in the same string and so in the same transaction: wait
-- for the campaign cursor's lock and take it. The claim that follows takes its snapshot only then,
-- and sees what the claim before it committed. As one statement, the claim's snapshot predated
-- its wait: its list of due rows was stale, and its UPDATE locked the newest version of rows the
-- claim before had leased meanwhile (to recheck them and pass them over, keeping the lock) while
-- that lease's settle was writing the others. The racing test deadlocked about one run in four.
SELECT claimed_to FROM growth_send_cursors WHERE campaign_id = %(campaign_id)s FOR UPDATE;

-- claim --
-- One claim of a campaign, under its cursor's lock (after lock_cursor). The batch is either:
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
-- The walk in 3 reads send_queued_by_campaign in id order, index-only (it carries the
-- destination): read from the destination index instead, every queued row past the cursor was
-- read and sorted on each claim (migration 0021).
-- Whatever is behind the cursor, queued and in no lease has next_attempt_at set: that is how 2
-- finds it. The opt-out check is a read; the settle writes what it found ('suppressed'). The
-- rows come back with the attempt this claim makes, 'sending' or 'suppressed', and their lease's
-- id: the batch is cut into leases of chunk_size rows (a plain receiver's wires hand over and
-- settle a chunk at a time; a receiver that de-duplicates takes the batch as one). hand_over:
-- the leases count as handed over at once (a receiver that de-duplicates). opt_outs: the tenant's
-- opt-out clock, read in the snapshot the opt-outs were read in (sends.sql, opt_outs_moved).
WITH cursor AS MATERIALIZED (
    SELECT claimed_to
      FROM growth_send_cursors
     WHERE campaign_id = %(campaign_id)s
       AND EXISTS (SELECT 1 FROM growth_campaigns c
                    WHERE c.id = %(campaign_id)s AND c.status = 'sending')
       FOR UPDATE
), freed AS MATERIALIZED (
    DELETE FROM growth_send_leases l
     WHERE l.id = (SELECT f.id
                     FROM growth_send_leases f
                    WHERE f.campaign_id = %(campaign_id)s
                      AND f.worker_id IS NULL
                      AND EXISTS (SELECT 1 FROM cursor)
                    ORDER BY f.id
                    LIMIT 1
                      FOR UPDATE SKIP LOCKED)
    RETURNING l.send_ids, l.takeovers, l.in_doubt_since
), retried AS MATERIALIZED (
    UPDATE growth_sends s
       SET next_attempt_at = NULL
     WHERE s.id = ANY(ARRAY(
               (SELECT r.id
                  FROM growth_sends r
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
                         FROM growth_sends r
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
              FROM growth_sends s
             WHERE (s.campaign_id, s.id) > (%(campaign_id)s, (SELECT claimed_to FROM cursor))
               AND (s.campaign_id, s.id) < (%(campaign_id)s + 1, 0)
               AND s.status = 'queued'
               AND NOT EXISTS (SELECT 1 FROM freed)
             ORDER BY s.campaign_id, s.id
             LIMIT CASE WHEN cardinality(%(paced)s::int[]) = 0
                        THEN greatest(%(batch_size)s - (SELECT count(*) FROM retried), 0)
                        ELSE %(scan)s END) w
     -- the room left: every row before the first one past it (an unpaced row), the paced ones
     -- set aside. With no room (the shares took the whole grant) that is the paced rows before
     -- the first unpaced one: set aside all the same, or the shares would never find them due.
     WHERE w.unpaced_so_far <= greatest(%(batch_size)s - (SELECT count(*) FROM retried), 0)
), set_aside AS (
    UPDATE growth_sends s
       SET next_attempt_at = now()
     WHERE s.id = ANY(ARRAY(SELECT id FROM walked WHERE paced))
), due AS MATERIALIZED (
    SELECT unnest(send_ids) AS id FROM freed
    UNION ALL
    SELECT id FROM retried
    UNION ALL
    SELECT id FROM walked WHERE NOT paced
), moved AS (
    UPDATE growth_send_cursors
       SET claimed_to = (SELECT max(id) FROM walked)
     WHERE campaign_id = %(campaign_id)s AND EXISTS (SELECT 1 FROM walked)
), lease AS (  -- one per chunk of chunk_size rows, in id order
    INSERT INTO growth_send_leases (campaign_id, worker_id, expires_at, send_ids, handed_over_at,
                            takeovers, in_doubt_since)
    SELECT %(campaign_id)s, %(worker_id)s, now() + make_interval(secs => %(lease)s),
           array_agg(chunk.id ORDER BY chunk.id), CASE WHEN %(hand_over)s THEN now() END,
           coalesce((SELECT takeovers FROM freed), 0), (SELECT in_doubt_since FROM freed)
      FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / greatest(%(chunk_size)s, 1) AS n
              FROM due) chunk
     GROUP BY chunk.n
    RETURNING id, send_ids
)
-- each row found by its primary key, a probe per row whatever the table's size: LIMIT 1 keeps
-- the LATERAL subquery from being pulled up into a join. Joined, the plan rested on the guess
-- of how many ids the new leases hold, and PostgreSQL 17 and later guess unnest()'s rows from
-- the leases' statistics: once autovacuum had analyzed growth_send_leases holding 500-id
-- leases, the guess was 100,000, and every claim hashed every queued row of growth_sends
-- (26 ms a claim at 200,000 rows, the engine at half its rate, in make bench).
-- taken_over: the batch is a free lease (others a dead or stopped worker left may be waiting).
-- A row in doubt (since an earlier settle, or since its free lease was first handed over) whose
-- key the receiver will have forgotten comes back 'unknown': the worker settles it so, unsent.
SELECT claimed.*, held.lease_id, EXISTS (SELECT 1 FROM freed) AS taken_over,
       {{ sends._opt_out_clock }} AS opt_outs
  FROM (SELECT id AS lease_id, unnest(send_ids) AS send_id FROM lease) held
 CROSS JOIN LATERAL (
       SELECT s.id, s.campaign_id, s.subscriber_id, s.email, s.job_id,
              CASE WHEN {{ sends._blocked }} THEN 'suppressed'
                   WHEN least(s.handed_over_at, (SELECT in_doubt_since FROM freed))
                        < {{ sends._forgotten_before }} THEN 'unknown'
                   ELSE 'sending' END AS status,
              s.attempts + 1 AS attempts, s.destination_id
         FROM growth_sends s
        WHERE s.id = held.send_id
          AND s.status = 'queued'  -- a free lease's row another writer moved on is not sent again
        LIMIT 1
       ) claimed;

-- _keeps_its_rows --
-- A lease l whose rows stay its campaign's, out of a follow-up's reach: a live one (its worker's,
-- expired or not: they may be on the wire), or a free one taken over after a hand-over
-- (takeovers: they may have arrived, and go again under their keys). A free lease never handed
-- over holds rows nothing sent, as a queued row is (a cancel cancels them): a follow-up takes
-- them, and a take-over of it later sends only those still queued.
(l.worker_id IS NOT NULL OR l.takeovers > 0)

-- _on_the_wire --
-- Per campaign of %(campaign_ids)s (NULL: of every campaign), its rows on the wire on this
-- protocol, as corrections to its counts per status: the rows of its live leases (a worker's,
-- expired or not) still queued, which the tallies count 'queued' (a claim writes no send row),
-- moved to 'sending', as the row protocol writes them. A free lease's rows wait for a claim:
-- queued. Each leased row found by its primary key (a subquery: joined, the planner walked
-- every queued row of the table instead): this costs the workers' batches, not the campaign's.
SELECT w.campaign_id, m.status, m.sends
  FROM (SELECT l.campaign_id, count(*)::bigint AS rows
          FROM growth_send_leases l
         CROSS JOIN LATERAL unnest(l.send_ids) AS held(id)
         WHERE (%(campaign_ids)s::bigint[] IS NULL
                OR l.campaign_id = ANY(%(campaign_ids)s::bigint[]))
           AND l.worker_id IS NOT NULL
           AND (SELECT s.status FROM growth_sends s WHERE s.id = held.id) = 'queued'
         GROUP BY l.campaign_id) w
 CROSS JOIN LATERAL (VALUES ('queued', -w.rows), ('sending', w.rows)) AS m(status, sends)

-- settle --
-- The settle of one lease: it ends the lease (DELETE ... WHERE id = this claim's lease: a lease
-- taken over has a new id, and then nothing is written), and writes each of its rows once, with
-- the outcome (sends._settled_outcome: the same policy as the row protocol's settle), the
-- attempt, and the hand-over's time the lease kept. A row that recovery made 'unknown' from this
-- very lease (it wrote the lease's id on the row) while the worker was slow, and that is now
-- known accepted, becomes 'sent', also if an operator queued it again meanwhile (retry_unknown
-- keeps the lease's id on it). A row of the lease without an outcome is judged as recovery
-- would judge it (idempotent: the receiver de-duplicates). The campaign is read FOR SHARE, so a cancel cannot commit in
-- between: a transient row of a cancelled campaign ends 'cancelled', never 'queued'. Planned
-- without nested loops, as the row protocol's settle; and without JIT: before PostgreSQL 18 the
-- nested loops it cannot avoid (the rows without an outcome join the one-row lease and campaign)
-- cost 1e10 each once disabled, past every JIT threshold, and a five-row settle spent 3.5 s
-- compiling on PostgreSQL 15.
SET LOCAL enable_nestloop = off;
SET LOCAL jit = off;
WITH campaign AS MATERIALIZED (
    SELECT id, status FROM growth_campaigns WHERE id = %(campaign_id)s FOR SHARE
), ended AS MATERIALIZED (
    DELETE FROM growth_send_leases
     WHERE id = %(lease_id)s AND worker_id = %(worker_id)s
    RETURNING send_ids, handed_over_at, takeovers, in_doubt_since
), unanswered AS (
    -- The lease's rows that no outcome names (a wire that raised, a worker's slip): never left
    -- queued behind the cursor, where no claim would reach them. As recovery would judge them:
    -- in doubt ('unknown') if handed to a plain receiver, cancelled with their campaign if never
    -- handed over, otherwise due again at once, their attempt not counted.
    UPDATE growth_sends s
       SET status = CASE WHEN e.handed_over_at IS NOT NULL AND NOT %(idempotent)s THEN 'unknown'
                         WHEN c.status = 'cancelled' AND e.handed_over_at IS NULL THEN 'cancelled'
                         WHEN c.status = 'cancelled' THEN 'unknown'
                         ELSE 'queued' END,
           next_attempt_at = CASE WHEN c.status <> 'cancelled'
                                       AND (e.handed_over_at IS NULL OR %(idempotent)s)
                                  THEN now() END,
           -- handed over, a row is in doubt queued again too (sends._in_doubt): no follow-up
           -- takes it as never reached (a transport that raised part-way through may have sent it)
           handed_over_at = least(s.handed_over_at, e.in_doubt_since, e.handed_over_at),
           claimed_by = 'lease ' || %(lease_id)s,
           last_error = 'no outcome recorded for this attempt', updated_at = now()
      FROM ended e, campaign c
     WHERE s.id = ANY(ARRAY(SELECT unnest(send_ids) FROM ended  -- a hash, not 500 x 500
                            EXCEPT SELECT unnest(%(ids)s::bigint[])))
       AND s.status = 'queued'
)
UPDATE growth_sends s
   SET {{ sends._settled_outcome }},
       attempts = s.attempts + CASE WHEN r.outcome IN ('throttled', 'suppressed', 'refused', 'unsent',
                                                       'forgotten')
                                    THEN 0 ELSE 1 END,
       -- not delivered (transient, throttled, refused, unsent), a row stays in doubt as it was,
       -- or is in doubt if a holder of the lease before the claim that took it over handed it
       -- over and was lost (takeovers); suppressed, it never is. In doubt, it keeps the earliest
       -- hand-over it may have arrived by: a claim judges the receiver's memory of its key by it.
       handed_over_at = CASE WHEN r.outcome = 'suppressed' THEN NULL
                             WHEN r.outcome IN ('transient', 'throttled', 'refused', 'unsent')
                                  AND (SELECT takeovers FROM ended) > 0
                             THEN coalesce(least(s.handed_over_at,
                                                 (SELECT in_doubt_since FROM ended)),
                                           (SELECT handed_over_at FROM ended), now())
                             WHEN r.outcome IN ('transient', 'throttled', 'refused', 'unsent')
                             THEN s.handed_over_at
                             WHEN r.outcome IN ('in_doubt_retried', 'in_doubt', 'key_taken',
                                                 'forgotten')
                             THEN coalesce(least(s.handed_over_at,
                                                 (SELECT in_doubt_since FROM ended),
                                                 (SELECT handed_over_at FROM ended)), now())
                             ELSE coalesce((SELECT handed_over_at FROM ended), s.handed_over_at,
                                           now()) END,
       first_attempt_at = CASE WHEN r.outcome IN ('suppressed', 'refused', 'unsent', 'forgotten')
                               THEN s.first_attempt_at
                               ELSE coalesce(s.first_attempt_at,
                                             (SELECT handed_over_at FROM ended), now()) END,
       claimed_by = %(worker_id)s
  FROM campaign c,
       {{ sends._outcomes }}
 WHERE s.id = ANY(%(ids)s::bigint[])
   AND s.id = r.id
   AND s.campaign_id = c.id
   -- IN, a hashed subplan: = ANY of the lease's array compared each row with all 500 of its
   -- ids (a fifth of a batch's settle)
   AND ((s.id IN (SELECT unnest(send_ids) FROM ended)
         AND s.status = 'queued' COLLATE "C")
        OR (r.outcome = 'sent'
            AND (s.status = 'unknown' COLLATE "C" OR s.status = 'queued' COLLATE "C")
            AND s.claimed_by = 'lease ' || %(lease_id)s))
RETURNING s.id, s.status;

-- hand_over --
-- A plain receiver's hand-over of one chunk's lease: stamped, committed (and flushed) before the
-- wire takes its rows, with the opt-outs read once more: its rows, and which of them an opt-out
-- now blocks. Those are written 'suppressed' here, as the row protocol's hand-over writes them
-- (the rare row: the others stay one write): were the worker to die before its settle, recovery
-- would make the handed-over lease's queued rows 'unknown', these included, though they never
-- went out. A lease no longer this claim's (taken over, ended) is not stamped and returns
-- nothing: nothing of it is sent.
WITH stamped AS MATERIALIZED (
    UPDATE growth_send_leases
       SET handed_over_at = now()
     WHERE id = %(lease_id)s AND worker_id = %(worker_id)s
    RETURNING send_ids
), checked AS MATERIALIZED (
    SELECT s.id, {{ sends._blocked }} AS blocked
      FROM growth_sends s
     WHERE s.id = ANY(ARRAY(SELECT unnest(send_ids) FROM stamped))
       AND s.status = 'queued'
), withheld AS (
    UPDATE growth_sends s
       SET status = 'suppressed', next_attempt_at = NULL, claimed_by = %(worker_id)s,
           updated_at = now()
     WHERE s.id IN (SELECT id FROM checked WHERE blocked)
       AND s.status = 'queued'
)
SELECT id, blocked FROM checked;

-- recover --
-- Leases whose worker died or stalled past their expiry, in one statement. A lease never
-- handed over (nothing of it went out), or handed to a receiver that de-duplicates and taken
-- over fewer than max_attempts times, is freed: a claim takes it over whole, under a new id, so
-- that the late settle of the lease's first holder matches nothing. Otherwise, or in a cancelled
-- campaign, the lease ends and its rows are written: 'unknown' if it was handed over (nobody can
-- know whether they went out), 'cancelled' if not. The only write to a send row outside the
-- settle, and only after a crash. The campaign row is locked FOR SHARE (waiting: only the lease
-- rows are skipped when locked), so that a cancel committing meanwhile is waited for and its
-- status read as committed (READ COMMITTED re-reads a row it had to wait for): no lease is freed
-- in a cancelled campaign, where nothing claims.
WITH expired AS MATERIALIZED (
    SELECT l.id, l.send_ids, l.handed_over_at IS NOT NULL AS handed,
           c.status <> 'cancelled'
           AND (l.handed_over_at IS NULL
                OR (%(idempotent)s AND l.takeovers + 1 < %(max_attempts)s)) AS again
      FROM growth_send_leases l
      JOIN growth_campaigns c ON c.id = l.campaign_id
     WHERE l.worker_id IS NOT NULL AND l.expires_at < now()
     ORDER BY l.id
     LIMIT %(limit)s
       FOR SHARE OF c FOR UPDATE OF l SKIP LOCKED
), freed AS (
    UPDATE growth_send_leases l
       SET worker_id = NULL, expires_at = NULL, handed_over_at = NULL,
           takeovers = l.takeovers + CASE WHEN e.handed THEN 1 ELSE 0 END,
           in_doubt_since = least(l.in_doubt_since, l.handed_over_at)
      FROM expired e
     WHERE l.id = e.id AND e.again
    RETURNING l.id, cardinality(l.send_ids) AS rows
), lost AS (
    DELETE FROM growth_send_leases l
     USING expired e
     WHERE l.id = e.id AND NOT e.again
    RETURNING l.id
), written AS (
    -- each lease's rows probed by primary key (= ANY of its array, which no hash join can take):
    -- joined to unnest() of the arrays, the plan rested on the guess of how many ids the leases
    -- hold, and on PostgreSQL 17 and later, once growth_send_leases was analyzed, one expired
    -- lease hashed every row of growth_sends (see claim)
    UPDATE growth_sends s
       SET status = CASE WHEN e.handed THEN 'unknown' ELSE 'cancelled' END,
           -- the lease's id: its late settle may still say 'sent' (see settle)
           claimed_by = 'lease ' || e.id,
           last_error = 'lease expired', updated_at = now()
      FROM expired e
     WHERE NOT e.again
       AND s.id = ANY(e.send_ids)
       AND s.status = 'queued'
    RETURNING s.status
)
SELECT (SELECT count(*) FROM freed) AS freed,
       (SELECT coalesce(sum(rows), 0) FROM freed)::bigint AS freed_rows,
       (SELECT count(*) FROM lost) AS lost,
       (SELECT count(*) FROM written WHERE status = 'unknown') AS unknown,
       (SELECT count(*) FROM written WHERE status = 'cancelled') AS cancelled;

-- release --
-- A worker gives back the lease it will not send (the engine paused the campaign): freed for
-- a take-over if nothing of it went out, or it went to a receiver that de-duplicates; in a
-- cancelled campaign (locked first, as cancel locks it) the lease ends and its rows are
-- cancelled. A lease handed to a plain receiver stays to its expiry: its rows may have gone out.
-- One handed to a receiver that de-duplicates (by its claim) may have gone out too, unless the
-- worker knows none of it did (unsent: the batch never reached a wire): as recover frees or
-- ends such a lease, it keeps when its rows were handed over (in_doubt_since) and counts a
-- take-over, or, in a cancelled campaign, its rows become 'unknown'.
WITH campaign AS MATERIALIZED (
    SELECT status FROM growth_campaigns WHERE id = %(campaign_id)s FOR NO KEY UPDATE
), mine AS MATERIALIZED (
    SELECT l.id, l.send_ids, l.handed_over_at IS NOT NULL AND NOT %(unsent)s AS handed,
           -- a take-over of a lease an earlier holder handed over and lost: its rows are in
           -- doubt whatever this holder did (unsent says nothing of that earlier attempt)
           l.takeovers > 0 OR l.in_doubt_since IS NOT NULL AS doubted
      FROM growth_send_leases l
     WHERE l.id = %(lease_id)s AND l.worker_id = %(worker_id)s
       AND (l.handed_over_at IS NULL OR %(idempotent)s)
       AND EXISTS (SELECT 1 FROM campaign)
       FOR UPDATE
), freed AS (
    UPDATE growth_send_leases l
       SET worker_id = NULL, expires_at = NULL, handed_over_at = NULL,
           takeovers = l.takeovers + CASE WHEN m.handed THEN 1 ELSE 0 END,
           in_doubt_since = CASE WHEN m.handed THEN least(l.in_doubt_since, l.handed_over_at)
                                 ELSE l.in_doubt_since END
      FROM mine m
     WHERE l.id = m.id AND (SELECT status FROM campaign) <> 'cancelled'
    RETURNING l.id
), ended AS (
    DELETE FROM growth_send_leases l
     USING mine m
     WHERE l.id = m.id AND (SELECT status FROM campaign) = 'cancelled'
    RETURNING l.id, l.send_ids, m.handed OR m.doubted AS handed
), written AS (
    UPDATE growth_sends s
       SET status = CASE WHEN e.handed THEN 'unknown' ELSE 'cancelled' END,
           -- the lease's id: its late settle may still say 'sent' (see settle)
           claimed_by = CASE WHEN e.handed THEN 'lease ' || e.id ELSE s.claimed_by END,
           last_error = CASE WHEN e.handed THEN 'lease given back after its hand-over'
                             ELSE s.last_error END,
           updated_at = now()
      FROM ended e
     WHERE s.id = ANY(e.send_ids)
       AND s.status = 'queued'
    RETURNING s.status
)
SELECT (SELECT count(*) FROM freed) AS freed,
       (SELECT count(*) FROM written WHERE status = 'cancelled') AS cancelled,
       (SELECT count(*) FROM written WHERE status = 'unknown') AS unknown;
