-- Tokens and the fleet a session acts for: the token check of every write
-- (authenticate_token), the agents' tokens the roster reads, the fleet
-- settings row-level security compares with, and the notice a revocation
-- sends to every replica.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

CREATE OR REPLACE FUNCTION current_fleet() RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT nullif(current_setting('work_ledger.fleet', true), '')
$$;

-- The fleet of the reader logged in on this session; NULL for anyone else.
CREATE OR REPLACE FUNCTION reader_fleet() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'public', 'pg_temp'
    AS $$
    SELECT fleet FROM fleet_readers WHERE role_name = session_user
$$;
COMMENT ON FUNCTION reader_fleet() IS 'callers: reader';

CREATE OR REPLACE FUNCTION authenticate_token(p_hash bytea) RETURNS TABLE(token_id uuid, fleet text, name text, permissions text[], expires_at timestamp with time zone, expires_in double precision, expired boolean, touch_due boolean)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT t.id, t.fleet, t.name, t.permissions, t.expires_at,
           extract(epoch FROM t.expires_at - now())::double precision,
           coalesce(t.expires_at <= now(), false),
           t.last_used_at IS NULL OR t.last_used_at < now() - interval '60 seconds'
      FROM api_tokens t
     WHERE t.token_hash = p_hash AND t.revoked_at IS NULL
$$;
COMMENT ON FUNCTION authenticate_token(bytea) IS 'callers: app';

-- The token facts of each name of the caller's fleet, for the roster.
-- Reader logins may not read api_tokens at all (it holds the credentials),
-- so this function, owned by the migrating role, is their narrow door: it
-- returns counts and times per name, never an id, a hash or a permission
-- list, and only of the caller's own fleet. Which fleet is that is decided
-- by the login (session_user; SECURITY DEFINER changes current_user, not
-- the login), never by a setting a reader could change:
--   - a reader login (fleet_readers) gets its own fleet, whatever it SETs;
--   - a login of the service (a member of work_ledger_app) gets the fleet
--     of its transaction's setting, as row-level security would give it;
--   - anyone else gets nothing.
CREATE OR REPLACE FUNCTION agent_tokens() RETURNS TABLE(fleet text, name text, tokens bigint, live_tokens bigint, claim_tokens bigint, last_used_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT t.fleet, t.name, count(*),
           count(*) FILTER (WHERE t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())),
           count(*) FILTER (WHERE 'units:claim' = ANY (t.permissions)), max(t.last_used_at)
      FROM public.api_tokens t
     WHERE t.fleet = CASE
               WHEN EXISTS (SELECT 1 FROM public.fleet_readers r WHERE r.role_name = session_user)
                   THEN (SELECT r.fleet FROM public.fleet_readers r WHERE r.role_name = session_user)
               WHEN pg_has_role(session_user, 'work_ledger_app', 'MEMBER') THEN public.current_fleet()
           END
     GROUP BY t.fleet, t.name
$$;
COMMENT ON FUNCTION agent_tokens() IS 'callers: app, reader';

-- A revocation says only that some token was revoked: every server checks
-- the tokens of its open subscriptions against the table.
CREATE OR REPLACE FUNCTION api_tokens_notify_revoked() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
BEGIN
    PERFORM pg_notify('work_ledger_tokens', '');
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER api_tokens_notify_revoked AFTER UPDATE OF revoked_at ON api_tokens FOR EACH ROW WHEN (((old.revoked_at IS NULL) AND (new.revoked_at IS NOT NULL))) EXECUTE FUNCTION api_tokens_notify_revoked();

CREATE OR REPLACE TRIGGER api_tokens_notify_deleted AFTER DELETE ON api_tokens FOR EACH ROW EXECUTE FUNCTION api_tokens_notify_revoked();
