ALTER TABLE work_units ALTER COLUMN id SET DEFAULT gen_random_uuid();
ALTER TABLE work_unit_attempts ALTER COLUMN id SET DEFAULT gen_random_uuid();
ALTER TABLE work_unit_events ALTER COLUMN id SET DEFAULT gen_random_uuid();
ALTER TABLE blocking_questions ALTER COLUMN id SET DEFAULT gen_random_uuid();
DROP FUNCTION ledger_new_id();
