-- throughput reads its whole days by index only (issue 27).
--
-- throughput(bucket: DAY) over a fleet's whole history sums its whole days
-- from disposal_days (one row per day, domain and disposition) and takes its
-- distinct agents from disposal_agent_counts. Their indexes held the keys
-- only, so each row was a heap visit, scattered over the tables (the rows of
-- all fleets interleave as days pass): for the bench fleet's two years,
-- 11,680 + 2,920 rows by bitmap heap scans, 8.0-8.5 ms of the function's
-- time. With the values in the indexes, as disposal_weeks' have had since
-- 0032, the same call took 5.8-6.2 ms. Each index replaces the key-only one
-- (the rows are inserted and folded, never updated, so no HOT update is lost).
CREATE INDEX disposal_days_day_covering_idx ON disposal_days (fleet, day)
    INCLUDE (domain, disposition, units, cost_cents, reworked, verified_units, verified_cost_cents);
DROP INDEX disposal_days_day_idx;
ALTER INDEX disposal_days_day_covering_idx RENAME TO disposal_days_day_idx;

CREATE INDEX disposal_agent_counts_covering_idx ON disposal_agent_counts (fleet, week, domain, start)
    INCLUDE (disposition, agents);
DROP INDEX disposal_agent_counts_idx;
ALTER INDEX disposal_agent_counts_covering_idx RENAME TO disposal_agent_counts_idx;
