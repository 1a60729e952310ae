-- Back to tokens without expiry or last use. The repeatable functions that
-- use the new columns go first, and writes.sql is marked as not applied, so
-- that the next `migrate` (of whichever release) applies its own again,
-- ledger_token_create included.
DROP FUNCTION IF EXISTS ledger_token_touch(uuid);
DROP FUNCTION IF EXISTS ledger_token_revoke_unused(interval);
DROP FUNCTION IF EXISTS ledger_token_create(text, text, text[], bytea, timestamptz, interval);
DELETE FROM schema_repeatable WHERE name = 'writes';

DROP FUNCTION authenticate_token(bytea);
CREATE FUNCTION authenticate_token(p_hash bytea)
RETURNS TABLE (token_id uuid, fleet text, name text, permissions text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $$
    SELECT t.id, t.fleet, t.name, t.permissions FROM api_tokens t
     WHERE t.token_hash = p_hash AND t.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION authenticate_token(bytea) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION authenticate_token(bytea) TO work_ledger_app;

ALTER TABLE api_tokens
    DROP CONSTRAINT api_tokens_expires_after_creation,
    DROP COLUMN last_used_at,
    DROP COLUMN expires_at;
