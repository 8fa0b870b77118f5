from __future__ import annotations

from collections.abc import Sequence

from growth.sending.transports.base import BaseTransport, Delivery, Outcome


class NullTransport(BaseTransport):
    """Render every message to bytes, send nothing: the engine's own cost, for benchmarks."""

    idempotent = True
    waits_on_a_wire = False

    def send_bulk(self, deliveries: Sequence[Delivery]) -> list[Outcome]:
        outcomes = []
        for delivery in deliveries:
            delivery.message.message().as_bytes()
            outcomes.append(Outcome(delivery.send_id, Outcome.SENT, provider_message_id="null"))
        return outcomes
