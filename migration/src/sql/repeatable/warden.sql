-- The reader warden (src/live/warden.rs, SPEC §8): what every replica ends,
-- every few seconds, among the sessions of the logins the ledger hands out
-- (reader logins, `work-ledger reader create`), in any database of the
-- cluster: what they share with every write is the cluster's, so a grant
-- inside the ledger's database alone does not guard it.
--
--   transaction  a transaction open longer than p_max_transaction: one that
--                LISTENs and sits in it pins the notification queue, and a
--                full queue stops every write;
--   locks        more than p_max_locks locks held or awaited: the lock table
--                is shared by the cluster, and a full one stops every write;
--   idle         idle sessions of one login beyond its p_max_idle most
--                recently active: connection slots are the cluster's too.
--
-- The function runs as work_ledger_warden, a NOLOGIN role that is a member
-- of every reader login (`reader create` grants it): that membership is
-- what lets it see a reader's sessions in pg_stat_activity and end them with
-- pg_terminate_backend, and it reaches nobody else's sessions (no
-- pg_signal_backend, no superuser needed). Candidates are chosen first
-- (MATERIALIZED), so that nothing else is ever signalled whatever order the
-- planner would evaluate the conditions in.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.
DROP FUNCTION IF EXISTS ledger_warden_pass(interval, integer, integer);
CREATE FUNCTION ledger_warden_pass(p_max_transaction interval, p_max_locks integer, p_max_idle integer)
RETURNS TABLE (pid integer, role_name name, why text, detail text)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
    WITH readers AS MATERIALIZED (
        SELECT a.pid, a.usename, a.state, a.xact_start, a.state_change, a.datname
          FROM pg_catalog.pg_stat_activity a
          JOIN public.fleet_readers r ON r.role_name = a.usename
         WHERE a.backend_type = 'client backend' AND pg_catalog.pg_has_role(a.usesysid, 'USAGE')
    ), locks AS MATERIALIZED (
        SELECT l.pid, count(*) AS held FROM pg_catalog.pg_locks l
         WHERE l.pid IN (SELECT r.pid FROM readers r)
         GROUP BY l.pid
    ), idle AS MATERIALIZED (
        SELECT r.pid, r.usename, row_number() OVER (PARTITION BY r.usename ORDER BY r.state_change DESC) AS newest
          FROM readers r WHERE r.state = 'idle'
    ), doomed AS MATERIALIZED (
        SELECT DISTINCT ON (d.pid) d.pid, d.usename, d.why, d.detail
          FROM (SELECT r.pid, r.usename, 'transaction' AS why,
                       format('transaction open for %s in database %s', clock_timestamp() - r.xact_start, r.datname) AS detail
                  FROM readers r WHERE r.xact_start < clock_timestamp() - p_max_transaction
                UNION ALL
                SELECT r.pid, r.usename, 'locks', format('%s locks in database %s', l.held, r.datname)
                  FROM readers r JOIN locks l ON l.pid = r.pid WHERE l.held > p_max_locks
                UNION ALL
                SELECT i.pid, i.usename, 'idle', format('idle beyond the %s most recent sessions of its login', p_max_idle)
                  FROM idle i WHERE i.newest > p_max_idle) d
         ORDER BY d.pid, d.why DESC
    )
    SELECT d.pid, d.usename, d.why, d.detail FROM doomed d WHERE pg_catalog.pg_terminate_backend(d.pid)
$$;
COMMENT ON FUNCTION ledger_warden_pass(interval,integer,integer) IS 'callers: app';

-- A login the ledger hands out, admitted to this database (and to no other:
-- CONNECT goes to the login, not to the readers' group, which another
-- ledger of the cluster shares) with its limits: at most 4 connections (the
-- warden ends its idle ones beyond 2) and 256 MB of temporary files per
-- session; connection slots and the disk are the cluster's, shared with
-- every write. `reader create` calls this, and every `migrate` for the
-- logins made before. Only a superuser may limit temporary files; anyone
-- else gets a warning.
CREATE OR REPLACE FUNCTION ledger_admit_reader(p_role name) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), p_role);
    EXECUTE format('ALTER ROLE %I CONNECTION LIMIT 4', p_role);
    BEGIN
        EXECUTE format('ALTER ROLE %I SET temp_file_limit = %L', p_role, '256MB');
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'cannot limit the temporary files of reader login % (only a superuser may)', p_role;
    END;
END
$$;
COMMENT ON FUNCTION ledger_admit_reader(name) IS 'callers: owner';
