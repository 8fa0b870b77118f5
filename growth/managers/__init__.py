"""Data access for the sending engine: the only code that runs SQL.

Each manager loads its statements from the ``.sql`` file beside it (named blocks, see
``queries.load``) and returns plain rows or small dataclasses; deciding what to do with them is
the worker's and the services' job.
"""
