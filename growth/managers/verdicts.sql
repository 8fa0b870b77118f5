-- Verdicts about 'unknown' sends: the status change and its record in one statement.

-- verdicts_placeholder --
SELECT 1;
