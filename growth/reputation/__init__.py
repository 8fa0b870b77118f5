"""A tenant's sending reputation: its bounce and complaint rates, the guard that pauses its
campaigns when they pass the stop thresholds (``guard``), and the admin's view of it (``admin``).
"""
