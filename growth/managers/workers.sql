-- Workers' heartbeats: each run_sender says it is alive every few seconds, by the database's clock.

-- beat --
-- the worker is alive now (its first beat creates the row; a restart under the same id reopens it)
INSERT INTO growth_workers (worker_id, hostname, pid, receiver, batch_size, started_at, seen_at)
VALUES (%(worker_id)s, %(hostname)s, %(pid)s, %(receiver)s, %(batch_size)s, now(), now())
ON CONFLICT (worker_id) DO UPDATE
   SET seen_at = now(), stopped_at = NULL, pid = EXCLUDED.pid, hostname = EXCLUDED.hostname,
       receiver = EXCLUDED.receiver, batch_size = EXCLUDED.batch_size,
       started_at = CASE WHEN growth_workers.pid = EXCLUDED.pid AND growth_workers.stopped_at IS NULL
                         THEN growth_workers.started_at ELSE now() END;

-- stopped --
UPDATE growth_workers SET stopped_at = now(), seen_at = now() WHERE worker_id = %(worker_id)s;

-- held --
-- rows each worker holds under a lease, and when the first of those leases ends: a small scan of
-- the send_leased index (only 'sending' rows are in it)
SELECT claimed_by AS worker_id, count(*) AS rows_held, min(lease_expires_at) AS lease_ends_at
  FROM growth_sends
 WHERE status = 'sending'
 GROUP BY claimed_by;

-- held_in_campaign --
-- who holds the campaign's rows on the wire, with each holder's last heartbeat (none: it never
-- beat, or its row was removed); served by (campaign_id, status, sent_at)
SELECT s.claimed_by AS worker_id, count(*) AS rows_held, min(s.lease_expires_at) AS lease_ends_at,
       w.seen_at, w.stopped_at
  FROM growth_sends s
  LEFT JOIN growth_workers w ON w.worker_id = s.claimed_by
 WHERE s.campaign_id = %(campaign_id)s
   AND s.status = 'sending'
 GROUP BY s.claimed_by, w.seen_at, w.stopped_at
 ORDER BY s.claimed_by;
