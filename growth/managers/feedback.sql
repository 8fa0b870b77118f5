-- ESP feedback (anymail's tracking webhooks): which tenant, campaign and send an event is about,
-- and the event itself, recorded once.

-- send_by_job --
-- through the unique (subscriber, campaign) index (growth.job_ids parses the job id)
SELECT id AS send_id, account_id, campaign_id, email_lower, status
  FROM growth_sends
 WHERE campaign_id = %(campaign_id)s AND subscriber_id = %(subscriber_id)s;

-- send_by_provider_id --
-- Two rows with one provider id would be the provider's mistake: the caller takes only one.
SELECT id AS send_id, account_id, campaign_id, email_lower, status
  FROM growth_sends
 WHERE provider_message_id = %(message_id)s AND provider_message_id <> ''
 LIMIT 2;

-- record --
-- Returns the new row's id, or nothing when the ESP already told us (a webhook posted again):
-- only the call that inserted the row may act on the event.
INSERT INTO growth_feedback_events (esp, event_id, event_type, reject_reason, email_lower,
                                    account_id, campaign_id, send_id, unattributed_because,
                                    suppressed, description, mta_response, occurred_at)
VALUES (%(esp)s, %(event_id)s, %(event_type)s, %(reject_reason)s, %(email_lower)s,
        %(account_id)s, %(campaign_id)s, %(send_id)s, %(unattributed_because)s,
        %(suppressed)s, %(description)s, %(mta_response)s, %(occurred_at)s)
ON CONFLICT (esp, event_id, email_lower) DO NOTHING
RETURNING id;

-- use_token --
-- A webhook signature's one-time token: first_use, or the body it was first used with (NULL
-- while a concurrent first use is not committed yet). Mailgun's documentation: a token already
-- used means a replayed signature.
WITH inserted AS (
    INSERT INTO growth_webhook_tokens (esp, token, body_sha256)
    VALUES (%(esp)s, %(token)s, %(body_sha256)s)
    ON CONFLICT (esp, token) DO NOTHING
    RETURNING body_sha256
)
SELECT EXISTS (SELECT 1 FROM inserted) AS first_use,
       (SELECT t.body_sha256 FROM growth_webhook_tokens t
         WHERE t.esp = %(esp)s AND t.token = %(token)s) AS first_body_sha256;

-- soft_bounce_lock --
-- Soft bounces add up to a suppression (growth.feedback.events): one count at a time per tenant
-- and address, taken in the transaction that records the new bounce and before it counts, so
-- that a bounce recorded at the same time waits and then sees this one.
SELECT pg_advisory_xact_lock(
    hashtextextended('growth_feedback_events.soft:' || %(account_id)s || ':' || %(email_lower)s, 0));

-- soft_bounces --
-- The tenant's other sends to the address that bounced softly (recorded, suppressing nothing)
-- within the window: a send counts once, however many reports came about it.
SELECT count(DISTINCT send_id) AS sends
  FROM growth_feedback_events
 WHERE account_id = %(account_id)s
   AND email_lower = %(email_lower)s
   AND esp = %(esp)s
   AND event_type = 'bounced'
   AND NOT suppressed
   AND send_id IS NOT NULL
   AND send_id <> %(send_id)s
   AND received_at >= now() - make_interval(days => %(days)s);
