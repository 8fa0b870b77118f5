-- The life of a growth_sends row: build -> claim -> settle, and recovery of expired leases.
-- Times are the database's now(), never a worker's clock.

-- unbuilt_campaigns --
-- sending campaigns whose recipient list is not built yet (new, or a crash between start and build)
SELECT id FROM growth_campaigns
 WHERE status = 'sending' AND recipients_built_at IS NULL
 ORDER BY id;

-- try_build_lock --
-- one builder per campaign: the others skip it instead of repeating the heavy INSERT; released
-- at commit (or when the builder dies)
SELECT pg_try_advisory_xact_lock(hashtextextended('growth_sends.build:' || %(campaign_id)s, 0))
       AS locked;

-- still_unbuilt --
-- the campaign, if it still waits for its build; a follow-up names what it resends. Its row is
-- held (FOR KEY SHARE) from before the build reads its segments until it commits: a deletion of
-- segments holds it FOR UPDATE to judge what it leaves the campaign (campaigns.sql,
-- lock_audiences_of_segments), so the build reads the segments as they were before or after it,
-- never while it judges. The weakest lock that does: an operator's pause or cancel (FOR NO KEY
-- UPDATE) does not wait for a build, which can take minutes
SELECT resend_of_id, coalesce(resend_root_id, resend_of_id) AS resend_root_id
  FROM growth_campaigns
 WHERE id = %(campaign_id)s AND status = 'sending' AND recipients_built_at IS NULL
   FOR KEY SHARE;

-- _in_audience --
-- A subscriber row s that campaign c may mail: confirmed, in the campaign's segments (none
-- chosen: every segment of the account), its address not suppressed by the tenant.
(s.status = 'confirmed'
 AND (NOT EXISTS (SELECT 1 FROM growth_campaigns_segments cs WHERE cs.campaign_id = c.id)
      OR s.segment_id IN (SELECT cs.segment_id
                            FROM growth_campaigns_segments cs
                           WHERE cs.campaign_id = c.id))
 AND NOT EXISTS (SELECT 1
                   FROM growth_suppressions x
                  WHERE x.account_id = c.account_id
                    AND x.email_lower = s.email_lower))

-- build_recipients --
-- One row per address: the oldest eligible subscriber row stands for it. ON CONFLICT covers both
-- (campaign, subscriber) and (campaign, email_lower), so a rebuild after a crash adds nothing,
-- even when the oldest subscriber row for an address changed in between.
-- job_id is not written here: the database computes it from (campaign_id, subscriber_id).
-- The destination (mailbox provider) comes from the domains classified just before the build.
INSERT INTO growth_sends (campaign_id, account_id, subscriber_id, email, email_lower,
                          destination_id)
SELECT DISTINCT ON (s.email_lower)
       c.id, c.account_id, s.id, s.email, s.email_lower, {{ _destination_of_address }}
  FROM growth_campaigns c
  JOIN growth_subscribers s ON s.account_id = c.account_id
 WHERE c.id = %(campaign_id)s
   AND {{ _in_audience }}
 ORDER BY s.email_lower, s.created_at, s.id
ON CONFLICT DO NOTHING;

-- _destination_of_address --
-- The mailbox provider of subscriber row s's address, if its domain was classified
-- (growth.audience.destinations); NULL: not paced per destination.
(SELECT d.destination_id FROM growth_mail_domains d
  WHERE d.domain = split_part(s.email_lower, '@', 2))

-- lock_resend_family --
-- A follow-up's build, step 1: one build at a time per chain of follow-ups (the original and
-- every follow-up of it), so that two follow-ups built at once cannot both add the same new
-- subscriber. Waits rather than skips: the second build must see what the first added.
SELECT pg_advisory_xact_lock(hashtextextended('growth_sends.resend:' || %(root_id)s, 0));

-- lock_original_cursor --
-- Step 2, in a statement of its own: the lease protocol's cursor of the campaign resent, so that
-- no claim of it runs while take_from_original picks its rows, and take_from_original's snapshot,
-- taken after this wait, shows every lease of it (see leases.sql, lock_cursor).
{{ leases.lock_cursor }}

-- _in_doubt --
-- A row s of a campaign whose message may have arrived although the row does not say 'sent':
-- unknown, or queued or cancelled with an earlier attempt's doubt kept (_doubt_kept), or failed
-- after an operator's retry of it in doubt (the retry's failure says nothing of the attempt that
-- went into doubt; a verdict of "not delivered" clears in_doubt_since). Every writer keeps a
-- hand-over on a row it queues again or cancels only while an earlier attempt's message may have
-- arrived: a cancel that found it queued writes 'unknown', but a retry of it on the wire when
-- its campaign was cancelled, answered "not delivered" (transient, throttled, refused), ends
-- 'cancelled' with it, and so does a lease never handed over, recovered or given back there.
(s.status = 'unknown'
 OR (s.status IN ('queued', 'cancelled') AND {{ _doubt_kept }})
 OR (s.status = 'failed' AND s.in_doubt_since IS NOT NULL))

-- _doubt_kept --
-- Row s keeps the mark of an earlier attempt whose message may have arrived: that attempt's
-- hand-over (handed_over_at), or an operator's retry of the row in doubt (in_doubt_since:
-- retry_unknown clears the hand-over so that the claim sends the row again under its key, as the
-- operator chose, instead of judging the receiver's memory of that key by it, _forgotten_before).
(s.handed_over_at IS NOT NULL OR s.in_doubt_since IS NOT NULL)

-- _leased_in_original --
-- The rows of the campaign resent (original_id) in a lease of the lease protocol that keeps its
-- rows (leases._keeps_its_rows): they go, or go again, with the original (the CTE `leased` of
-- the statements below). A free lease never handed over holds rows nothing sent: a follow-up
-- takes them as it takes queued rows.
SELECT unnest(l.send_ids) AS id
  FROM growth_send_leases l
 WHERE l.campaign_id = %(original_id)s
   AND {{ leases._keeps_its_rows }}

-- _at_address_now --
-- The columns of a row s of the campaign resent as a follow-up judges it: at the address its
-- subscriber sub has now (an operator may have corrected it since the row was built: the typo
-- that failed is not mailed again).
s.id, s.campaign_id, s.account_id, s.subscriber_id, s.status, s.handed_over_at, s.in_doubt_since,
s.resent_in_id, sub.email, sub.email_lower, sub.created_at

-- _resendable --
-- A row s of the campaign resent that a follow-up takes if it is _mailable_now: no follow-up has
-- taken it, it is not in a lease (`leased`), and it was not delivered: failed, cancelled, queued
-- (cancelled there when taken, so the original never sends it) or in doubt (_in_doubt), which
-- is taken only if the operator chose to (the statement that applies this says so beside it).
(s.resent_in_id IS NULL
 AND s.id NOT IN (SELECT id FROM leased)
 AND s.status IN ('failed', 'cancelled', 'queued', 'unknown'))

-- _mailable_now --
-- Whether a row s of the campaign resent may be retried at its subscriber's address now,
-- s.email_lower, checked as any build's is: not suppressed, its subscriber confirmed (_blocked),
-- and no other row of the chain has mailed, may have or is to mail that address
-- (_reached_in_chain). It judges a row alone: two rows taken at one address make one row of the
-- follow-up (take_from_original's DISTINCT ON, resend_audience's count(DISTINCT)).
(NOT {{ _blocked }} AND NOT {{ _reached_in_chain }})

-- take_from_original --
-- Step 3: the recipients the campaign it resends did not deliver to become this campaign's, in
-- one statement that also marks them taken (resent_in) in the original: the rows _resendable
-- and _mailable_now, those in doubt only if the operator chose to (their message may have
-- arrived: the risk of a duplicate was accepted). In doubt (_in_doubt): unknown, or queued again
-- (or cancelled) after its worker's lease ran out while the message was handed over, or after an
-- operator's retry of it in doubt (an idempotent receiver would absorb the original's retry,
-- which carries the same key; the follow-up's carries another, and a stalled worker may still
-- deliver).
-- Never a sent row, never one on the wire ('sending', or in a lease of the lease protocol that
-- keeps its rows, leases._keeps_its_rows: they go, or go again, with the original; a free lease
-- never handed over, which a paused campaign's worker gave back or lost, holds rows nothing
-- sent, and they are taken as any queued row): each row is locked (FOR NO KEY UPDATE, in
-- id order) and these conditions re-checked on its newest version, so a claim or a late settle
-- of the original committed meanwhile wins and the row is left out; a row taken here stays locked
-- until this build commits, and no claim (SKIP LOCKED, then status = 'queued') or retry
-- (resent_in IS NULL) of the original can take it back.
-- A recipient is retried at its subscriber's address as it is now (_at_address_now), one row per
-- address (two rows taken whose subscribers now share one: the oldest subscriber's row stands for
-- both, and both are marked taken). A row not mailable now is not taken: it stays the
-- original's. resend_audience counts what this takes through the same fragments.
WITH leased AS MATERIALIZED (
    {{ _leased_in_original }}
), candidates AS (  -- locked in id order, as every statement that locks several rows of a
                    -- campaign does: two of them wait for each other instead of deadlocking
    SELECT {{ _at_address_now }}, f.id AS follow_up_id
      FROM growth_sends s
      JOIN growth_campaigns f ON f.id = %(campaign_id)s AND s.campaign_id = f.resend_of_id
      JOIN growth_subscribers sub ON sub.id = s.subscriber_id
     WHERE {{ _resendable }}
       AND (f.resend_unknown OR NOT {{ _in_doubt }})
     ORDER BY s.id
       FOR NO KEY UPDATE OF s
), resent AS (  -- s: the row as the follow-up would have it, at its subscriber's address now
    SELECT s.*
      FROM candidates s
     WHERE {{ _mailable_now }}
), taken AS (
    UPDATE growth_sends s
       SET resent_in_id = r.follow_up_id,
           status = CASE WHEN s.status = 'queued' THEN 'cancelled' ELSE s.status END,
           next_attempt_at = NULL,
           updated_at = now()
      FROM resent r
     WHERE s.id = r.id
    RETURNING s.account_id, s.subscriber_id, r.email, r.email_lower, r.created_at
)
INSERT INTO growth_sends (campaign_id, account_id, subscriber_id, email, email_lower,
                          destination_id)
SELECT DISTINCT ON (s.email_lower)
       %(campaign_id)s, s.account_id, s.subscriber_id, s.email, s.email_lower,
       {{ _destination_of_address }}
  FROM taken s
 ORDER BY s.email_lower, s.created_at, s.subscriber_id
ON CONFLICT DO NOTHING;

-- _reached_in_chain --
-- Whether the address a row s of the campaign resent (s.campaign_id) would be retried at,
-- s.email_lower (its subscriber's current one), is one that another row x of the chain (_chain)
-- has mailed, may have mailed or is to mail: sent, on the wire, in doubt (_in_doubt, of x), or
-- queued where it will go: in another campaign of the chain; in the campaign resent if in doubt
-- (_doubt_kept, of x), or if it is not taken with s: not among the statement's `candidates` (in
-- a lease, or claimed by a worker of the original after the statement's snapshot was taken), or
-- its subscriber no longer confirmed, or no longer at that address; it stays queued there, to go if the campaign is
-- resumed. A row a follow-up took (resent_in) is not: its follow-up's row stands for it.
-- Probed for every row, its address edited or not: a follow-up may have mailed an address for
-- a subscriber corrected to it while the row of the address's own subscriber was blocked.
EXISTS (SELECT 1
          FROM growth_sends x
         WHERE x.campaign_id IN ({{ _chain }})
           AND x.email_lower = s.email_lower
           AND x.id <> s.id
           AND x.resent_in_id IS NULL
           AND (x.status IN ('sent', 'sending', 'unknown')
                OR (x.status = 'cancelled'
                    AND (x.handed_over_at IS NOT NULL OR x.in_doubt_since IS NOT NULL))
                OR (x.status = 'failed' AND x.in_doubt_since IS NOT NULL)
                OR (x.status = 'queued'
                    AND (x.campaign_id <> s.campaign_id
                         OR x.handed_over_at IS NOT NULL
                         OR x.in_doubt_since IS NOT NULL
                         OR x.id NOT IN (SELECT id FROM candidates)
                         OR NOT EXISTS (SELECT 1
                                          FROM growth_subscribers xs
                                         WHERE xs.id = x.subscriber_id
                                           AND xs.email_lower = x.email_lower
                                           AND xs.status = 'confirmed')))))

-- _new_to_the_chain --
-- A subscriber row s that no campaign of the chain (its first campaign, root_id, and every
-- follow-up of it) has a row for, by its address or by itself: probed per campaign through
-- (campaign_id, email_lower) and (subscriber_id, campaign_id). A subscriber whose address was
-- edited since its row was built is not new (it was mailed at the address it was built with, or
-- its row is retried, at its new one, by take_from_original); and were it taken, DISTINCT ON
-- would pick it over a newer subscriber at its new address, whose row would then conflict with
-- its own and never be built.
NOT EXISTS (SELECT 1
              FROM growth_sends x
             WHERE x.campaign_id IN ({{ _chain }})
               AND x.email_lower = s.email_lower)
AND NOT EXISTS (SELECT 1
                  FROM growth_sends y
                 WHERE y.campaign_id IN ({{ _chain }})
                   AND y.subscriber_id = s.id)

-- _chain --
-- The campaigns of a chain: its first campaign, root_id, and every follow-up of it.
SELECT m.id FROM growth_campaigns m WHERE m.id = %(root_id)s OR m.resend_root_id = %(root_id)s

-- build_new_subscribers --
-- Step 4, if the operator asked for it: subscribers of the follow-up's audience whose address
-- no campaign of the chain has a row for (they joined after the original was built), one row
-- per address as in build_recipients.
INSERT INTO growth_sends (campaign_id, account_id, subscriber_id, email, email_lower,
                          destination_id)
SELECT DISTINCT ON (s.email_lower)
       c.id, c.account_id, s.id, s.email, s.email_lower, {{ _destination_of_address }}
  FROM growth_campaigns c
  JOIN growth_subscribers s ON s.account_id = c.account_id
 WHERE c.id = %(campaign_id)s
   AND c.resend_new_subscribers
   AND {{ _in_audience }}
   AND {{ _new_to_the_chain }}
 ORDER BY s.email_lower, s.created_at, s.id
ON CONFLICT DO NOTHING;

-- analyze --
-- fresh statistics for the planner after a large build
ANALYZE growth_sends;

-- mark_built --
-- the recipient list is whole; a campaign built for the lease protocol gets its cursor
WITH cursor AS (
    {{ leases.open_cursor }}
)
UPDATE growth_campaigns
   SET recipients_built_at = now(), updated_at = now()
 WHERE id = %(campaign_id)s AND recipients_built_at IS NULL;

-- _blocked --
-- The one statement of "this row must not be mailed now", a condition on the send row s: an
-- opt-out (the tenant's suppression of the address) or a subscriber no longer confirmed. The
-- claim, the hand-over and the read below all use it; it is spliced into each (queries.load).
((SELECT sub.status FROM growth_subscribers sub WHERE sub.id = s.subscriber_id) <> 'confirmed'
 OR EXISTS (SELECT 1
              FROM growth_suppressions x
             WHERE x.account_id = s.account_id
               AND x.email_lower = s.email_lower))

-- _opt_out_clock --
-- The opt-out clock of campaign %(campaign_id)s's tenant (growth.models.OptOutClock): it ticks in
-- the transaction of every write that may make a row _blocked. A claim returns what it read, in
-- the snapshot in which it looked at its rows.
coalesce((SELECT k.ticks
            FROM growth_opt_out_clocks k
            JOIN growth_campaigns c ON c.account_id = k.account_id
           WHERE c.id = %(campaign_id)s), 0)

-- blocked --
-- the rows among these that an opt-out (or an unconfirmed subscriber) now blocks
SELECT s.id
  FROM growth_sends s
 WHERE s.id = ANY(%(ids)s::bigint[])
   AND {{ _blocked }};

-- opt_outs_moved --
-- Before a second look at rows of campaign_id that a claim looked at, having read the tenant's
-- opt-out clock (seen): whether that look may find what the claim's did not. An opt-out committed
-- before the claim's snapshot, the claim saw; one committed after it moved the clock. A statement
-- of its own, sent before `blocked` and not spliced into it: planning `blocked`'s 500 ids alone
-- took longer (0.5 ms) than this whole round trip.
SELECT {{ _opt_out_clock }} <> %(seen)s::bigint AS moved;

-- claim --
-- Take up to batch_size due rows of one campaign no other worker holds (SKIP LOCKED: disjoint
-- batches, no waiting). In the same statement, re-check the tenant's suppressions and the
-- subscriber's status: an opt-out committed since the build turns the row into 'suppressed' before
-- any network call. The rest become 'sending' under a lease. The caller commits, then delivers.
-- The rows are walked through (campaign_id, id) WHERE queued, named by a row comparison: with
-- `campaign_id = X` the planner took the primary key in id order and filtered it, reading all of
-- an older campaign's queued rows before the first of this one's (200,000 rows, 173 ms, per
-- claim, against 1 ms), since its statistics cannot tell that a campaign's rows are one range.
-- Rows are found again by id = ANY(ARRAY(...)), the checks are per-row subqueries and no CTE is
-- joined, so the plan probes primary keys whatever the size of the campaign, of the tenant's
-- lists or of the batch (joins were planned as hash joins over a scan of all of growth_sends and
-- growth_subscribers, or, on stale statistics, as a nested loop of batch x batch comparisons).
-- It starts after id `after` (the worker's hand, where its last batch ended; 0: the front): from
-- the front, until a VACUUM, the scan walks an index entry for every row sent since the last one.
WITH due AS (
    SELECT s.id
      FROM growth_sends s
     WHERE {{ _of_the_campaign }}
       AND (s.campaign_id, s.id) > (%(campaign_id)s, %(after)s)
       AND s.status = 'queued'
       AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= now())
     ORDER BY s.campaign_id, s.id
     LIMIT %(batch_size)s
       FOR UPDATE OF s SKIP LOCKED
), {{ _blocked_in_due }}
{{ _lease_due }}
RETURNING {{ _claimed }};

-- _claimed --
-- What a claim returns of each row it took (growth.managers.sends.Claimed). leased_until, the
-- lease this claim gave, names the claim: a row claimed again by the same worker, after a
-- recovery gave back an attempt that never went out, has the same attempt but a later lease.
s.id, s.campaign_id, s.subscriber_id, s.email, s.job_id, s.status, s.attempts, s.destination_id,
s.lease_expires_at AS leased_until

-- _of_the_campaign --
-- Rows s of the sending campaign %(campaign_id)s, as a range of (campaign_id, id) (see claim).
(s.campaign_id, s.id) < (%(campaign_id)s + 1, 0)
AND EXISTS (SELECT 1 FROM growth_campaigns c WHERE c.id = %(campaign_id)s AND c.status = 'sending')

-- claim_any --
-- The same from every sending campaign on this protocol at once, oldest row first (tools and
-- tests; the worker serves campaigns in turn through `claim`). A campaign with a cursor runs on
-- the lease protocol, whose rows on the wire stay queued: never claimed here.
WITH due AS (
    SELECT s.id
      FROM growth_sends s
      JOIN growth_campaigns c ON c.id = s.campaign_id
     WHERE s.status = 'queued'
       AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= now())
       AND c.status = 'sending'
       AND NOT EXISTS (SELECT 1 FROM growth_send_cursors k WHERE k.campaign_id = c.id)
     ORDER BY s.id
     LIMIT %(batch_size)s
       FOR UPDATE OF s SKIP LOCKED
), {{ _blocked_in_due }}
{{ _lease_due }}
RETURNING {{ _claimed }};

-- _blocked_in_due --
-- The claim's second half, on the rows of `due` (locked): which of them an opt-out now blocks...
blocked AS MATERIALIZED (  -- computed once; each CASE below looks it up in a hash
    SELECT s.id
      FROM growth_sends s
     WHERE s.id = ANY(ARRAY(SELECT id FROM due))
       AND {{ _blocked }}
)

-- _forgotten_before --
-- A claim's bound on the doubt a resend may carry: a row in doubt since a hand-over before it
-- (handed_over_at, kept through its retries) is one whose receiver will have forgotten the key by
-- the time this claim's attempt is on the wire (within its lease). Sent again, it could arrive
-- twice; it is 'unknown' instead, for an operator. forgets_after: how long the receiver remembers
-- a key (0: a plain receiver, which never de-duplicates; NULL: for ever, nothing is forgotten).
statement_timestamp() + make_interval(secs => %(lease)s - %(forgets_after)s::float8)

-- _claim_mark --
-- The time a claim marks row s with (updated_at) and stamps as its own hand-over and first
-- attempt when it makes them (a receiver that de-duplicates): settle and release tell what this
-- claim stamped (>= the mark) from what an earlier attempt did (older) by it. So it is later
-- than every stamp already on the row, by construction: not now(), the transaction's start (a
-- paced claim's began before its wait for the buckets' locks, and another worker may have
-- handed the row over and queued it again in doubt meanwhile: its stamp, newer than that now(),
-- would then read as this claim's, and a settle 'unsent' or 'refused' would clear it, the doubt
-- and the retry horizon lost); and not this statement's start alone either (a row version
-- committed after it can still be locked, re-checked, by FOR UPDATE).
greatest(statement_timestamp(), s.handed_over_at + interval '1 microsecond',
         s.first_attempt_at + interval '1 microsecond')

-- _lease_due --
-- ... and the update: suppress those, make 'unknown' the rows in doubt whose key the receiver
-- has forgotten, lease the rest. The lease runs from this statement, not from its transaction's
-- start (a paced claim's began before its wait for the buckets' locks), and so names this claim
-- even among several in one transaction (see _claimed). The row is marked (updated_at) with
-- _claim_mark, not the lease's time: a hand-over stamp may be later than the statement's start.
UPDATE growth_sends s
   SET status           = CASE WHEN s.id IN (SELECT id FROM blocked) THEN 'suppressed'
                               WHEN s.handed_over_at < {{ _forgotten_before }} THEN 'unknown'
                               ELSE 'sending' END,
       attempts         = s.attempts + CASE WHEN s.id IN (SELECT id FROM blocked) THEN 0
                                            WHEN s.handed_over_at < {{ _forgotten_before }} THEN 0
                                            ELSE 1 END,
       lease_expires_at = CASE WHEN s.id IN (SELECT id FROM blocked) THEN NULL
                               WHEN s.handed_over_at < {{ _forgotten_before }} THEN NULL
                               ELSE statement_timestamp() + make_interval(secs => %(lease)s) END,
       last_error       = CASE WHEN s.id NOT IN (SELECT id FROM blocked)
                                    AND s.handed_over_at < {{ _forgotten_before }}
                               THEN %(forgotten_error)s
                               ELSE s.last_error END,
       -- a row in doubt (an earlier attempt was handed over and its worker lost) keeps the
       -- time of that hand-over, older than this claim's mark: the settle of this attempt
       -- tells them apart by it (see settle)
       handed_over_at   = CASE WHEN s.id IN (SELECT id FROM blocked) THEN NULL
                               WHEN %(hand_over)s
                               THEN coalesce(s.handed_over_at, {{ _claim_mark }})
                               ELSE s.handed_over_at END,
       first_attempt_at = CASE WHEN %(hand_over)s AND s.id NOT IN (SELECT id FROM blocked)
                               THEN coalesce(s.first_attempt_at, {{ _claim_mark }})
                               ELSE s.first_attempt_at END,
       claimed_by       = %(worker_id)s,
       updated_at       = {{ _claim_mark }}
 WHERE s.id = ANY(ARRAY(SELECT id FROM due))

-- claim_paced --
-- The claim of one campaign while some destinations (mailbox providers) are paced: a paced
-- destination's rows are taken only as many as its tokens allow (share_ids/share_counts, through
-- (campaign_id, destination_id, id)), the others' as usual; a paced destination without tokens
-- is skipped without a lease taken on any of its rows. So that a wall of waiting rows of a paced
-- destination cannot make the claim read all of them, the free rows are looked for in a window
-- of at most `scan` queued rows after the worker's hand (`after`), which moves on each time a
-- window is read to its end: O(scan) per claim whatever the campaign's size, and every row is
-- passed over again on the next lap. The last row returned tells how far the window went
-- (scanned, scanned_to), also when nothing was claimed.
WITH scanned AS (
    SELECT s.id, s.destination_id
      FROM growth_sends s
     WHERE {{ _of_the_campaign }}
       AND (s.campaign_id, s.id) > (%(campaign_id)s, %(after)s)
       AND s.status = 'queued'
       AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= now())
     ORDER BY s.campaign_id, s.id
     LIMIT %(scan)s
), free AS (
    SELECT s.id
      FROM growth_sends s
     WHERE s.id = ANY(ARRAY(SELECT id FROM scanned
                             WHERE destination_id IS NULL
                                OR destination_id <> ALL(%(paced)s::int[])))
       AND s.status = 'queued'
     ORDER BY s.id
     LIMIT %(free)s
       FOR UPDATE OF s SKIP LOCKED
), shares AS (
    SELECT share.id
      FROM unnest(%(share_ids)s::int[], %(share_counts)s::int[]) AS g(destination_id, n)
     CROSS JOIN LATERAL (
           SELECT s.id
             FROM growth_sends s
            WHERE (s.campaign_id, s.destination_id, s.id) > (%(campaign_id)s, g.destination_id, 0)
              AND (s.campaign_id, s.destination_id, s.id)
                  < (%(campaign_id)s, g.destination_id + 1, 0)
              AND EXISTS (SELECT 1 FROM growth_campaigns c
                           WHERE c.id = %(campaign_id)s AND c.status = 'sending')
              AND s.status = 'queued'
              AND (s.next_attempt_at IS NULL OR s.next_attempt_at <= now())
            ORDER BY s.campaign_id, s.destination_id, s.id
            LIMIT g.n
              FOR UPDATE OF s SKIP LOCKED) share
), due AS (  -- disjoint: a paced destination's rows are never free
    SELECT id FROM free UNION ALL SELECT id FROM shares
), {{ _blocked_in_due }}, claimed AS (
    {{ _lease_due }}
    RETURNING {{ _claimed }}
)
SELECT claimed.*, reach.scanned, reach.scanned_to
  FROM (SELECT count(*) AS scanned, coalesce(max(id), 0) AS scanned_to FROM scanned) reach
  LEFT JOIN claimed ON true;

-- hand_over --
-- Mark rows as about to go on the wire, committed before the transport sees them, and check
-- suppressions once more: an opt-out committed since the claim still stops the message here.
-- Only rows still held by this claim are touched (this worker, under the lease the claim gave
-- each): one whose lease expired is not sent by us, even when this worker claimed it again
-- since. Recovery gives back the attempt of a row never handed over, so neither the worker nor
-- the attempt tells the two claims apart, and a wire that stalled past its lease sent its stale
-- chunk beside the new claim's.
WITH blocked AS MATERIALIZED (  -- computed once; each CASE below looks it up in a hash
    {{ blocked }}
)
UPDATE growth_sends s
   -- as in the claim, and never older than the claim's mark (updated_at), by which settle and
   -- release tell this claim's stamps from an earlier attempt's: now(), its transaction's start,
   -- can be (a hand-over in the claim's transaction, or one begun before the claim committed)
   SET handed_over_at   = CASE WHEN s.id IN (SELECT id FROM blocked) THEN NULL
                               ELSE coalesce(s.handed_over_at, greatest(now(), s.updated_at)) END,
       first_attempt_at = CASE WHEN s.id IN (SELECT id FROM blocked) THEN s.first_attempt_at
                               ELSE coalesce(s.first_attempt_at, greatest(now(), s.updated_at))
                               END,
       status           = CASE WHEN s.id IN (SELECT id FROM blocked) THEN 'suppressed'
                               ELSE 'sending' END,
       attempts         = s.attempts - CASE WHEN s.id IN (SELECT id FROM blocked) THEN 1 ELSE 0 END,
       lease_expires_at = CASE WHEN s.id IN (SELECT id FROM blocked) THEN NULL
                               ELSE s.lease_expires_at END,
       updated_at       = CASE WHEN s.id IN (SELECT id FROM blocked) THEN now()
                               ELSE s.updated_at END
 WHERE s.id = ANY(%(ids)s)
   AND {{ _under_its_leases }}
   -- in the UPDATE itself: if a recovery moved the row after the statement's snapshot,
   -- PostgreSQL re-checks these conditions on the row's new version and leaves it alone.
   -- COLLATE "C" (the same test: equality compares bytes in every deterministic collation)
   -- keeps send_leased's predicate from matching it: with statistics taken while nothing was
   -- on the wire, that index looked empty, and the planner read every worker's rows on the
   -- wire to find these (2,500 rows passed for 5 in the plan test)
   AND s.status = 'sending' COLLATE "C"
   AND s.claimed_by = %(worker_id)s
RETURNING s.id, s.status;

-- _under_its_leases --
-- Row s is still under a lease its claim gave (leases: the one or two that the claim statements
-- of a batch gave its rows; each statement's is its own, see _lease_due). Not each id paired with
-- its lease: as IN (...) of pairs, or joined to them, the planner compared every row with every
-- pair, 125,000 to 250,000 comparisons and 56 to 119 ms for 500 rows.
s.lease_expires_at = ANY(%(leases)s::timestamptz[])

-- _retried --
-- A settled outcome r of row s that goes back to the queue: a transient failure, a throttle or
-- a message in doubt that a receiver de-duplicating on its key is to get again, within the retry
-- horizon (retry_for seconds after the row's first attempt, an MTA's queue
-- lifetime; attempts are counted, not capped), or a refusal of us (never the row's failure), of
-- a campaign not cancelled.
(((r.outcome IN ('transient', 'throttled', 'in_doubt_retried')
   AND now() < coalesce(s.first_attempt_at, now()) + make_interval(secs => %(retry_for)s))
  OR r.outcome IN ('refused', 'unsent'))
 AND c.status <> 'cancelled')

-- _outcomes --
-- A settle's outcomes as rows r, one for each element of its parallel arrays (both protocols').
unnest(%(ids)s::bigint[], %(attempts)s::int[], %(outcomes)s::text[],
       %(provider_ids)s::text[], %(errors)s::text[], %(retry_afters)s::float8[])
    AS r(id, attempt, outcome, provider_message_id, error, retry_after)

-- _settled_outcome --
-- What a settle writes of an outcome r (r.attempt: the attempt it answers) on row s of campaign c
-- (locked FOR SHARE), in either protocol (leases.sql's settle too). A throttle ("slow down") is
-- due again when the receiver said (Retry-After) or after throttle_delay: the paced rate, not
-- its backoff, decides when it goes; anything else retried waits an exponential backoff with
-- +-10 per cent jitter, capped; a refusal of us (the worker pauses the campaign) at once, for
-- when it is resumed. 'suppressed': the lease protocol's claim found the row blocked.
-- 'in_doubt': the whole message went out and no answer came, to a plain receiver: nobody knows
-- whether it arrived. 'in_doubt_retried': the same, to a receiver that de-duplicates: it goes
-- again under its key, and stays in doubt until sent (its hand-over kept: no follow-up takes it
-- as never reached); cancelled, or past the horizon, it is 'unknown'. 'key_taken': the receiver
-- holds another message under the key: 'unknown'. 'forgotten': the lease protocol's claim found
-- the row in doubt past the receiver's memory of its key: 'unknown', unsent. 'unsent': the worker
-- never put it on the wire (the claim's lease ran out before its turn): as a refusal of us, due
-- again at once with no attempt counted and not in doubt for it, but nothing is paused.
status = CASE
    WHEN r.outcome = 'sent' THEN 'sent'
    WHEN r.outcome = 'suppressed' THEN 'suppressed'
    WHEN r.outcome IN ('in_doubt', 'key_taken', 'forgotten') THEN 'unknown'
    WHEN {{ _retried }} THEN 'queued'
    WHEN r.outcome = 'in_doubt_retried' THEN 'unknown'
    WHEN r.outcome IN ('transient', 'throttled', 'refused', 'unsent') AND c.status = 'cancelled'
    THEN 'cancelled'
    ELSE 'failed' END,
sent_at = CASE WHEN r.outcome = 'sent' THEN now() END,
-- a provider's id longer than the column must not fail the whole batch's settle
provider_message_id = CASE WHEN r.outcome = 'sent' THEN left(r.provider_message_id, 255)
                           ELSE s.provider_message_id END,
last_error = r.error,
next_attempt_at = CASE
    WHEN {{ _retried }} AND r.outcome IN ('refused', 'unsent') THEN now()
    WHEN {{ _retried }} AND r.outcome = 'throttled'
    THEN now() + make_interval(secs => coalesce(r.retry_after, %(throttle_delay)s))
    WHEN {{ _retried }}
    THEN now() + make_interval(secs => least(%(backoff_base)s * 2 ^ (r.attempt - 1),
                                             %(backoff_max)s) * (0.9 + random() * 0.2)) END,
updated_at = now()

-- settle --
-- Record what the transport said, for a whole batch at once. Only rows still in the hands of
-- this claim are touched: this worker's, at the attempt it claimed. A row whose lease expired
-- and was taken over belongs to someone else now, and a late settle of an earlier attempt (this
-- worker's own, waiting on its settler thread) must not overwrite the current one. A row that
-- went 'unknown' while we were slow, and that we now know was accepted, becomes 'sent'; so does
-- one an operator queued again meanwhile (retry_unknown keeps its claimed_by and attempt) and
-- that no claim has taken since: sent again, it would arrive twice.
-- The batch's campaign row is locked (FOR SHARE, before any send row: it is joined first) so
-- that the status read is the current one and a cancel cannot commit in between: a transient
-- row of a cancelled campaign ends 'cancelled', never 'queued' where nothing would claim it.
-- A throttle ("slow down") is not the row's failure: its attempt is given back, and it is due
-- again when the receiver said (Retry-After) or after throttle_delay; the paced rate, not its
-- backoff, decides when it goes.
-- Planned without nested loops: on a large table the planner takes the batch's rows, found by
-- primary key, for a single row (in its statistics no row has claimed_by = this worker) and
-- pairs each of them with every outcome (at 10,000,000 rows: 249,500 pairs, 78 ms a batch of
-- 500 instead of 19 with the hash join it then takes). Without JIT, as the lease settle: a
-- nested loop it could not avoid would cost 1e10 before PostgreSQL 18, and be compiled.
SET LOCAL enable_nestloop = off;
SET LOCAL jit = off;
WITH campaign AS MATERIALIZED (
    SELECT id, status FROM growth_campaigns WHERE id = %(campaign_id)s FOR SHARE
)
UPDATE growth_sends s
   SET {{ _settled_outcome }},
       attempts = s.attempts - CASE WHEN r.outcome IN ('throttled', 'refused', 'unsent') THEN 1
                                    ELSE 0 END,
       lease_expires_at = NULL,
       -- an attempt refused (or unsent) is known not delivered: queued again, the row is not in
       -- doubt (a follow-up may take it; see take_from_original), unless an earlier attempt was
       -- handed over and its worker lost: that hand-over's time, kept by the claim, is older
       -- than the claim's mark (updated_at: only the claim writes it on a row on the wire, later
       -- than every stamp on the row, see _claim_mark), and stays
       handed_over_at = CASE WHEN r.outcome IN ('transient', 'throttled', 'refused', 'unsent')
                                  AND s.handed_over_at >= s.updated_at THEN NULL
                             ELSE s.handed_over_at END,
       -- a refusal of us (or no send) was no attempt: the row's retry horizon starts at its
       -- first real one. Only a horizon this claim started is undone (no older than its
       -- updated_at, as for the hand-over): a throttled attempt gave its number back, but went
       -- on the wire
       first_attempt_at = CASE WHEN r.outcome IN ('refused', 'unsent')
                                    AND s.first_attempt_at >= s.updated_at THEN NULL
                               ELSE s.first_attempt_at END
  FROM campaign c,
       {{ _outcomes }}
 WHERE s.id = ANY(%(ids)s::bigint[])
   AND s.id = r.id
   AND s.campaign_id = c.id
   AND s.claimed_by = %(worker_id)s
   AND s.attempts = r.attempt
   -- COLLATE "C" as in hand_over: PostgreSQL 18 drew status IN ('sending', 'unknown') out of
   -- this OR and skip-scanned send_campaign_status for it, past every worker's rows on the wire
   AND (s.status = 'sending' COLLATE "C"
        OR ((s.status = 'unknown' COLLATE "C" OR s.status = 'queued' COLLATE "C")
            AND r.outcome = 'sent'))
RETURNING s.id, s.status;

-- lock_campaigns_of_expired --
-- Recovery, step 1: lock (FOR SHARE, in id order) the campaigns that have rows with an expired
-- lease, before any of those rows: recover_expired then reads their current status, and a
-- cancel waits until it has committed (a row recovered to 'queued' in a campaign cancelled
-- meanwhile would stay queued for ever). Nothing expired, nothing locked: one index probe.
SELECT c.id
  FROM growth_campaigns c
 WHERE c.id IN (SELECT campaign_id FROM growth_sends
                 WHERE status = 'sending' AND lease_expires_at < now())
 ORDER BY c.id
   FOR SHARE;

-- recover_expired --
-- Step 2, in the same transaction. Rows whose worker died (or stalled) past the lease. A row
-- never handed over was never sent: it is queued again (its attempt does not count), or
-- cancelled with its campaign. With an idempotent receiver a handed-over row is retried with the
-- same key and the duplicate is absorbed there; otherwise (or when the campaign was cancelled)
-- nobody can know whether it went out, and it becomes 'unknown' for an operator: never silently
-- resent or dropped.
WITH expired AS (
    SELECT id
      FROM growth_sends
     WHERE status = 'sending' AND lease_expires_at < now()
       AND campaign_id = ANY(%(campaign_ids)s)
     ORDER BY lease_expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE growth_sends s
   SET status = CASE WHEN s.handed_over_at IS NULL AND c.status = 'cancelled' THEN 'cancelled'
                     WHEN s.handed_over_at IS NULL THEN 'queued'
                     WHEN %(idempotent)s AND s.attempts < %(max_attempts)s
                          AND c.status <> 'cancelled' THEN 'queued'
                     ELSE 'unknown' END,
       attempts = s.attempts - CASE WHEN s.handed_over_at IS NULL THEN 1 ELSE 0 END,
       lease_expires_at = NULL,
       last_error = 'lease expired while held by ' || s.claimed_by,
       updated_at = now()
  FROM expired e, growth_campaigns c
 WHERE s.id = e.id
   AND c.id = s.campaign_id
RETURNING s.id, s.campaign_id, s.status;

-- release --
-- Give back rows this claim holds (this worker, under the lease it gave) but will not send: its
-- campaign cannot be sent as it is (the engine paused it). Only rows a resend cannot duplicate:
-- not handed over, or handed over to a receiver that absorbs a resend. Their attempt does not
-- count. A row handed over keeps the time it was: queued again, it is in doubt (_in_doubt)
-- until it is sent again under its key, and no follow-up takes it as never reached (a transport
-- that raised part-way through a batch may have delivered some of it). Unless the worker knows
-- none of them went out (unsent: the batch never reached a wire): then the hand-over the claim
-- stamped (a receiver that de-duplicates; no older than the claim's updated_at, see settle) is
-- undone, or the claim would have made rows never sent look in doubt since it, and once the
-- receiver forgot that moment, 'unknown' (a campaign paused for its template and fixed an hour
-- later). The campaign row is locked first, as cancel locks it: a cancel committed meanwhile is
-- seen, and its rows end cancelled, not queued.
WITH campaign AS (
    SELECT status FROM growth_campaigns WHERE id = %(campaign_id)s FOR NO KEY UPDATE
)
UPDATE growth_sends s
   SET status = CASE WHEN (SELECT status FROM campaign) = 'cancelled' THEN 'cancelled'
                     ELSE 'queued' END,
       handed_over_at = CASE WHEN %(unsent)s AND handed_over_at >= updated_at THEN NULL
                             ELSE handed_over_at END,
       first_attempt_at = CASE WHEN %(unsent)s AND first_attempt_at >= updated_at THEN NULL
                               ELSE first_attempt_at END,
       attempts = attempts - 1, lease_expires_at = NULL, claimed_by = '', updated_at = now()
 WHERE id = ANY(%(ids)s)
   AND campaign_id = %(campaign_id)s
   AND status = 'sending' COLLATE "C"  -- as in hand_over: not send_leased's predicate
   AND claimed_by = %(worker_id)s
   AND lease_expires_at = ANY(%(leases)s::timestamptz[])  -- _under_its_leases
   AND (handed_over_at IS NULL OR %(idempotent)s)
RETURNING id;

-- lock_campaigns_of_unknown --
-- An operator's retry, step 1: lock (in id order: no deadlock between two operators) the
-- campaigns of the given rows that are still 'unknown', before anything is requeued. Holding
-- these locks until commit is what keeps a concurrent `finish` from judging the campaign done by
-- a snapshot that does not show the rows requeued here (see lock_finishable), and a concurrent
-- cancel from leaving them queued.
SELECT c.id
  FROM growth_campaigns c
 WHERE c.id IN (SELECT campaign_id FROM growth_sends WHERE id = ANY(%(ids)s) AND status = 'unknown')
 ORDER BY c.id
   FOR NO KEY UPDATE;

-- retry_unknown --
-- Step 2, in a later statement of the same transaction, so that it reads the campaigns as they
-- are now that they are locked: unknown -> queued with the same job id (the operator accepts a
-- possible duplicate), due at once (next_attempt_at now: the lease protocol's claim finds a row
-- behind its cursor by it, the row protocol's takes it as due), and a campaign that had finished
-- goes back to sending so
-- the worker picks the rows up (a paused one stays paused until resumed). Rows of a cancelled
-- campaign stay unknown: nothing would ever send them. claimed_by (and the attempt) stay: they
-- name the claim whose message went into doubt, and its late settle, if it says 'sent' before
-- a claim takes the row again, still records it (settle; leases.sql, settle), instead of the
-- row going out a second time. The hand-over goes (the claim would judge the receiver's memory
-- of the key by it, and make the row 'unknown' again instead of sending it), but not the doubt:
-- in_doubt_since keeps when the row went into doubt (its hand-over, or when it became
-- 'unknown', the lease protocol's recovery writing none), so that a cancel, or a retry answered
-- "not delivered" or failed, leaves it in doubt (_in_doubt), not reading as never reached.
WITH requeued AS (
    UPDATE growth_sends s
       SET status = 'queued', next_attempt_at = now(), lease_expires_at = NULL,
           handed_over_at = NULL, updated_at = now(),
           in_doubt_since = coalesce(s.in_doubt_since, s.handed_over_at, s.updated_at),
           last_error = 'requeued by an operator after: ' || s.last_error
      FROM growth_campaigns c
     WHERE s.id = ANY(%(ids)s)
       AND s.status = 'unknown'
       AND s.resent_in_id IS NULL  -- handed to a follow-up: it sends the message, not this one
       AND c.id = s.campaign_id
       AND c.status IN ('sending', 'paused', 'sent')
    RETURNING s.id, s.campaign_id
), reopened AS (
    UPDATE growth_campaigns c
       SET status = 'sending', finished_at = NULL, updated_at = now()
     WHERE c.id IN (SELECT campaign_id FROM requeued)
       AND c.status = 'sent'
    RETURNING c.id
)
SELECT r.id, r.campaign_id, r.campaign_id IN (SELECT id FROM reopened) AS reopened
  FROM requeued r;

-- history_of_address --
-- Every campaign of the tenant that has a row for this address, newest first: one probe of
-- (campaign_id, email_lower) per campaign, whatever the size of the campaigns
SELECT c.id AS campaign_id, c.name AS campaign_name, s.status, s.sent_at, s.updated_at,
       s.id AS send_id, s.job_id, s.attempts, s.last_error, s.provider_message_id, s.resent_in_id
  FROM growth_campaigns c
  JOIN growth_sends s ON s.campaign_id = c.id AND s.email_lower = %(email_lower)s
 WHERE c.account_id = %(account_id)s
 ORDER BY c.created_at DESC, c.id DESC;

-- resend_audience --
-- What a follow-up of this campaign (original_id) would take, counted without building it, in
-- one row: the rows not sent, judged through the fragments take_from_original applies, at each
-- subscriber's address now: taken by the follow-up (`takeable`, by status; 'in_doubt':
-- _in_doubt, taken only if asked), blocked (suppressed, or not _mailable_now), taken by an
-- earlier follow-up, or on the wire ('sending', or a row of a lease that keeps its rows). Then
-- the rows its build would create, one per address as its INSERTs make them: the addresses of
-- the rows taken, without and with those in doubt, and the new subscribers' whose
-- address none of those has (build_new_subscribers runs after take_from_original, and finds the
-- rows it added in the chain). Served by (campaign_id, status, sent_at).
-- Without JIT: compiling its per-row checks took eight times as long as running them (20,000
-- rows not sent: 0.75 s against 0.09).
SET LOCAL jit = off;
WITH leased AS MATERIALIZED (
    {{ _leased_in_original }}
), unsent AS (
    SELECT {{ _at_address_now }}
      FROM growth_sends s
      JOIN growth_subscribers sub ON sub.id = s.subscriber_id
     WHERE s.campaign_id = %(original_id)s
       AND s.status <> 'sent'
), candidates AS (  -- the rows take_from_original would lock and judge (_reached_in_chain)
    SELECT id FROM unsent WHERE id NOT IN (SELECT id FROM leased)
), judged AS MATERIALIZED (
    SELECT s.email_lower, {{ _in_doubt }} AS in_doubt,
           CASE WHEN {{ _in_doubt }} THEN 'in_doubt' ELSE s.status END AS status,
           CASE WHEN s.resent_in_id IS NOT NULL THEN 'taken'
                WHEN s.status = 'sending' OR s.id IN (SELECT id FROM leased) THEN 'sending'
                WHEN {{ _resendable }} AND {{ _mailable_now }} THEN 'resent'
                ELSE 'blocked' END AS verdict
      FROM unsent s
), newcomers AS (  -- build_new_subscribers' addresses, before take_from_original adds its rows
    SELECT DISTINCT s.email_lower
      FROM growth_campaigns c
      JOIN growth_subscribers s ON s.account_id = c.account_id
     WHERE c.id = %(original_id)s
       AND {{ _in_audience }}
       AND {{ _new_to_the_chain }}
), takeable AS (
    SELECT status, count(*) AS rows FROM judged WHERE verdict = 'resent' GROUP BY status
)
SELECT ARRAY(SELECT status FROM takeable ORDER BY status) AS statuses,
       ARRAY(SELECT rows FROM takeable ORDER BY status) AS takeable_rows,
       count(*) FILTER (WHERE verdict = 'blocked') AS blocked,
       count(*) FILTER (WHERE verdict = 'taken') AS already_resent,
       count(*) FILTER (WHERE verdict = 'sending') AS in_flight,
       count(DISTINCT email_lower) FILTER (WHERE verdict = 'resent' AND NOT in_doubt)
           AS addresses,
       count(DISTINCT email_lower) FILTER (WHERE verdict = 'resent') AS addresses_with_doubt,
       (SELECT count(*)
          FROM newcomers n
         WHERE n.email_lower NOT IN (SELECT email_lower FROM judged
                                      WHERE verdict = 'resent' AND NOT in_doubt))
           AS new_subscribers,
       (SELECT count(*)
          FROM newcomers n
         WHERE n.email_lower NOT IN (SELECT email_lower FROM judged WHERE verdict = 'resent'))
           AS new_subscribers_with_doubt
  FROM judged;
