DROP FUNCTION live_events_after(text, bigint, bigint, bigint, integer);
