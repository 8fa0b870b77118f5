"""A fake ESP HTTP API on loopback, speaking just enough of Resend's, Brevo's and Amazon SES's
(v2) send endpoints for django-anymail, and de-duplicating on Resend's and Brevo's idempotency
keys as the real ones do (SES has none). Resend binds a key to the body it first came with: the
same key with another body is refused (409 ``invalid_idempotent_request``)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict


@dataclass
class FakeESP:
    requests: list[Request] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # scripted answers, then 200/201
    # with them, Amazon SES's error codes ("x-amzn-ErrorType"), and their messages
    error_codes: list[tuple[str, str]] = field(default_factory=list)
    # scripted misbehaviour of the next requests, after the message was taken: "stall" (the
    # answer comes after stall_for seconds), "garbled" (a success whose body is not JSON)
    misbehaviour: list[str] = field(default_factory=list)
    stall_for: float = 2.0
    # whole scripted answers (status, JSON body, headers), before anything else: an ESP's own
    answers: list[tuple[int, object, dict]] = field(default_factory=list)
    ids_by_key: dict[str, str] = field(default_factory=dict)
    bodies_by_key: dict[str, str] = field(default_factory=dict)  # Resend's: a digest of the body

    def start(self) -> FakeESP:
        esp = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw)
                except ValueError:  # Mailgun's form
                    body = {}
                esp.requests.append(Request(self.path, dict(self.headers), body))
                if esp.answers:
                    return self._answer(*esp.answers.pop(0))
                status = esp.statuses.pop(0) if esp.statuses else None
                if status and status >= 400:
                    code, text = (esp.error_codes.pop(0) if esp.error_codes
                                  else ("", "scripted failure"))
                    headers = {"Retry-After": "7"} if status == 429 else {}
                    if code:
                        headers["x-amzn-ErrorType"] = f"{code}:"
                    return self._answer(status, {"message": text}, headers)
                key = self.headers.get("Idempotency-Key") or body.get("headers", {}).get(
                    "idempotencyKey")
                if self.path.endswith("/emails") and key:  # Resend
                    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
                    if esp.bodies_by_key.setdefault(key, digest) != digest:
                        return self._answer(409, {
                            "statusCode": 409, "name": "invalid_idempotent_request",
                            "message": "This idempotency key has been used on a request with "
                                       "another body."})
                message_id = esp.ids_by_key.setdefault(key or str(uuid.uuid4()), str(uuid.uuid4()))
                misbehaving = esp.misbehaviour.pop(0) if esp.misbehaviour else None
                if misbehaving == "stall":
                    time.sleep(esp.stall_for)
                if misbehaving == "garbled":
                    return self._answer(200, None, body=b"<html>200 OK</html>")
                if self.path.endswith("smtp/email"):
                    return self._answer(201, {"messageId": f"<{message_id}@smtp-relay.test>"})
                if self.path.endswith("outbound-emails"):  # Amazon SES
                    return self._answer(200, {"MessageId": message_id})
                return self._answer(200, {"id": message_id})

            def _answer(self, status, payload, headers=None, body=None):
                data = body if body is not None else json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_port}/"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
