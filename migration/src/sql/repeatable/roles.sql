-- The cluster-wide roles of SPEC §8, made if missing (another database of
-- the cluster may have made them): work_ledger_app, the service's role
-- (reads through row-level security, writes only through the write
-- functions); work_ledger_writer, the owner of the write functions;
-- work_ledger_reader, the group of the per-fleet Grafana logins;
-- work_ledger_warden, the owner of the reader warden's pass. The migrating
-- login is made a member of the roles whose objects it hands over (a
-- superuser needs no membership). Applied before the versioned migrations.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT * FROM (VALUES
            ('work_ledger_app', 'NOLOGIN NOSUPERUSER NOBYPASSRLS', true),
            ('work_ledger_reader', 'NOLOGIN NOSUPERUSER NOBYPASSRLS', false),
            ('work_ledger_writer', 'NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT', true),
            ('work_ledger_warden', 'NOLOGIN NOSUPERUSER NOBYPASSRLS INHERIT', true)) AS v(name, options, member) LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I %s', r.name, r.options);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- cluster-wide: another database of this cluster made it
        END;
        IF r.member THEN
            BEGIN
                EXECUTE format('GRANT %I TO %I', r.name, current_user);
            EXCEPTION WHEN OTHERS THEN
                NULL; -- already a member, or a superuser that needs no grant
            END;
        END IF;
    END LOOP;
END
$$;

-- A transaction of the service's role holds locks and the notification
-- queue while it is open: both are shared with every write. The server sets
-- the same timeouts on its own connections (SET ROLE does not apply role
-- settings); reader logins get theirs from `reader create`.
DO $$
BEGIN
    ALTER ROLE work_ledger_app SET statement_timeout = '30s';
    ALTER ROLE work_ledger_app SET idle_in_transaction_session_timeout = '30s';
EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'cannot set the timeouts of role work_ledger_app (roles are cluster-wide; ask a superuser)';
END
$$;
