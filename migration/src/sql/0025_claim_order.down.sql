DROP INDEX work_units_pick_idx;
DROP INDEX work_units_pick_domain_idx;
