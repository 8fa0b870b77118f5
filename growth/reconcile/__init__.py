"""Settling sends in doubt ('unknown') on evidence of what happened to them.

A row is 'unknown' when its worker died after handing the message to a relay that does not
de-duplicate: nobody knew whether it went out. Evidence can tell: an ESP's tracking event for
the message (``esp``), or what a plain SMTP relay logged about our Message-IDs (``postfix``,
``exim``, ``message_ids``, read by ``service`` for the ``reconcile_unknown`` command). Every
decision is a SendVerdict, written with the status change it records.
"""
