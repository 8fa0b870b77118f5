-- Reads for the live monitor of campaigns.

-- monitor_placeholder --
SELECT 1;
