-- Privileges that a dump does not carry, applied by every `migrate` (and so
-- by `serve`, and after `restore`) rather than once by a migration, after the
-- REVOKE TEMPORARY of DATABASE_PRIVILEGES (migration/src/lib.rs): a
-- database's own privileges are neither in a dump nor copied by
-- CREATE DATABASE ... TEMPLATE, and a restore without owners leaves the
-- reader warden's function to the restoring login.

-- CONNECT on the ledger's database is not granted to PUBLIC (SPEC §8): only
-- the roles that work with it connect. Only the database's owner (or a
-- superuser) may change it; anyone else gets a warning saying what to ask for.
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I, work_ledger_app, work_ledger_reader',
                   current_database(), current_user);
    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot revoke CONNECT on database % from PUBLIC: ask its owner to run REVOKE CONNECT ON DATABASE % FROM PUBLIC',
        current_database(), current_database();
END
$$;

-- The reader warden's function runs as work_ledger_warden (migration 0013).
DO $$
BEGIN
    BEGIN
        EXECUTE format('GRANT work_ledger_warden TO %I', current_user);
    EXCEPTION WHEN OTHERS THEN
        NULL; -- already a member, or a superuser that needs no grant
    END;
    ALTER FUNCTION end_overlong_reader_sessions(interval) OWNER TO work_ledger_warden;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot make work_ledger_warden the owner of end_overlong_reader_sessions: ask a superuser to run ALTER FUNCTION end_overlong_reader_sessions(interval) OWNER TO work_ledger_warden';
END
$$;
