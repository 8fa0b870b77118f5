"""`make bench`: the sending engine against its physical ceiling and its peers (ISSUE 5).

Run it as ``python -m bench`` (``--help`` for the options, ``--quick`` for a small run). Every
family of measurements is one module here; ``run`` ties them together and ``report`` prints the
table, writes ``bench/RESULTS.md`` and draws the chart.
"""
