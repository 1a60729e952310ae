DROP FUNCTION IF EXISTS ledger_claim_next(text, text, integer, text);
DROP TRIGGER work_unit_events_notify ON work_unit_events;
CREATE TRIGGER work_unit_events_notify AFTER INSERT ON work_unit_events
    FOR EACH ROW EXECUTE FUNCTION work_unit_events_notify();
