-- Destinations: which mailbox provider serves each recipient domain (growth.audience.destinations
-- decides; these statements read what is missing and record the answers). growth_mail_domains is
-- a cache shared by every tenant, keyed by the domain exactly as the build reads it from an
-- address: split_part(email_lower, '@', 2).

-- unclassified_domains --
-- The domains of the campaign's tenant's confirmed subscribers that have no classification, or
-- an expired one, the most frequent first: when the per-build limit cuts the list, the domains
-- left for the next build are the ones fewest recipients wait on. Nothing longer than a DNS
-- name can be (253) is returned: no row could hold it, and no mail could be delivered to it.
SELECT d.domain
  FROM (SELECT split_part(s.email_lower, '@', 2) AS domain, count(*) AS subscribers
          FROM growth_campaigns c
          JOIN growth_subscribers s ON s.account_id = c.account_id
         WHERE c.id = %(campaign_id)s
           AND s.status = 'confirmed'
         GROUP BY 1) d
 WHERE d.domain <> ''
   AND length(d.domain) <= 253
   AND NOT EXISTS (SELECT 1
                     FROM growth_mail_domains m
                    WHERE m.domain = d.domain
                      AND m.expires_at > now())
 ORDER BY d.subscribers DESC, d.domain
 LIMIT %(limit)s;

-- record --
-- A batch of classifications in one statement: each destination named is created unless it
-- exists (DO UPDATE, not DO NOTHING, so that RETURNING gives the id of a row another worker
-- committed meanwhile, which this statement's snapshot does not see), then each domain's row is
-- written or replaced. Both inserts go in name/domain order, so two workers recording
-- overlapping batches lock the same rows in the same order and wait instead of deadlocking.
-- The arrays are parallel, one element per domain; domains are distinct (ON CONFLICT DO UPDATE
-- may not touch a row twice).
WITH destination AS (
    INSERT INTO growth_destinations (name)
    SELECT DISTINCT name
      FROM unnest(%(destinations)s::text[]) AS name
     ORDER BY name
    ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name
    RETURNING id, name
)
INSERT INTO growth_mail_domains (domain, destination_id, mx_hosts, source, resolved_at, expires_at)
SELECT r.domain, d.id, r.mx_hosts, r.source, now(), now() + make_interval(secs => r.lifetime)
  FROM unnest(%(domains)s::text[], %(destinations)s::text[], %(mx_hosts)s::text[],
              %(sources)s::text[], %(lifetimes)s::float8[])
           AS r(domain, destination, mx_hosts, source, lifetime)
  JOIN destination d ON d.name = r.destination
 ORDER BY r.domain
ON CONFLICT (domain) DO UPDATE
   SET destination_id = EXCLUDED.destination_id,
       mx_hosts = EXCLUDED.mx_hosts,
       source = EXCLUDED.source,
       resolved_at = EXCLUDED.resolved_at,
       expires_at = EXCLUDED.expires_at
RETURNING domain;

-- unsent_on_domains --
-- What forgetting these domains' cached answers leaves as it is: the rows not yet sent (queued,
-- or on the wire) of the running campaigns (sending or paused) whose address is on one of them,
-- counted by domain, by campaign and by the destination written on the row at its build, which
-- is the one pacing reads (never this cache). Reads every unsent row of the running campaigns:
-- an operator's confirmation page, not a worker's statement.
SELECT split_part(s.email_lower, '@', 2) AS domain, s.campaign_id, d.name AS destination,
       count(*) AS recipients
  FROM growth_sends s
  LEFT JOIN growth_destinations d ON d.id = s.destination_id
 WHERE s.campaign_id IN (SELECT c.id FROM growth_campaigns c WHERE c.status IN ('sending', 'paused'))
   AND s.status IN ('queued', 'sending')
   AND split_part(s.email_lower, '@', 2) = ANY(%(domains)s::text[])
 GROUP BY 1, 2, 3
 ORDER BY 1, 2, 3;
