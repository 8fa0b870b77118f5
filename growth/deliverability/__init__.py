"""Is a tenant ready to send? Its From domain's SPF, DKIM and DMARC as the DNS publishes them,
and RFC 8058 one-click unsubscribe at SITE_URL (``readiness.check_account``; the lookups in
``dns_checks``, the DKIM key comparison in ``keys``). Used by ``manage.py check_sender`` and by the
panel on the account's admin page (``growth.reputation.admin``).
"""
