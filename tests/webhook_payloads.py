"""ESP webhook posts as each ESP documents them, and how each one authenticates.

The payloads follow the examples in each ESP's webhook documentation (the fields anymail's
parsers read are all there), with our metadata where the ESP carries it back: Postmark
``Metadata``, SendGrid custom args merged into the event, Mailgun ``user-variables``, and the
``X-Metadata`` header anymail sets for Resend and Amazon SES.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

from django.test import Client

WEBHOOK_SECRET = "zylior:webhook-secret-for-tests"
MAILGUN_SIGNING_KEY = "key-0123456789abcdef-tests"
RESEND_SIGNING_SECRET = "whsec_" + base64.b64encode(b"resend-signing-secret-for-tests!").decode()

ANYMAIL_SETTINGS = {
    "WEBHOOK_SECRET": WEBHOOK_SECRET,
    "MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_SIGNING_KEY,
    "RESEND_SIGNING_SECRET": RESEND_SIGNING_SECRET,
}


def basic_auth(credentials: str | None = WEBHOOK_SECRET) -> dict[str, str]:
    if credentials is None:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


class ESP:
    """One ESP: its webhook URL, its documented payloads, and how it signs a post."""

    name: str
    url: str

    @classmethod
    def post(cls, client: Client, payload, *, credentials: str | None = WEBHOOK_SECRET):
        return client.post(cls.url, data=json.dumps(payload), content_type="application/json",
                           headers=basic_auth(credentials))

    @classmethod
    def post_raw(cls, client: Client, body: bytes, *, credentials: str | None = WEBHOOK_SECRET):
        return client.post(cls.url, data=body, content_type="application/json",
                           headers=basic_auth(credentials))


class Postmark(ESP):
    name = "Postmark"
    url = "/anymail/postmark/tracking/"

    @staticmethod
    def bounce(address: str, metadata: dict, *, event_id: int = 4323372036854775807,
               kind: str = "HardBounce", type_code: int = 1,
               message_id: str = "883953f4-6105-42a2-a16a-77a8eac79483") -> dict:
        names = {"HardBounce": "Hard bounce", "SoftBounce": "Soft bounce",
                 "Transient": "Message delayed", "BadEmailAddress": "Invalid email address"}
        return {
            "RecordType": "Bounce",
            "MessageStream": "outbound",
            "ID": event_id,
            "Type": kind,
            "TypeCode": type_code,
            "Name": names.get(kind, kind),
            "Tag": "Test",
            "MessageID": message_id,
            "Metadata": metadata,
            "ServerID": 23,
            "Description": "The server was unable to deliver your message (ex: unknown user, "
                           "mailbox not found).",
            "Details": "smtp;550 5.1.1 The email account that you tried to reach does not exist.",
            "Email": address,
            "From": "sender@example.com",
            "BouncedAt": "2019-11-05T16:33:54.9070259Z",
            "DumpAvailable": True,
            "Inactive": kind == "HardBounce",
            "CanActivate": True,
            "Subject": "Test subject",
            "Content": "Return-Path:....",
        }

    @classmethod
    def hard_bounce(cls, address: str, metadata: dict, event_id: str = "1001") -> dict:
        return cls.bounce(address, metadata, event_id=int(event_id))

    @classmethod
    def soft_bounces(cls, address: str, metadata: dict) -> dict[str, dict]:
        return {
            "SoftBounce": cls.bounce(address, metadata, event_id=2001, kind="SoftBounce",
                                     type_code=4096),
            "Transient": cls.bounce(address, metadata, event_id=2002, kind="Transient",
                                    type_code=2),
        }

    @staticmethod
    def complaint(address: str, metadata: dict, event_id: str = "3001") -> dict:
        return {
            "RecordType": "SpamComplaint",
            "MessageStream": "outbound",
            "ID": int(event_id),
            "Type": "SpamComplaint",
            "TypeCode": 512,
            "Name": "Spam complaint",
            "Tag": "Test",
            "MessageID": "00000000-0000-0000-0000-000000000000",
            "Metadata": metadata,
            "ServerID": 1234,
            "Description": "",
            "Details": "Test spam complaint details",
            "Email": address,
            "From": "sender@example.com",
            "BouncedAt": "2019-11-05T16:33:54.9070259Z",
            "DumpAvailable": True,
            "Inactive": True,
            "CanActivate": False,
            "Subject": "Test subject",
            "Content": "<Abuse report dump>",
        }

    @staticmethod
    def subscription_change(address: str, metadata: dict, *, reason: str = "ManualSuppression",
                            suppress: bool = True) -> dict:
        # Postmark gives this record no ID: the event id is derived.
        return {
            "RecordType": "SubscriptionChange",
            "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
            "ServerID": 123456,
            "MessageStream": "outbound",
            "ChangedAt": "2020-02-01T10:53:34.416071Z",
            "Recipient": address,
            "Origin": "Recipient",
            "SuppressSending": suppress,
            "SuppressionReason": reason,
            "Tag": "my-tag",
            "Metadata": metadata,
        }

    @classmethod
    def unsubscribe(cls, address: str, metadata: dict, event_id: str = "") -> dict:
        return cls.subscription_change(address, metadata)


class SendGrid(ESP):
    name = "SendGrid"
    url = "/anymail/sendgrid/tracking/"

    @staticmethod
    def event(address: str, metadata: dict, event: str, event_id: str, **fields) -> list[dict]:
        """A batch of one event (SendGrid posts a JSON array)."""
        return [{
            "email": address,
            "timestamp": 1513299569,
            "smtp-id": "<14c5d75ce93.dfd.64b469@ismtpd-555>",
            "event": event,
            "category": "cat facts",
            "sg_event_id": event_id,
            "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0",
            "anymail_id": "a7c2f6a4-6b39-4a53-9a4b-2bd8f3f4c1de",
            **metadata,
            **fields,
        }]

    @classmethod
    def hard_bounce(cls, address: str, metadata: dict,
                    event_id: str = "6g4ZI7SA-xmRDv57GoPIPw==") -> list[dict]:
        return cls.event(address, metadata, "bounce", event_id, reason="500 unknown recipient",
                         status="5.0.0", type="bounce")

    @classmethod
    def soft_bounces(cls, address: str, metadata: dict) -> dict[str, list[dict]]:
        return {
            "deferred": cls.event(address, metadata, "deferred", "sg-deferred-1",
                                  response="400 try again later", attempt="5"),
            "blocked": cls.event(address, metadata, "bounce", "sg-blocked-1",
                                 reason="550 5.7.1 Service unavailable; client host blocked",
                                 status="5.7.1", type="blocked"),
        }

    @classmethod
    def complaint(cls, address: str, metadata: dict, event_id: str = "sg-spam-1") -> list[dict]:
        return cls.event(address, metadata, "spamreport", event_id)

    @classmethod
    def unsubscribe(cls, address: str, metadata: dict, event_id: str = "sg-unsub-1") -> list[dict]:
        return cls.event(address, metadata, "unsubscribe", event_id)

    @classmethod
    def dropped(cls, address: str, metadata: dict, reason: str, event_id: str) -> list[dict]:
        return cls.event(address, metadata, "dropped", event_id, reason=reason, status="5.0.0")


class Mailgun(ESP):
    name = "Mailgun"
    url = "/anymail/mailgun/tracking/"

    @staticmethod
    def signed(event_data: dict, token: str, key: str = MAILGUN_SIGNING_KEY) -> dict:
        timestamp = "1529006854"
        signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(),
                             hashlib.sha256).hexdigest()
        return {"signature": {"timestamp": timestamp, "token": token, "signature": signature},
                "event-data": event_data}

    @staticmethod
    def event_data(address: str, metadata: dict, event: str, **fields) -> dict:
        return {
            "event": event,
            "id": "G9Bn5sl1TC6nu79C8C0bwg",
            "timestamp": 1521233195.375624,
            "log-level": "error",
            "envelope": {"sender": "bob@sandbox.mailgun.org", "transport": "smtp",
                         "targets": address},
            "flags": {"is-routed": False, "is-authenticated": True, "is-system-test": False,
                      "is-test-mode": False},
            "message": {"headers": {"to": f"Alice <{address}>",
                                    "message-id": "20130503182626.18666.16540@sandbox.mailgun.org",
                                    "from": "Bob <bob@sandbox.mailgun.org>",
                                    "subject": "Test permanent_fail webhook"},
                        "attachments": [], "size": 111},
            "recipient": address,
            "recipient-domain": address.rpartition("@")[2],
            "campaigns": [],
            "tags": ["my_tag_1", "my_tag_2"],
            "user-variables": metadata,
            **fields,
        }

    @classmethod
    def failed(cls, address: str, metadata: dict, token: str, *, severity: str, reason: str,
               code: int, message: str, description: str = "") -> dict:
        return cls.signed(cls.event_data(address, metadata, "failed", severity=severity,
                                         reason=reason, **{"delivery-status": {
                                             "attempt-no": 1, "message": message, "code": code,
                                             "description": description,
                                             "session-seconds": 0.0}}), token)

    @classmethod
    def hard_bounce(cls, address: str, metadata: dict,
                    event_id: str = "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0") -> dict:
        return cls.failed(address, metadata, event_id, severity="permanent", reason="bounce",
                          code=550, message="5.1.1 The email account that you tried to reach "
                                            "does not exist.")

    @classmethod
    def soft_bounces(cls, address: str, metadata: dict) -> dict[str, dict]:
        return {
            "temporary": cls.failed(address, metadata, "mg-temporary-1", severity="temporary",
                                    reason="generic", code=452,
                                    message="4.2.2 The email account that you tried to reach is "
                                            "over quota."),
        }

    @classmethod
    def complaint(cls, address: str, metadata: dict, event_id: str = "mg-complained-1") -> dict:
        return cls.signed(cls.event_data(address, metadata, "complained"), event_id)

    @classmethod
    def unsubscribe(cls, address: str, metadata: dict, event_id: str = "mg-unsub-1") -> dict:
        return cls.signed(cls.event_data(address, metadata, "unsubscribed", **{
            "client-info": {"client-type": "browser", "client-os": "OS X",
                            "device-type": "desktop", "client-name": "Chrome",
                            "user-agent": "Mozilla/5.0"}}), event_id)


class Resend(ESP):
    name = "Resend"
    url = "/anymail/resend/tracking/"

    @staticmethod
    def event(address: str, metadata: dict, event_type: str, **data) -> dict:
        return {
            "type": event_type,
            "created_at": "2024-11-22T23:41:12.126Z",
            "data": {
                "broadcast_id": "8b146471-e88e-4322-86af-016cd36fd216",
                "created_at": "2024-11-22T23:41:11.894719+00:00",
                "email_id": "56761188-7520-42d8-8898-ff6fc54ce618",
                "from": "Acme <onboarding@resend.dev>",
                "to": [address],
                "subject": "Sending this example",
                "headers": [{"name": "X-Metadata", "value": json.dumps(metadata)}],
                "tags": {"category": "confirm_email"},
                **data,
            },
        }

    @classmethod
    def bounced(cls, address: str, metadata: dict, *, type_: str, sub_type: str,
                message: str) -> dict:
        bounce = {"message": message, "subType": sub_type, "type": type_}
        return cls.event(address, metadata, "email.bounced", bounce=bounce)

    @classmethod
    def hard_bounce(cls, address: str, metadata: dict) -> dict:
        return cls.bounced(address, metadata, type_="Permanent", sub_type="General",
                           message="The recipient's email provider sent a hard bounce message, "
                                   "but didn't specify the reason for the hard bounce.")

    @classmethod
    def soft_bounces(cls, address: str, metadata: dict) -> dict[str, dict]:
        return {
            "delivery_delayed": cls.event(address, metadata, "email.delivery_delayed"),
            "Transient": cls.bounced(address, metadata, type_="Transient",
                                     sub_type="MailboxFull",
                                     message="The recipient's email provider sent a bounce "
                                             "message because the recipient's inbox was full."),
        }

    @classmethod
    def complaint(cls, address: str, metadata: dict) -> dict:
        return cls.event(address, metadata, "email.complained")

    unsubscribe = None  # Resend reports no opt-outs

    @classmethod
    def post(cls, client: Client, payload, *, credentials: str | None = WEBHOOK_SECRET,
             secret: str = RESEND_SIGNING_SECRET):
        return cls.post_raw(client, json.dumps(payload).encode(), credentials=credentials,
                            secret=secret)

    @classmethod
    def post_raw(cls, client: Client, body: bytes, *, credentials: str | None = WEBHOOK_SECRET,
                 secret: str = RESEND_SIGNING_SECRET):
        # svix keeps an event's id across its retries: here, the same body, the same id
        svix_id = "msg_" + hashlib.sha256(body).hexdigest()[:27]
        timestamp = str(int(time.time()))
        key = base64.b64decode(secret.removeprefix("whsec_"))
        signed = f"{svix_id}.{timestamp}.".encode() + body
        signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        headers = {"svix-id": svix_id, "svix-timestamp": timestamp,
                   "svix-signature": f"v1,{signature}", **basic_auth(credentials)}
        return client.post(cls.url, data=body, content_type="application/json", headers=headers)


class AmazonSES(ESP):
    name = "Amazon SES"
    url = "/anymail/amazon_ses/tracking/"

    @staticmethod
    def notification(ses_event: dict, sns_message_id: str) -> dict:
        """The SNS Notification that carries an SES event to an HTTPS subscription."""
        return {
            "Type": "Notification",
            "MessageId": sns_message_id,
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:ses-events",
            "Subject": "Amazon SES Email Event Notification",
            "Message": json.dumps(ses_event),
            "Timestamp": "2017-08-05T00:41:02.669Z",
            "SignatureVersion": "1",
            "Signature": "EXAMPLEw6JRN...",
            "SigningCertURL": "https://sns.us-east-1.amazonaws.com/"
                              "SimpleNotificationService-EXAMPLE.pem",
            "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe"
                              "&SubscriptionArn=arn:aws:sns:us-east-1:123456789012:ses-events:EX",
        }

    @staticmethod
    def mail(address: str, metadata: dict) -> dict:
        return {
            "timestamp": "2017-08-05T00:40:02.012Z",
            "source": "Sender Name <sender@example.com>",
            "sourceArn": "arn:aws:ses:us-east-1:123456789012:identity/sender@example.com",
            "sendingAccountId": "123456789012",
            "messageId": "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-dd0099a07f8a-000000",
            "destination": [address],
            "headersTruncated": False,
            "headers": [
                {"name": "From", "value": "Sender Name <sender@example.com>"},
                {"name": "To", "value": address},
                {"name": "Subject", "value": "Message sent from Amazon SES"},
                {"name": "MIME-Version", "value": "1.0"},
                {"name": "X-Metadata", "value": json.dumps(metadata)},
            ],
            "commonHeaders": {"from": ["Sender Name <sender@example.com>"], "to": [address],
                              "messageId": "EXAMPLE7c191be45-e9aedb9a-02f9-4d12-a87d-"
                                           "dd0099a07f8a-000000",
                              "subject": "Message sent from Amazon SES"},
            "tags": {"ses:configuration-set": ["ConfigSet"], "ses:source-ip": ["192.0.2.0"],
                     "ses:from-domain": ["example.com"], "ses:caller-identity": ["ses_user"]},
        }

    @classmethod
    def bounce(cls, address: str, metadata: dict, event_id: str, *, bounce_type: str,
               sub_type: str, status: str, diagnostic: str) -> dict:
        return cls.notification({
            "eventType": "Bounce",
            "bounce": {
                "bounceType": bounce_type,
                "bounceSubType": sub_type,
                "bouncedRecipients": [{"emailAddress": address, "action": "failed",
                                       "status": status, "diagnosticCode": diagnostic}],
                "timestamp": "2017-08-05T00:41:02.669Z",
                "feedbackId": "01000157c44f053b-61b59c11-9236-11e6-8f96-7be8aexample-000000",
                "reportingMTA": "dsn; mta.example.com",
            },
            "mail": cls.mail(address, metadata),
        }, event_id)

    @classmethod
    def hard_bounce(cls, address: str, metadata: dict,
                    event_id: str = "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324") -> dict:
        return cls.bounce(address, metadata, event_id, bounce_type="Permanent",
                          sub_type="General", status="5.1.1",
                          diagnostic="smtp; 550 5.1.1 user unknown")

    @classmethod
    def soft_bounces(cls, address: str, metadata: dict) -> dict[str, dict]:
        return {
            "Transient": cls.bounce(address, metadata, "sns-transient-1", bounce_type="Transient",
                                    sub_type="MailboxFull", status="4.2.2",
                                    diagnostic="smtp; 452 4.2.2 mailbox full"),
            "Undetermined": cls.bounce(address, metadata, "sns-undetermined-1",
                                       bounce_type="Undetermined", sub_type="Undetermined",
                                       status="5.0.0", diagnostic=""),
            "DeliveryDelay": cls.notification({
                "eventType": "DeliveryDelay",
                "deliveryDelay": {
                    "timestamp": "2020-06-16T00:15:40.641Z",
                    "delayType": "TransientCommunicationFailure",
                    "expirationTime": "2020-06-16T00:25:40.914Z",
                    "delayedRecipients": [{"emailAddress": address, "status": "4.4.1",
                                           "diagnosticCode": "smtp; 421 4.4.1 Unable to "
                                                             "connect to remote host"}],
                },
                "mail": cls.mail(address, metadata),
            }, "sns-delay-1"),
        }

    @classmethod
    def complaint(cls, address: str, metadata: dict, event_id: str = "sns-complaint-1") -> dict:
        return cls.notification({
            "eventType": "Complaint",
            "complaint": {
                "complainedRecipients": [{"emailAddress": address}],
                "timestamp": "2017-08-05T00:41:02.669Z",
                "feedbackId": "01000157c44f053b-61b59c11-9236-11e6-8f96-7be8aexample-000000",
                "userAgent": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36",
                "complaintFeedbackType": "abuse",
                "arrivalDate": "2017-08-05T00:41:02.669Z",
            },
            "mail": cls.mail(address, metadata),
        }, event_id)

    unsubscribe = None  # SES event publishing has no opt-out event anymail understands

    @classmethod
    def post(cls, client: Client, payload, *, credentials: str | None = WEBHOOK_SECRET):
        return cls.post_raw(client, json.dumps(payload).encode(), credentials=credentials,
                            message_id=payload["MessageId"])

    @classmethod
    def post_raw(cls, client: Client, body: bytes, *, credentials: str | None = WEBHOOK_SECRET,
                 message_id: str = "sns-raw"):
        # SNS posts text/plain and names the message in headers too
        headers = {"x-amz-sns-message-type": "Notification", "x-amz-sns-message-id": message_id,
                   "x-amz-sns-topic-arn": "arn:aws:sns:us-east-1:123456789012:ses-events",
                   **basic_auth(credentials)}
        # generic(): post() would re-encode the body for the charset, and refuse bytes that
        # are not UTF-8, which is one of the things a test posts
        return client.generic("POST", cls.url, body, content_type="text/plain; charset=UTF-8",
                              headers=headers)


ALL = [Postmark, SendGrid, Mailgun, Resend, AmazonSES]
