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
-- rows each worker holds on the wire, and when the first of its leases ends: its 'sending' rows
-- (a small scan of the send_leased index: only those are in it) and the rows of its live leases
-- (the lease protocol's, whose rows in flight stay 'queued'; send_lease_expiry holds only those)
SELECT worker_id, sum(rows_held)::bigint AS rows_held, min(lease_ends_at) AS lease_ends_at
  FROM (SELECT claimed_by AS worker_id, count(*) AS rows_held,
               min(lease_expires_at) AS lease_ends_at
          FROM growth_sends
         WHERE status = 'sending'
         GROUP BY claimed_by
        UNION ALL
        SELECT worker_id, sum(cardinality(send_ids)), min(expires_at)
          FROM growth_send_leases
         WHERE worker_id IS NOT NULL
         GROUP BY worker_id) held
 GROUP BY worker_id;

-- held_in_campaign --
-- who holds the campaign's rows on the wire (as in held), with each holder's last heartbeat
-- (none: it never beat, or its row was removed); served by (campaign_id, status, sent_at)
SELECT h.worker_id, sum(h.rows_held)::bigint AS rows_held, min(h.lease_ends_at) AS lease_ends_at,
       w.seen_at, w.stopped_at
  FROM (SELECT s.claimed_by AS worker_id, count(*) AS rows_held,
               min(s.lease_expires_at) AS lease_ends_at
          FROM growth_sends s
         WHERE s.campaign_id = %(campaign_id)s AND s.status = 'sending'
         GROUP BY s.claimed_by
        UNION ALL
        SELECT worker_id, sum(cardinality(send_ids)), min(expires_at)
          FROM growth_send_leases
         WHERE campaign_id = %(campaign_id)s AND worker_id IS NOT NULL
         GROUP BY worker_id) h
  LEFT JOIN growth_workers w ON w.worker_id = h.worker_id
 GROUP BY h.worker_id, w.seen_at, w.stopped_at
 ORDER BY h.worker_id;
