-- Run in the ledger's database when a deployment makes its cluster (the
-- compose file's postgres image, from docker-entrypoint-initdb.d;
-- deploy/ha/formation.sh): the logins the ledger hands out reach no
-- database but the ledger's. The lock table, the connection slots and the
-- notification queue are the cluster's, shared with every write (SPEC §8);
-- `work-ledger migrate` closes the ledger's own database to PUBLIC.
DO $$
DECLARE
    d name;
BEGIN
    FOR d IN SELECT datname FROM pg_database WHERE datallowconn AND datname <> current_database() LOOP
        EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC', d);
    END LOOP;
END
$$;
