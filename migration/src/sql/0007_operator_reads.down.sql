DROP VIEW IF EXISTS v_claimed_never_transitioned, v_rework_rate_weekly, v_claims_weekly, v_claiming_agents_daily,
    v_cycle_time_weekly, v_verified_throughput_weekly, v_throughput_weekly, v_throughput_daily, v_disposals,
    v_attempt_end;
DROP FUNCTION IF EXISTS throughput(text, timestamptz, timestamptz, text);
DROP INDEX IF EXISTS work_unit_events_cost_idx, work_units_disposed_at_idx;
