-- Rate limits: token buckets in the database, so every worker on every host draws from the same
-- ones and a restart forgets nothing. Refills are computed from the database's clock.

-- take --
-- Lock the buckets (in id order: no deadlock between workers), refill them for the time
-- elapsed, and grant the same number of tokens from each: as many as wanted, or as the emptiest
-- holds, but nothing below a full batch (a burst's worth at most) so that workers do not nibble
-- one message at a time. wait: seconds until such a grant would be possible.
WITH locked AS (
    SELECT id, burst, per_second,
           least(burst, tokens + per_second * greatest(0, extract(epoch FROM now() - refilled_at)))
               AS available
      FROM growth_rate_limits
     WHERE id = ANY(%(ids)s)
     ORDER BY id
       FOR UPDATE
), decision AS (
    SELECT CASE WHEN min(floor(available)) >= least(%(want)s, min(floor(burst)))
                THEN least(%(want)s, min(floor(available)))::int
                ELSE 0 END AS granted,
           greatest(0, max((least(%(want)s, floor(burst)) - available) / per_second))::float AS wait
      FROM locked
)
UPDATE growth_rate_limits r
   SET tokens = l.available - d.granted,
       refilled_at = now()
  FROM locked l, decision d
 WHERE r.id = l.id
RETURNING d.granted, d.wait;

-- give_back --
-- tokens granted but not used (the campaign had fewer rows due, some were suppressed)
UPDATE growth_rate_limits
   SET tokens = least(burst, tokens + %(count)s)
 WHERE id = ANY(%(ids)s);

-- transport_limit --
-- the transport-wide bucket from settings, created or re-configured
INSERT INTO growth_rate_limits (transport, per_second, burst)
VALUES (%(transport)s, %(per_second)s, %(burst)s)
ON CONFLICT (transport) WHERE account_id IS NULL
DO UPDATE SET per_second = EXCLUDED.per_second, burst = EXCLUDED.burst
RETURNING id;

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
