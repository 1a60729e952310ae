DROP FUNCTION IF EXISTS end_overlong_reader_sessions(interval);
DO $$
BEGIN
    REVOKE ALL ON fleet_readers FROM work_ledger_warden;
    REVOKE USAGE ON SCHEMA public FROM work_ledger_warden;
EXCEPTION WHEN undefined_object THEN
    NULL;
END
$$;
