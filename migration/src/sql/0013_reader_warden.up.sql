-- ---------------------------------------------------------------------------
-- Reader logins cannot hold a transaction past 60 s (SPEC §8), even after
-- changing their own settings: the server's reader warden (src/live/warden.rs)
-- calls end_overlong_reader_sessions every few seconds.
--
-- The function runs as work_ledger_warden, a NOLOGIN role that is a member of
-- every reader login (`reader create` grants it; existing ones below): that
-- membership is what lets it see a reader's transactions in pg_stat_activity
-- and end them with pg_terminate_backend, and it reaches nobody else's
-- sessions (no pg_signal_backend, no superuser needed).
-- ---------------------------------------------------------------------------
DO $$
BEGIN
    CREATE ROLE work_ledger_warden NOLOGIN NOSUPERUSER NOBYPASSRLS INHERIT;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- roles are cluster-wide: another database of this cluster made it
END
$$;
DO $$
BEGIN
    -- Needed to make it the function's owner below.
    EXECUTE format('GRANT work_ledger_warden TO %I', current_user);
EXCEPTION WHEN OTHERS THEN
    NULL; -- already a member, or a superuser that needs no grant
END
$$;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT role_name FROM fleet_readers LOOP
        BEGIN
            EXECUTE format('GRANT %I TO work_ledger_warden', r.role_name);
        EXCEPTION WHEN undefined_object THEN
            NULL; -- the login was dropped by hand
        WHEN insufficient_privilege THEN
            RAISE WARNING 'cannot let the reader warden end sessions of reader login % (ask a superuser to GRANT % TO work_ledger_warden)',
                r.role_name, r.role_name;
        END;
    END LOOP;
END
$$;

GRANT USAGE ON SCHEMA public TO work_ledger_warden;
GRANT SELECT ON fleet_readers TO work_ledger_warden;

-- Ends (pg_terminate_backend) every session of a reader login, in any
-- database of the cluster (the notification queue is cluster-wide), whose
-- transaction has been open longer than p_limit; returns those it ended.
-- Candidates are chosen first (MATERIALIZED), so that nothing else is ever
-- signalled whatever order the planner would evaluate the conditions in.
CREATE FUNCTION end_overlong_reader_sessions(p_limit interval)
RETURNS TABLE (pid integer, role_name name, open_for interval)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH overlong AS MATERIALIZED (
        SELECT a.pid, a.usename, clock_timestamp() - a.xact_start AS open_for
          FROM pg_catalog.pg_stat_activity a
          JOIN public.fleet_readers r ON r.role_name = a.usename
         WHERE a.backend_type = 'client backend'
           AND a.xact_start < clock_timestamp() - p_limit
           AND pg_catalog.pg_has_role(a.usesysid, 'USAGE')
    )
    SELECT o.pid, o.usename, o.open_for FROM overlong o WHERE pg_catalog.pg_terminate_backend(o.pid)
$$;
ALTER FUNCTION end_overlong_reader_sessions(interval) OWNER TO work_ledger_warden;
REVOKE ALL ON FUNCTION end_overlong_reader_sessions(interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION end_overlong_reader_sessions(interval) TO work_ledger_app;
