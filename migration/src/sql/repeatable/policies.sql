-- Row-level security: the service's role sees the fleet its token opened
-- (current_fleet), a reader login its own fleet (reader_fleet), and the
-- writer role only the fleet its write authenticated.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

DROP POLICY IF EXISTS fleet_isolation ON agent_cost_days;
CREATE POLICY fleet_isolation ON agent_cost_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON agent_latest;
CREATE POLICY fleet_isolation ON agent_latest FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON agent_totals;
CREATE POLICY fleet_isolation ON agent_totals FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON api_tokens;
CREATE POLICY fleet_isolation ON api_tokens TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet))) WITH CHECK ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON blocking_questions;
CREATE POLICY fleet_isolation ON blocking_questions TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

DROP POLICY IF EXISTS fleet_isolation ON claim_agents;
CREATE POLICY fleet_isolation ON claim_agents FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON claim_days;
CREATE POLICY fleet_isolation ON claim_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON cost_days;
CREATE POLICY fleet_isolation ON cost_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON cycle_weeks;
CREATE POLICY fleet_isolation ON cycle_weeks FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON cycle_weeks_until;
CREATE POLICY fleet_isolation ON cycle_weeks_until FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON disposal_agent_counts;
CREATE POLICY fleet_isolation ON disposal_agent_counts FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON disposal_agents;
CREATE POLICY fleet_isolation ON disposal_agents FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON disposal_days;
CREATE POLICY fleet_isolation ON disposal_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON disposal_fleet_days;
CREATE POLICY fleet_isolation ON disposal_fleet_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON disposal_weeks;
CREATE POLICY fleet_isolation ON disposal_weeks FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON event_days;
CREATE POLICY fleet_isolation ON event_days FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON event_totals;
CREATE POLICY fleet_isolation ON event_totals FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON never_started;
CREATE POLICY fleet_isolation ON never_started FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON unit_totals;
CREATE POLICY fleet_isolation ON unit_totals FOR SELECT TO work_ledger_app USING ((fleet = ( SELECT current_fleet() AS current_fleet)));

DROP POLICY IF EXISTS fleet_isolation ON work_unit_attempts;
CREATE POLICY fleet_isolation ON work_unit_attempts TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

DROP POLICY IF EXISTS fleet_isolation ON work_unit_events;
CREATE POLICY fleet_isolation ON work_unit_events TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

DROP POLICY IF EXISTS fleet_isolation ON temporal_runs;
CREATE POLICY fleet_isolation ON temporal_runs TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

DROP POLICY IF EXISTS fleet_isolation ON work_units;
CREATE POLICY fleet_isolation ON work_units TO work_ledger_app, work_ledger_writer USING ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text))) WITH CHECK ((fleet = NULLIF(current_setting('work_ledger.fleet'::text, true), ''::text)));

DROP POLICY IF EXISTS fleet_reader ON agent_cost_days;
CREATE POLICY fleet_reader ON agent_cost_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON agent_latest;
CREATE POLICY fleet_reader ON agent_latest FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON agent_totals;
CREATE POLICY fleet_reader ON agent_totals FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON blocking_questions;
CREATE POLICY fleet_reader ON blocking_questions FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON claim_agents;
CREATE POLICY fleet_reader ON claim_agents FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON claim_days;
CREATE POLICY fleet_reader ON claim_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON cost_days;
CREATE POLICY fleet_reader ON cost_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON cycle_weeks;
CREATE POLICY fleet_reader ON cycle_weeks FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON cycle_weeks_until;
CREATE POLICY fleet_reader ON cycle_weeks_until FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON disposal_agent_counts;
CREATE POLICY fleet_reader ON disposal_agent_counts FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON disposal_agents;
CREATE POLICY fleet_reader ON disposal_agents FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON disposal_days;
CREATE POLICY fleet_reader ON disposal_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON disposal_fleet_days;
CREATE POLICY fleet_reader ON disposal_fleet_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON disposal_weeks;
CREATE POLICY fleet_reader ON disposal_weeks FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON event_days;
CREATE POLICY fleet_reader ON event_days FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON event_totals;
CREATE POLICY fleet_reader ON event_totals FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON never_started;
CREATE POLICY fleet_reader ON never_started FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON unit_totals;
CREATE POLICY fleet_reader ON unit_totals FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON work_unit_attempts;
CREATE POLICY fleet_reader ON work_unit_attempts FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON work_unit_events;
CREATE POLICY fleet_reader ON work_unit_events FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON temporal_runs;
CREATE POLICY fleet_reader ON temporal_runs FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS fleet_reader ON work_units;
CREATE POLICY fleet_reader ON work_units FOR SELECT TO work_ledger_reader USING ((fleet = ( SELECT reader_fleet() AS reader_fleet)));

DROP POLICY IF EXISTS writer_authenticates ON api_tokens;
CREATE POLICY writer_authenticates ON api_tokens FOR SELECT TO work_ledger_writer USING (true);
