"""The per-recipient ledger as a product: who got what, exported as CSV or JSON Lines."""
