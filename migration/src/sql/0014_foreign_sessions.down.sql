DROP FUNCTION live_fleet_signal(text);
CREATE OR REPLACE VIEW live_event_writers AS
    SELECT l.pid, ((l.classid::bigint & 65535) << 32) | l.objid::bigint AS batch_floor
      FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted
       AND l.classid::bigint >> 16 = x'776c'::bigint
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
