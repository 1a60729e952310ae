-- Totals of units that cost the same at any size of the ledger (issue 27).
--
-- queueDepth, costSummary and costTotal without a range, dispositionSummary
-- and the dashboard's counters used to group every unit of the fleet at read
-- time: about 40 ms for 500,000 units alone, and many times that with 16
-- readers on two cores. They now read unit_totals: units and cost per
-- (fleet, domain, state, disposition, reworked), kept exact by the database
-- in the very transaction that changes a unit.
--
-- A write does not update a counter row (every claim of a fleet would queue
-- on the same row until commit). The triggers below append a delta row
-- instead: -1 unit and its cost for the group a unit leaves, +1 for the group
-- it enters. Inserts never wait on each other. ledger_compact_totals()
-- (every sweeper pass) folds the deltas into one row per group in one
-- statement, so a reader's snapshot sees either the deltas or their sum,
-- never both and never neither. The audit (rule unit_totals) reconciles the
-- totals against the units.
CREATE TABLE unit_totals (
    fleet       text        NOT NULL,
    domain      text        NOT NULL,
    state       work_state  NOT NULL,
    disposition disposition,
    reworked    boolean     NOT NULL,
    units       bigint      NOT NULL,
    cost_cents  bigint      NOT NULL
);
-- A few hundred rows after each compaction, a few thousand between two:
-- read whole, no index to maintain on the write path. Vacuumed at a fixed
-- number of dead rows, whatever its size.
ALTER TABLE unit_totals SET (autovacuum_vacuum_threshold = 2000, autovacuum_vacuum_scale_factor = 0,
                             autovacuum_analyze_threshold = 2000, autovacuum_analyze_scale_factor = 0);
ALTER TABLE unit_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY fleet_isolation ON unit_totals FOR SELECT TO work_ledger_app USING (fleet = current_fleet());
CREATE POLICY fleet_reader ON unit_totals FOR SELECT TO work_ledger_reader USING (fleet = reader_fleet());
GRANT SELECT ON unit_totals TO work_ledger_app, work_ledger_reader;

-- New units: one delta per group per statement (a registration of 1,000
-- units appends a handful of rows).
CREATE FUNCTION unit_totals_added() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT a.fleet, a.domain, a.state, a.disposition, a.attempt_count > 1, count(*), sum(a.cost_cents)
      FROM added a GROUP BY 1, 2, 3, 4, 5;
    RETURN NULL;
END
$$;
CREATE TRIGGER work_units_totals_added AFTER INSERT ON work_units
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION unit_totals_added();

-- A unit that changes group or cost: the WHEN clause keeps heartbeats and
-- lease renewals (most updates) out of the function altogether.
CREATE FUNCTION unit_totals_moved() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    VALUES (OLD.fleet, OLD.domain, OLD.state, OLD.disposition, OLD.attempt_count > 1, -1, -OLD.cost_cents),
           (NEW.fleet, NEW.domain, NEW.state, NEW.disposition, NEW.attempt_count > 1, 1, NEW.cost_cents);
    RETURN NULL;
END
$$;
CREATE TRIGGER work_units_totals_moved AFTER UPDATE ON work_units FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.disposition IS DISTINCT FROM NEW.disposition
          OR OLD.cost_cents IS DISTINCT FROM NEW.cost_cents OR OLD.domain IS DISTINCT FROM NEW.domain
          OR OLD.fleet IS DISTINCT FROM NEW.fleet OR (OLD.attempt_count > 1) IS DISTINCT FROM (NEW.attempt_count > 1))
    EXECUTE FUNCTION unit_totals_moved();

-- Folds the deltas into one row per group; returns the rows it folded. One
-- statement: the rows it deletes and the sums it inserts commit together.
-- Two passes at once (two replicas) each fold rows the other did not take.
CREATE FUNCTION ledger_compact_totals() RETURNS bigint LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH gone AS (DELETE FROM unit_totals RETURNING *),
         kept AS (
             INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
             SELECT fleet, domain, state, disposition, reworked, sum(units), sum(cost_cents)
               FROM gone GROUP BY 1, 2, 3, 4, 5
             HAVING sum(units) <> 0 OR sum(cost_cents) <> 0
             RETURNING 1)
    SELECT count(*) FROM gone
$$;
REVOKE ALL ON FUNCTION ledger_compact_totals() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ledger_compact_totals() TO work_ledger_app;

-- Recounts every total from the units (after a bulk load that bypassed the
-- triggers). Writers wait for it: the lock keeps a concurrent delta or
-- compaction from being counted twice. The owner's only.
CREATE FUNCTION ledger_rebuild_totals() RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    LOCK TABLE work_units, unit_totals IN SHARE ROW EXCLUSIVE MODE;
    DELETE FROM unit_totals;
    INSERT INTO unit_totals (fleet, domain, state, disposition, reworked, units, cost_cents)
    SELECT fleet, domain, state, disposition, attempt_count > 1, count(*), sum(cost_cents)
      FROM work_units GROUP BY 1, 2, 3, 4, 5;
END
$$;
REVOKE ALL ON FUNCTION ledger_rebuild_totals() FROM PUBLIC;
SELECT ledger_rebuild_totals();

-- The totals per group, deltas summed; the one source of the views below
-- and of the dashboard's counters.
CREATE VIEW v_unit_totals WITH (security_invoker = true) AS
SELECT fleet, domain, state, disposition, reworked, sum(units)::bigint AS units, sum(cost_cents)::bigint AS cost_cents
  FROM unit_totals
 GROUP BY fleet, domain, state, disposition, reworked
HAVING sum(units) <> 0;

CREATE OR REPLACE VIEW v_cost_groups WITH (security_invoker = true) AS
SELECT fleet, domain, state, disposition, sum(units)::bigint AS units, sum(cost_cents)::bigint AS cost_cents
  FROM v_unit_totals
 GROUP BY fleet, domain, state, disposition;

CREATE OR REPLACE VIEW v_disposition_summary WITH (security_invoker = true) AS
SELECT fleet, domain, disposition, sum(units)::bigint AS units, sum(cost_cents)::bigint AS cost_cents
  FROM v_unit_totals
 WHERE disposition IS NOT NULL
 GROUP BY fleet, domain, disposition;

-- Open work per domain from the totals; stalled (a lease that ran out, a
-- fact of now) from the live-lease index, which holds only live claims.
CREATE OR REPLACE VIEW v_queue_depth WITH (security_invoker = true) AS
SELECT t.fleet, t.domain, t.ready, t.claimed, t.in_progress, t.blocked, t.verified, coalesce(s.stalled, 0) AS stalled
  FROM (SELECT fleet, domain,
               coalesce(sum(units) FILTER (WHERE state = 'ready'), 0)::bigint       AS ready,
               coalesce(sum(units) FILTER (WHERE state = 'claimed'), 0)::bigint     AS claimed,
               coalesce(sum(units) FILTER (WHERE state = 'in_progress'), 0)::bigint AS in_progress,
               coalesce(sum(units) FILTER (WHERE state = 'blocked'), 0)::bigint     AS blocked,
               coalesce(sum(units) FILTER (WHERE state = 'verified'), 0)::bigint    AS verified
          FROM v_unit_totals
         WHERE state NOT IN ('done', 'abandoned')
         GROUP BY fleet, domain) t
  LEFT JOIN (SELECT fleet, domain, count(*) AS stalled
               FROM work_units
              WHERE state IN ('claimed', 'in_progress') AND lease_expires_at < now()
              GROUP BY fleet, domain) s
    ON s.fleet = t.fleet AND s.domain = t.domain;

GRANT SELECT ON v_unit_totals TO work_ledger_app, work_ledger_reader;
