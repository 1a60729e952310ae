-- Back to the key-only indexes of 0020.
CREATE INDEX disposal_days_day_key_idx ON disposal_days (fleet, day);
DROP INDEX disposal_days_day_idx;
ALTER INDEX disposal_days_day_key_idx RENAME TO disposal_days_day_idx;

CREATE INDEX disposal_agent_counts_key_idx ON disposal_agent_counts (fleet, week, domain, start);
DROP INDEX disposal_agent_counts_idx;
ALTER INDEX disposal_agent_counts_key_idx RENAME TO disposal_agent_counts_idx;
