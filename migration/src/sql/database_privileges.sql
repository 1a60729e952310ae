-- Privileges that a dump does not carry, applied by every `migrate` (and so
-- by `serve`, and after `restore`) rather than once by a migration, after the
-- REVOKE TEMPORARY of DATABASE_PRIVILEGES (migration/src/lib.rs): a
-- database's own privileges are neither in a dump nor copied by
-- CREATE DATABASE ... TEMPLATE, and a restore without owners leaves the
-- reader warden's function to the restoring login.

-- CONNECT on the ledger's database is not granted to PUBLIC (SPEC §8): only
-- the roles that work with it connect: the migrating login, the service's
-- role and this database's own reader logins (ledger_admit_reader, below),
-- not the readers' group, whose members may be another ledger's in the
-- same cluster. Only the database's owner (or a superuser) may change it;
-- anyone else gets a warning saying what to ask for.
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I, work_ledger_app', current_database(), current_user);
    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC, work_ledger_reader', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot revoke CONNECT on database % from PUBLIC: ask its owner to run REVOKE CONNECT ON DATABASE % FROM PUBLIC',
        current_database(), current_database();
END
$$;

-- The reader warden's function runs as work_ledger_warden (warden.sql).
DO $$
BEGIN
    BEGIN
        EXECUTE format('GRANT work_ledger_warden TO %I', current_user);
    EXCEPTION WHEN OTHERS THEN
        NULL; -- already a member, or a superuser that needs no grant
    END;
    ALTER FUNCTION ledger_warden_pass(interval, integer, integer) OWNER TO work_ledger_warden;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot make work_ledger_warden the owner of ledger_warden_pass: ask a superuser to run ALTER FUNCTION ledger_warden_pass(interval, integer, integer) OWNER TO work_ledger_warden';
END
$$;

-- Advisory locks live in the cluster's shared lock table: a login that takes
-- them in a loop fills it ("out of shared memory"), and then every write of
-- every fleet fails. Nobody may take them in the ledger's database but the
-- migrating login (the migrations' lock) and the writer role (the write
-- functions' in-flight markers). Privileges on the
-- catalog's functions are the database's own; only a superuser may change
-- them, anyone else gets a warning (and `work-ledger audit` reports it).
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
              WHERE p.pronamespace = 'pg_catalog'::regnamespace AND p.proname ~ '^pg_(try_)?advisory_' LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, current_user);
    END LOOP;
    GRANT EXECUTE ON FUNCTION pg_try_advisory_xact_lock_shared(bigint), pg_advisory_xact_lock_shared(integer, integer)
        TO work_ledger_writer;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot revoke the advisory lock functions from PUBLIC in database % (only a superuser may): ask one to run work-ledger migrate',
        current_database();
END
$$;

-- Every reader login of this database admitted with its limits
-- (ledger_admit_reader, warden.sql), the logins made before the limits too.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT f.role_name FROM fleet_readers f JOIN pg_roles o ON o.rolname = f.role_name LOOP
        PERFORM ledger_admit_reader(r.role_name);
    END LOOP;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot set the limits of the reader logins (ask a superuser or their owner to run work-ledger migrate)';
END
$$;

-- No JIT compilation in the ledger's database. Its statements are short
-- and run from plans made without their arguments' values (SQL functions,
-- PL/pgSQL's generic plans), whose estimates can pass jit_above_cost for a
-- read that touches a handful of rows: a projection's empty tail at
-- 3,000,000 events spent 27 ms of its 29 compiling, every call. A setting
-- of the database (not carried by a dump either); new sessions take it.
DO $$
BEGIN
    EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot turn JIT off in database %: ask its owner to run ALTER DATABASE % SET jit = off',
        current_database(), current_database();
END
$$;
