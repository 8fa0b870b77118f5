"""Email backends for providers that de-duplicate on a key: each is the provider's usual backend
(django-anymail's, or Django's SMTP one) plus the few lines that hand it our job id.

They declare ``idempotent_receiver = True``: with one of them configured, a row whose worker died
mid-send is retried with the same key (the provider absorbs the duplicate) instead of being held
as 'unknown'. ``idempotency_window`` is how long the provider remembers a key: it must be longer
than SENDER_LEASE, since the retry comes about one lease after the first attempt.
"""
