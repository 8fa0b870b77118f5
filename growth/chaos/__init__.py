"""A chaos harness: a real campaign through real ``run_sender`` processes while they are killed,
the database restarts, the mail server misbehaves and recipients opt out; then an audit of what
the receiver got. Run it with ``make chaos`` (``manage.py chaos``); the test suite runs a small one.
"""
