-- Tokens that expire and say when they were used (issue 26, SPEC §8).
--
-- expires_at: NULL for a token that never expires. A token cannot expire
-- before it was minted: `token create` refuses a time in the past, and this
-- CHECK refuses it for anyone writing the table by hand.
-- last_used_at: written at most once a minute per token, after a request
-- and never in its way (ledger_token_touch in sql/repeatable/writes.sql);
-- NULL until the token's first request under this migration. IF NOT
-- EXISTS: the roster's migration (0017) adds it too, for a database that
-- ran that one first.
ALTER TABLE api_tokens
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN IF NOT EXISTS last_used_at timestamptz,
    ADD CONSTRAINT api_tokens_expires_after_creation CHECK (expires_at > created_at);

-- The one narrow door through row-level security (migration 0001) now also
-- answers for an expired token, so that its refusal can say when it expired:
-- `expired` is decided here, by the database's clock, like every other time
-- of the ledger; `expires_in` (seconds left) lets a WebSocket close at the
-- expiry without trusting the server's own clock; `touch_due` says the last
-- use was recorded more than a minute ago (or never). A revoked token is
-- still nothing at all.
DROP FUNCTION authenticate_token(bytea);
CREATE FUNCTION authenticate_token(p_hash bytea)
RETURNS TABLE (token_id uuid, fleet text, name text, permissions text[], expires_at timestamptz,
               expires_in double precision, expired boolean, touch_due boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT t.id, t.fleet, t.name, t.permissions, t.expires_at,
           extract(epoch FROM t.expires_at - now())::double precision,
           coalesce(t.expires_at <= now(), false),
           t.last_used_at IS NULL OR t.last_used_at < now() - interval '60 seconds'
      FROM api_tokens t
     WHERE t.token_hash = p_hash AND t.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION authenticate_token(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION authenticate_token(bytea) TO work_ledger_app;
