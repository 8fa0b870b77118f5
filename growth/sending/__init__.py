"""Sending: the worker loop, the messages it renders, and the transports that carry them.

Layer 1 of the design (the deterministic job id) travels through here as each message's
Message-ID and Idempotency-Key; layers 2 to 4 are SQL in ``growth.managers``, which the worker
calls and never bypasses.
"""
