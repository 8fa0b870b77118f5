-- Reads of growth_sends as a ledger: who got what, per campaign.

-- ledger_placeholder --
SELECT 1;
