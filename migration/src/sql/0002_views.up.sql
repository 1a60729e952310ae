-- Read views of SPEC §7 for Grafana and the GraphQL view fields, and the
-- per-fleet read-only roles Grafana connects with.
--
-- Every view is security_invoker: it runs with the privileges and row-level
-- security of whoever queries it, so a view can never widen what a fleet sees.

-- No index for queue depth on purpose: an index leading with `fleet` and
-- filtered on open states looked cheap to the planner for the claim's
-- "what does this agent hold" lookup under row-level security (which cannot
-- use enum predicates to pick the live-claim index) and made every claim scan
-- the whole fleet: five times slower at 60,000 units. The view reads
-- work_units_keyset_idx instead.
-- Keyset pages over dispositions and rework.
CREATE INDEX work_units_disposed_idx ON work_units (fleet, created_at, id) WHERE disposition IS NOT NULL;
CREATE INDEX work_units_rework_idx ON work_units (fleet, created_at, id) WHERE attempt_count > 1;

CREATE VIEW v_queue_depth WITH (security_invoker = true) AS
SELECT fleet, domain,
       count(*) FILTER (WHERE state = 'ready')       AS ready,
       count(*) FILTER (WHERE state = 'claimed')     AS claimed,
       count(*) FILTER (WHERE state = 'in_progress') AS in_progress,
       count(*) FILTER (WHERE state = 'blocked')     AS blocked,
       count(*) FILTER (WHERE state = 'verified')    AS verified,
       count(*) FILTER (WHERE state IN ('claimed', 'in_progress') AND lease_expires_at < now()) AS stalled
  FROM work_units
 WHERE state NOT IN ('done', 'abandoned')
 GROUP BY fleet, domain;

-- Claimed or in-progress units whose lease ran out: reclaimable by anyone.
CREATE VIEW v_stall_list WITH (security_invoker = true) AS
SELECT id AS unit_id, fleet, external_ref, domain, state, claimed_by, current_attempt_id,
       last_heartbeat_at, lease_expires_at, now() - lease_expires_at AS stalled_for, created_at
  FROM work_units
 WHERE state IN ('claimed', 'in_progress') AND lease_expires_at < now();

CREATE VIEW v_cost_per_unit WITH (security_invoker = true) AS
SELECT id AS unit_id, fleet, external_ref, domain, state, disposition, cost_cents, attempt_count, created_at
  FROM work_units;

-- Units that needed more than one attempt.
CREATE VIEW v_rework WITH (security_invoker = true) AS
SELECT id AS unit_id, fleet, external_ref, domain, state, disposition, attempt_count, cost_cents, created_at
  FROM work_units
 WHERE attempt_count > 1;

-- Counts and cost per disposition (and domain), for the kill-gate table.
CREATE VIEW v_disposition_summary WITH (security_invoker = true) AS
SELECT fleet, domain, disposition, count(*) AS units, sum(cost_cents)::bigint AS cost_cents
  FROM work_units
 WHERE disposition IS NOT NULL
 GROUP BY fleet, domain, disposition;

-- The row-level drill-down behind the summary: every disposition with its
-- evidence (the last link recorded) and cost.
CREATE VIEW v_disposition_detail WITH (security_invoker = true) AS
SELECT id AS unit_id, fleet, external_ref, domain, disposition,
       evidence_urls[cardinality(evidence_urls)] AS evidence_url, cost_cents, disposed_at
  FROM work_units
 WHERE disposition IS NOT NULL;

GRANT SELECT ON v_queue_depth, v_stall_list, v_cost_per_unit, v_rework, v_disposition_summary, v_disposition_detail
    TO work_ledger_app;

-- ---------------------------------------------------------------------------
-- Read-only roles for Grafana, one per fleet (`work-ledger reader create`).
-- Each is a LOGIN member of work_ledger_reader whose default setting
-- work_ledger.fleet names its fleet. Because a reader runs arbitrary SQL, it
-- could SET that setting to another fleet; so readers get a policy of their
-- own that pins them to the fleet recorded for their login role, and the
-- setting-based policy applies only to the application role.
-- ---------------------------------------------------------------------------

DO $$
BEGIN
    CREATE ROLE work_ledger_reader NOLOGIN NOSUPERUSER NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- cluster-wide: another database of this cluster made it
END
$$;

CREATE TABLE fleet_readers (
    role_name  name        PRIMARY KEY,
    fleet      text        NOT NULL CHECK (fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The fleet of the reader logged in on this session; NULL for anyone else.
CREATE FUNCTION reader_fleet() RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = public, pg_temp AS $$
    SELECT fleet FROM fleet_readers WHERE role_name = session_user
$$;
REVOKE ALL ON FUNCTION reader_fleet() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION reader_fleet() TO work_ledger_reader;

ALTER POLICY fleet_isolation ON work_units TO work_ledger_app;
ALTER POLICY fleet_isolation ON work_unit_attempts TO work_ledger_app;
ALTER POLICY fleet_isolation ON work_unit_events TO work_ledger_app;
ALTER POLICY fleet_isolation ON blocking_questions TO work_ledger_app;
ALTER POLICY fleet_isolation ON api_tokens TO work_ledger_app;

CREATE POLICY fleet_reader ON work_units FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet());
CREATE POLICY fleet_reader ON work_unit_attempts FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet());
CREATE POLICY fleet_reader ON work_unit_events FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet());
CREATE POLICY fleet_reader ON blocking_questions FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet());

GRANT USAGE ON SCHEMA public TO work_ledger_reader;
GRANT SELECT ON work_units, work_unit_attempts, work_unit_events, blocking_questions TO work_ledger_reader;
GRANT SELECT ON v_queue_depth, v_stall_list, v_cost_per_unit, v_rework, v_disposition_summary, v_disposition_detail
    TO work_ledger_reader;
