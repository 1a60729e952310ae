-- Back to finding an agent's events among the fleet's.
DROP INDEX work_unit_events_agent_idx;
