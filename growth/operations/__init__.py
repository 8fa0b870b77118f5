"""Operator decisions: campaign transitions, verdicts on sends left in doubt, previews and test
sends. Each decision is a keyword-only function over a compare-and-set in ``growth.managers``."""
