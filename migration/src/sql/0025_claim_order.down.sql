CREATE INDEX work_units_pick_idx ON work_units (fleet, created_at, id) WHERE state = 'ready';
CREATE INDEX work_units_pick_domain_idx ON work_units (fleet, domain, created_at, id) WHERE state = 'ready';
DROP INDEX work_units_claimable_idx;
DROP INDEX work_units_claimable_domain_idx;
ALTER INDEX work_units_pick_idx RENAME TO work_units_claimable_idx;
ALTER INDEX work_units_pick_domain_idx RENAME TO work_units_claimable_domain_idx;
