-- ESP feedback (anymail's tracking webhooks): which tenant, campaign and send an event is about,
-- and the event itself, recorded once.

-- send_by_job --
-- through the unique (subscriber, campaign) index (growth.job_ids parses the job id)
SELECT id AS send_id, account_id, campaign_id, email_lower
  FROM growth_sends
 WHERE campaign_id = %(campaign_id)s AND subscriber_id = %(subscriber_id)s;

-- send_by_provider_id --
-- Two rows with one provider id would be the provider's mistake: the caller takes only one.
SELECT id AS send_id, account_id, campaign_id, email_lower
  FROM growth_sends
 WHERE provider_message_id = %(message_id)s AND provider_message_id <> ''
 LIMIT 2;

-- tenant --
-- The account an event's metadata names; its campaign only if it is that account's, and that
-- campaign's send to the address if there is one.
SELECT a.id AS account_id, c.id AS campaign_id, s.id AS send_id
  FROM growth_accounts a
  LEFT JOIN growth_campaigns c ON c.id = %(campaign_id)s AND c.account_id = a.id
  LEFT JOIN growth_sends s ON s.campaign_id = c.id AND s.email_lower = %(email_lower)s
 WHERE a.id = %(account_id)s;

-- record --
-- Returns the new row's id, or nothing when the ESP already told us (a webhook posted again):
-- only the call that inserted the row may act on the event.
INSERT INTO growth_feedback_events (esp, event_id, event_type, reject_reason, email_lower,
                                    account_id, campaign_id, send_id, suppressed, description,
                                    mta_response, occurred_at)
VALUES (%(esp)s, %(event_id)s, %(event_type)s, %(reject_reason)s, %(email_lower)s,
        %(account_id)s, %(campaign_id)s, %(send_id)s, %(suppressed)s, %(description)s,
        %(mta_response)s, %(occurred_at)s)
ON CONFLICT (esp, event_id, email_lower) DO NOTHING
RETURNING id;
