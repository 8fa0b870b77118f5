-- Rate limits: token buckets in the database, so every worker on every host draws from the same
-- ones and a restart forgets nothing. Refills are computed from the database's clock.
-- A bucket's effective rate is the lower of throttled_to (while a receiver's deferrals hold it
-- down) and the configured per_second; no rate at all (a destination limited only in messages on the wire)
-- grants without counting tokens. A bucket with per_day is a calendar-day quota in its tenant's
-- time zone (the warm-up schedule): full again at local midnight, no refill in between.

-- _effective_rate --
least(r.throttled_to, r.per_second)

-- _available --
-- tokens in bucket r now (Infinity: nothing to count); a day's quota in the tenant's time zone,
-- checked by the caller (growth.sending.pacing.zone: a name PostgreSQL refuses would fail it)
CASE
    WHEN r.per_day IS NOT NULL THEN
        CASE WHEN (r.refilled_at AT TIME ZONE %(time_zone)s)::date
                  < (now() AT TIME ZONE %(time_zone)s)::date
             THEN r.per_day::float8 ELSE r.tokens END
    WHEN {{ _effective_rate }} IS NULL THEN 'Infinity'::float8
    -- the time refilled counts only until the bucket is full: a rate times a long quiet spell
    -- could overflow float8, and PostgreSQL raises on an overflow
    ELSE least(r.burst, r.tokens + {{ _effective_rate }}
                                   * least(greatest(0, extract(epoch FROM now() - r.refilled_at)),
                                           r.burst / nullif({{ _effective_rate }}, 0)))
END

-- take --
-- Lock the buckets (in id order: no deadlock between workers), refill them for the time
-- elapsed, and grant the same number of tokens from each: as many as wanted, or as the emptiest
-- holds, but nothing below a full batch (a burst's worth at most) so that workers do not nibble
-- one message at a time; a day's quota grants what is left of it. wait: seconds until such a
-- grant would be possible (for a spent quota: until the tenant's midnight).
WITH locked AS (
    SELECT r.id, r.burst, r.per_day, {{ _effective_rate }} AS rate,
           {{ _available }} AS available,
           CASE WHEN r.per_day IS NOT NULL THEN 1 ELSE least(%(want)s, floor(r.burst)) END
               AS smallest_grant,
           extract(epoch FROM date_trunc('day', now() AT TIME ZONE %(time_zone)s)
                              + interval '1 day'
                              - (now() AT TIME ZONE %(time_zone)s)) AS to_midnight
      FROM growth_rate_limits r
     WHERE r.id = ANY(%(ids)s)
     ORDER BY r.id
       FOR UPDATE OF r
), decision AS (
    SELECT CASE WHEN count(*) < cardinality(%(ids)s::int[]) THEN 0  -- one is gone: the caller's
                WHEN bool_and(floor(available) >= smallest_grant)
                THEN least(%(want)s, min(floor(available)))::int
                ELSE 0 END AS granted,
           count(*) AS found,
           greatest(0, max(CASE WHEN floor(available) >= smallest_grant THEN 0
                                WHEN per_day IS NOT NULL THEN to_midnight
                                ELSE (smallest_grant - available) / rate END))::float AS wait
      FROM locked
)
UPDATE growth_rate_limits r
   SET tokens = CASE WHEN l.available = 'Infinity' THEN r.tokens
                     ELSE l.available - d.granted END,
       refilled_at = now()
  FROM locked l, decision d
 WHERE r.id = l.id
RETURNING d.granted, d.wait, d.found;

-- give_back --
-- tokens granted but not used (the campaign had fewer rows due, some were suppressed)
UPDATE growth_rate_limits
   SET tokens = least(coalesce(per_day, burst), tokens + %(count)s)
 WHERE id = ANY(%(ids)s);

-- lock_destinations --
-- take_destinations' first statement, sent in the same string and so in the same transaction:
-- wait for the locks of the tenant's destination buckets, in id order, and take them. The take
-- that follows takes its snapshot only then, and counts the rows on the wire that the worker
-- that held them claimed meanwhile. As one statement, its count predated its wait, and two
-- workers filled the same room of a cap on messages on the wire.
SELECT id
  FROM growth_rate_limits
 WHERE destination_id IS NOT NULL
   AND (account_id IS NULL OR account_id = %(account_id)s)
 ORDER BY id
   FOR UPDATE;

-- take_destinations --
-- The destinations (mailbox providers) paced for a tenant's mail: every bucket of a destination,
-- global or this tenant's, locked in id order and refilled. Each destination may take as many
-- messages now as its emptiest bucket holds, and no more than its max_in_flight leaves room for
-- beside the messages on the wire to it (rows 'sending', through the partial index of leased
-- rows, and the rows of live leases), and at most `want`; the tokens are taken (the caller gives
-- back what the claim did not use).
WITH locked AS (
    SELECT r.id, r.destination_id, r.max_in_flight, {{ _effective_rate }} AS rate,
           r.throttled_to IS NOT NULL AS throttled, {{ _available }} AS available
      FROM growth_rate_limits r
     WHERE r.destination_id IS NOT NULL
       AND (r.account_id IS NULL OR r.account_id = %(account_id)s)
     ORDER BY r.id
       FOR UPDATE OF r
), capped AS MATERIALIZED (
    SELECT DISTINCT destination_id FROM locked WHERE max_in_flight IS NOT NULL
), on_the_wire AS (
    SELECT w.destination_id, count(*) AS messages
      FROM (SELECT s.destination_id
              FROM growth_sends s
             WHERE s.status = 'sending'
               AND s.destination_id IN (SELECT destination_id FROM capped)
            UNION ALL  -- the lease protocol's, whose rows in flight stay 'queued'
            SELECT s.destination_id
              FROM growth_send_leases l
              JOIN growth_sends s ON s.id = ANY(l.send_ids)
             WHERE l.worker_id IS NOT NULL
               AND EXISTS (SELECT 1 FROM capped)
               AND s.destination_id IN (SELECT destination_id FROM capped)) w
     GROUP BY w.destination_id
), room AS (
    SELECT l.*, greatest(0, least(%(want)s::int, floor(l.available),
                                  coalesce(l.max_in_flight - w.messages, l.max_in_flight,
                                           %(want)s::int)))::int AS room
      FROM locked l
      LEFT JOIN on_the_wire w ON w.destination_id = l.destination_id
), per_destination AS (
    SELECT destination_id, min(room) AS granted, bool_or(throttled) AS throttled,
           bool_or(max_in_flight IS NOT NULL) AS capped, array_agg(id ORDER BY id) AS bucket_ids,
           greatest(0, max(CASE WHEN available >= 1 OR rate IS NULL THEN 0
                                ELSE (1 - available) / rate END))::float AS wait
      FROM room
     GROUP BY destination_id
), taken AS (
    UPDATE growth_rate_limits r
       SET tokens = CASE WHEN l.available = 'Infinity' THEN r.tokens
                         ELSE l.available - p.granted END,
           refilled_at = now()
      FROM locked l
      JOIN per_destination p ON p.destination_id = l.destination_id
     WHERE r.id = l.id
)
SELECT destination_id, granted, throttled, capped, bucket_ids, wait FROM per_destination;

-- _slow_down --
-- A receiver said "slow down" (see growth.sending.transports.errors): the bucket's rate becomes
-- `decrease` x what the receiver was taking (its effective rate, or for a bucket without one the
-- rate it was seen accepting lately, `accepted`, by every worker; 0: unknown), never below `floor`.
-- That basis is kept (throttled_from): recovery steps are a share of it. Once per round trip:
-- not again for answers to messages sent before the last decrease (`sent_since`: when the batch
-- that met this throttle took its tokens), nor within `every` seconds. Tokens drop to nothing:
-- every worker stops at once.
DO UPDATE SET
    throttled_from = {{ _taking }},
    throttled_to = greatest(%(floor)s, {{ _taking }} * %(decrease)s),
    throttled_at = now(), adjusted_at = now(), tokens = 0, refilled_at = now()
 WHERE growth_rate_limits.throttled_at IS NULL
    OR (growth_rate_limits.throttled_at < now() - make_interval(secs => %(every)s)
        AND growth_rate_limits.throttled_at < now() - make_interval(secs => %(sent_since)s))

-- _taking --
-- what the receiver was taking when it said "slow down": the bucket's effective rate; for a
-- bucket without one (a provider paced only in messages on the wire), the rate it was seen
-- accepting; neither known, the floor. (The rate seen accepting is an average over seconds
-- that include the slow ones after the last throttle: taken whenever the bucket has a rate, it
-- would ratchet the rate down throttle after throttle.)
greatest(%(floor)s, coalesce(least(growth_rate_limits.throttled_to, growth_rate_limits.per_second),
                             CASE WHEN %(accepted)s > 0 THEN %(accepted)s END,
                             %(floor)s))

-- throttle_destination --
-- a destination's throttle: its global bucket, created (with no configured rate) if it has none
WITH changed AS (
    INSERT INTO growth_rate_limits (destination_id, transport, burst, throttled_to,
                                    throttled_from, throttled_at, adjusted_at, tokens)
    VALUES (%(destination_id)s, '', %(burst)s,
            greatest(%(floor)s, greatest(%(accepted)s, %(floor)s) * %(decrease)s),
            greatest(%(accepted)s, %(floor)s), now(), now(), 0)
    ON CONFLICT (destination_id) WHERE account_id IS NULL
    {{ _slow_down }}
    RETURNING id, throttled_to
)
INSERT INTO growth_rate_limit_changes (rate_limit_id, per_second, reason)
SELECT id, throttled_to, %(reason)s FROM changed
RETURNING rate_limit_id, per_second;

-- throttle_transport --
-- the relay's or ESP's limit on our whole account: the transport-wide bucket
WITH changed AS (
    INSERT INTO growth_rate_limits (transport, burst, throttled_to, throttled_from, throttled_at,
                                    adjusted_at, tokens)
    VALUES (%(transport)s, %(burst)s,
            greatest(%(floor)s, greatest(%(accepted)s, %(floor)s) * %(decrease)s),
            greatest(%(accepted)s, %(floor)s), now(), now(), 0)
    ON CONFLICT (transport) WHERE account_id IS NULL AND destination_id IS NULL
    {{ _slow_down }}
    RETURNING id, throttled_to
)
INSERT INTO growth_rate_limit_changes (rate_limit_id, per_second, reason)
SELECT id, throttled_to, %(reason)s FROM changed
RETURNING rate_limit_id, per_second;

-- lock_recovering --
-- recover's first statement, in the same string: the buckets it may raise, locked in id order
-- as a take locks them. In the order its scan met them, it held one that a take wanted while
-- waiting for one that take held, and PostgreSQL aborted one of the two.
SELECT id
  FROM growth_rate_limits r
 WHERE r.throttled_to IS NOT NULL
   AND (r.destination_id = ANY(%(destination_ids)s::int[])
        OR (r.transport = %(transport)s AND r.account_id IS NULL AND r.destination_id IS NULL))
 ORDER BY id
   FOR UPDATE;

-- recover --
-- Good answers from these destinations (or through this transport): each of their throttled
-- buckets is raised once per `every` seconds. Below the rate the receiver was taking at the
-- last throttle, by `recovery` x that rate (additive increase: back there in a few periods);
-- at or past it, by `probe` x its rate (the receiver's limit may have risen, or was never
-- seen: a bucket born at the floor finds it in a few dozen periods, not hours). Back at its
-- configured rate it is no longer throttled; one that has none stops at `ceiling`.
WITH raised AS (
    UPDATE growth_rate_limits r
       SET throttled_to = CASE
               WHEN r.per_second IS NOT NULL AND r.throttled_to + {{ _step }} >= r.per_second
               THEN NULL
               ELSE least(%(ceiling)s, r.throttled_to + {{ _step }}) END,
           adjusted_at = now()
     WHERE r.throttled_to IS NOT NULL
       AND r.throttled_to < %(ceiling)s
       AND (r.destination_id = ANY(%(destination_ids)s::int[])
            OR (r.transport = %(transport)s AND r.account_id IS NULL AND r.destination_id IS NULL))
       AND r.adjusted_at < now() - make_interval(secs => %(every)s)
    RETURNING r.id, r.throttled_to, {{ _effective_rate }} AS rate
)
INSERT INTO growth_rate_limit_changes (rate_limit_id, per_second, reason)
SELECT id, rate, CASE WHEN throttled_to IS NULL THEN 'recovered: back to the configured rate'
                      ELSE 'good answers: raised' END
  FROM raised
RETURNING rate_limit_id, per_second;

-- _step --
(CASE WHEN r.throttled_to < coalesce(r.throttled_from, 0)
      THEN %(recovery)s * r.throttled_from
      ELSE %(probe)s * r.throttled_to END)

-- throttled_buckets --
-- are any buckets held down by throttling (then good answers are worth a recover)?
SELECT EXISTS (SELECT 1 FROM growth_rate_limits WHERE throttled_to IS NOT NULL) AS throttled;

-- lock_transport_limit --
-- transport_limit's first statement, in the same string: the transport-wide bucket locked, so
-- that the configuration transport_limit reads as the one it replaces is still the bucket's when
-- it writes (an operator's edit saved between the two would be recorded as replaced by neither)
SELECT id FROM growth_rate_limits
 WHERE transport = %(transport)s AND account_id IS NULL AND destination_id IS NULL
   FOR UPDATE;

-- transport_limit --
-- The transport-wide bucket from settings, created or re-configured. A configuration it sets
-- (a new bucket, or a new version of one: an operator's form loaded before is refused, as
-- after another's edit) goes into the bucket's history with the version it made, which the
-- refusal reads to tell who changed the limit; the same again writes nothing. A bucket created
-- meanwhile by another worker was not there to read: it was created at version 1.
WITH was AS (
    SELECT per_second, burst, version
      FROM growth_rate_limits
     WHERE transport = %(transport)s AND account_id IS NULL AND destination_id IS NULL
), applied AS (
    INSERT INTO growth_rate_limits (transport, per_second, burst)
    VALUES (%(transport)s, %(per_second)s, %(burst)s)
    ON CONFLICT (transport) WHERE account_id IS NULL AND destination_id IS NULL
    DO UPDATE SET per_second = EXCLUDED.per_second, burst = EXCLUDED.burst,
                  version = growth_rate_limits.version
                            + CASE WHEN (growth_rate_limits.per_second, growth_rate_limits.burst)
                                        IS DISTINCT FROM (EXCLUDED.per_second, EXCLUDED.burst)
                                   THEN 1 ELSE 0 END
    RETURNING id, version, per_second, burst, throttled_to, xmax = 0 AS created
), recorded AS (
    INSERT INTO growth_rate_limit_changes (rate_limit_id, per_second, reason, version)
    SELECT a.id, least(a.throttled_to, a.per_second),
           %(reason)s::text || ': ' || a.per_second::text || '/s, burst ' || a.burst::text
           || coalesce(' (was ' || coalesce(w.per_second::text || '/s', 'no rate')
                       || ', burst ' || w.burst::text || ')', ''),
           a.version
      FROM applied a
      LEFT JOIN was w ON true
     WHERE a.created OR a.version <> coalesce(w.version, 1)
)
SELECT id FROM applied;

-- configure --
-- An operator's edit (growth.admin.limits) of what a bucket limits and how, saved only onto the
-- version the form was loaded from: after an edit saved since (another operator's, or another
-- tab's) it writes nothing and returns no row, for the caller to refuse. A change is a new
-- version; the engine's writes (tokens, throttled_to) are none: a receiver's throttle refuses no
-- operator's rate. A warm-up quota is the engine's, never configured here.
UPDATE growth_rate_limits
   SET account_id = %(account_id)s, destination_id = %(destination_id)s,
       transport = %(transport)s, per_second = %(per_second)s, burst = %(burst)s,
       max_in_flight = %(max_in_flight)s,
       version = version
                 + CASE WHEN (account_id, destination_id, transport, per_second, burst, max_in_flight)
                             IS DISTINCT FROM (%(account_id)s, %(destination_id)s, %(transport)s,
                                               %(per_second)s, %(burst)s, %(max_in_flight)s)
                        THEN 1 ELSE 0 END
 WHERE id = %(id)s
   AND version = %(version)s
   AND per_day IS NULL
RETURNING version, throttled_to;

-- transport_bucket --
-- the transport-wide bucket, if one exists (configured, or created by a throttle)
SELECT id FROM growth_rate_limits
 WHERE transport = %(transport)s AND account_id IS NULL AND destination_id IS NULL;

-- warmup_quota --
-- The tenant's warm-up quota for today (per_day, from its schedule): created, or resized when
-- the day's cap changed; the tokens already spent today stay spent.
INSERT INTO growth_rate_limits (account_id, transport, per_day, burst, tokens)
VALUES (%(account_id)s, '', %(per_day)s, 1, %(per_day)s)
ON CONFLICT (account_id) WHERE per_day IS NOT NULL
DO UPDATE SET tokens = greatest(0, growth_rate_limits.tokens
                                   + EXCLUDED.per_day - growth_rate_limits.per_day),
              per_day = EXCLUDED.per_day
RETURNING id;

-- end_warmup --
-- the schedule is over (or was removed): no quota any more
DELETE FROM growth_rate_limits WHERE account_id = %(account_id)s AND per_day IS NOT NULL;

-- current_rates --
-- messages a second over the last %(seconds)s seconds, per account: only campaigns unfinished or
-- finished since can have sent anything, and each is one range of (campaign_id, status, sent_at)
SELECT c.account_id, count(*)::float / %(seconds)s AS per_second
  FROM growth_campaigns c
  JOIN growth_sends s
    ON s.campaign_id = c.id
   AND s.status = 'sent'
   AND s.sent_at > now() - make_interval(secs => %(seconds)s)
 WHERE c.account_id = ANY(%(account_ids)s)
   AND (c.finished_at IS NULL OR c.finished_at > now() - make_interval(secs => %(seconds)s))
 GROUP BY c.account_id;

-- destination_rate --
-- messages a second delivered to a destination lately by every worker (over the last
-- %(seconds)s seconds, or since its first delivery in them: a provider that throttles in the
-- first second must not look idle): what a throttle judges the receiver's limit by. Only
-- sending campaigns' recent sends are read, through (campaign_id, status, sent_at).
SELECT coalesce(count(*)::float
                / greatest(0.5, least(%(seconds)s, extract(epoch FROM now() - min(s.sent_at)))),
                0) AS per_second
  FROM growth_campaigns c
  JOIN growth_sends s
    ON s.campaign_id = c.id
   AND s.status = 'sent'
   AND s.sent_at > now() - make_interval(secs => %(seconds)s)
 WHERE c.status = 'sending'
   AND s.destination_id = %(destination_id)s;

-- total_rate --
-- messages a second delivered by every worker lately (as destination_rate): what a
-- transport-wide throttle judges the limit by
SELECT coalesce(count(*)::float
                / greatest(0.5, least(%(seconds)s, extract(epoch FROM now() - min(s.sent_at)))),
                0) AS per_second
  FROM growth_campaigns c
  JOIN growth_sends s
    ON s.campaign_id = c.id
   AND s.status = 'sent'
   AND s.sent_at > now() - make_interval(secs => %(seconds)s)
 WHERE c.status = 'sending';
