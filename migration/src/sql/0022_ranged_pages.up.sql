-- Reads of the ledger after years (issue 27).
--
-- `dispositions(disposed: {from, until})`: the page is now cut from the
-- range's disposals alone (db::reads::dispositions and view_page), which this
-- index gives with their creation time, and only the page's units are read
-- from the table. Before, the view was joined to the table before paging and
-- the planner hashed it against every unit of the fleet (4.7 s alone, 10 s
-- timeouts with 16 readers, at 500,000 units); without the range read first,
-- it walks the fleet's disposals in creation order and filters 360,000 of
-- them by date (385 ms).
DROP INDEX work_units_disposed_at_idx;
CREATE INDEX work_units_disposed_at_idx ON work_units (fleet, disposed_at)
    INCLUDE (disposition, domain, cost_cents, id, created_at) WHERE disposition IS NOT NULL;

-- The "Cost per unit (top 100)" panel (`v_cost_per_unit ORDER BY cost_cents
-- DESC LIMIT 100`) sorted every unit of the fleet (4.7 s p99 with 16
-- readers at 500,000 units); it now reads the first 100 entries of this
-- index. It takes the place of work_units_cost_groups_idx, whose readers
-- moved to the unit totals (0018) long ago and whose last users now read
-- the totals (a domain's existence) or the primary key (costSummary by
-- agent of one domain over a range): a write of a unit updates as many
-- indexes as before.
CREATE INDEX work_units_cost_idx ON work_units (fleet, cost_cents DESC, id);
DROP INDEX work_units_cost_groups_idx;

-- The disposed units with their creation time, the order their pages are
-- cut in from the view alone (db::reads::view_page).
CREATE OR REPLACE VIEW v_disposition_detail WITH (security_invoker = true) AS
SELECT id AS unit_id, fleet, external_ref, domain, disposition,
       evidence_urls[cardinality(evidence_urls)] AS evidence_url, cost_cents, disposed_at, created_at
  FROM work_units
 WHERE disposition IS NOT NULL;
