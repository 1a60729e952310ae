-- Who may call and read what, by one rule, applied by every `migrate` after
-- the repeatable files (so a function added anywhere gets its grants):
--
-- * PUBLIC executes no function of the ledger's schema, now or later.
-- * A function that runs as its caller (SECURITY INVOKER) can do only what
--   its caller may: every ledger role may call it, but for the writes'
--   helpers (owned by work_ledger_writer), which only the writes call, and
--   for one that names fewer callers in its comment (the feeds' reads and
--   the range reads are the service's alone).
-- * A trigger's function is called by its trigger alone.
-- * A function that runs as its owner (SECURITY DEFINER) is a door: the
--   writes (owned by work_ledger_writer) open to the service's role; any
--   other door names its callers on itself, as its comment:
--   `callers: app, reader` (roles without their `work_ledger_` prefix;
--   `owner` for the migrating login alone). A door that names none stops
--   the migration.
-- * Tables: every table under row-level security, and every view that
--   reads as its caller, is readable by the service's role and the
--   readers (each sees its own fleet's rows); the writer role writes the
--   ledger's four tables (the event log append-only). The few tables
--   outside that rule are listed last.
--
-- Who owns what is settled before this file: the migrator hands
-- work_ledger_writer every function writes.sql and temporal.sql define, by
-- the files' own CREATE FUNCTION statements (`WRITER_FILES`,
-- migration/src/lib.rs); the reader warden's pass belongs to the warden's
-- role (database_privileges.sql); every other function to the migrating
-- login.

ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;

DO $$
DECLARE
    f record;
    roles text[] := ARRAY['app', 'reader', 'writer', 'warden'];
    callers text[];
    r text;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure AS signature, p.prosecdef AS door,
               p.prorettype = 'trigger'::regtype AS trigger, pg_get_userbyid(p.proowner) AS owner,
               substring(obj_description(p.oid, 'pg_proc') FROM '^callers: ([a-z, ]+)$') AS declared
          FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f.signature);
        FOREACH r IN ARRAY roles LOOP
            IF 'work_ledger_' || r <> f.owner THEN
                EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %I', f.signature, 'work_ledger_' || r);
            END IF;
        END LOOP;
        callers := CASE
            WHEN f.declared IS NOT NULL THEN string_to_array(replace(f.declared, ' ', ''), ',')
            WHEN f.trigger THEN '{}'
            WHEN f.door AND f.owner = 'work_ledger_writer' THEN '{app}'
            WHEN f.door THEN NULL
            WHEN f.owner = 'work_ledger_writer' THEN '{}'
            ELSE roles END;
        IF callers IS NULL THEN
            RAISE EXCEPTION 'function % runs as its owner and names no callers: say them in its comment (''callers: app'')',
                f.signature;
        END IF;
        FOREACH r IN ARRAY callers LOOP
            IF r = 'owner' THEN
                CONTINUE;
            ELSIF NOT r = ANY (roles) THEN
                RAISE EXCEPTION 'function % names an unknown caller %', f.signature, r;
            END IF;
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.signature, 'work_ledger_' || r);
        END LOOP;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA public TO work_ledger_app, work_ledger_reader, work_ledger_writer, work_ledger_warden;

DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT c.oid::regclass FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace
           AND ((c.relkind = 'r' AND c.relrowsecurity AND c.relname <> 'api_tokens')
                OR (c.relkind = 'v' AND 'security_invoker=true' = ANY (c.reloptions)))
    LOOP
        EXECUTE format('GRANT SELECT ON %s TO work_ledger_app, work_ledger_reader', t);
    END LOOP;
END
$$;
GRANT SELECT, INSERT, UPDATE ON work_units, work_unit_attempts, blocking_questions TO work_ledger_writer;
GRANT SELECT, INSERT ON work_unit_events TO work_ledger_writer;
GRANT SELECT, INSERT, UPDATE ON temporal_runs TO work_ledger_writer;
GRANT SELECT, USAGE ON SEQUENCE work_unit_events_batch_seq TO work_ledger_writer;

-- Outside the rule: the tokens (the service authenticates, the writer's
-- functions check; no reader sees a token's hash), where each projection
-- stands, the in-flight writers the watermark reads, the readers' logins
-- (the warden's list), the batch sequence the watermark reads.
GRANT SELECT ON api_tokens TO work_ledger_app, work_ledger_writer;
GRANT SELECT ON projection_marks TO work_ledger_app, work_ledger_reader;
GRANT SELECT ON live_event_writers TO work_ledger_app;
GRANT SELECT ON fleet_readers TO work_ledger_warden;
GRANT SELECT ON SEQUENCE work_unit_events_batch_seq TO work_ledger_app;
