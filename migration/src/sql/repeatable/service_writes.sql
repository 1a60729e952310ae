-- The writes of the service itself, across fleets: the stall sweeper's
-- read and report, and the token commands. Each runs as the tables' owner
-- (the migrating login), not as the writer role that owns every function of
-- writes.sql, so row-level security does not scope it to one fleet; each
-- names its callers.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- Signatures this file no longer defines.
DROP FUNCTION IF EXISTS ledger_token_create(text, text, text[], bytea);
DROP FUNCTION IF EXISTS ledger_report_stalls(integer);

-- The sweeper's candidates: the units of every fleet whose CLAIMED or
-- IN_PROGRESS attempt's lease expired with no `stalled` event yet, most
-- overdue first, at most p_limit. A read, once per pass: it walks every
-- expired lease (those reported too), so the pass's reports name their
-- units instead of walking them again.
CREATE OR REPLACE FUNCTION ledger_stalls_due(p_limit integer)
RETURNS TABLE (unit_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT u.id
      FROM work_units u
     WHERE u.state = ANY (ledger_working_states()) AND u.lease_expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                        WHERE e.attempt_id = u.current_attempt_id AND e.event_type = 'stalled')
     ORDER BY u.lease_expires_at, u.id
     LIMIT p_limit;
$$;
COMMENT ON FUNCTION ledger_stalls_due(integer) IS 'callers: app';

-- The sweeper's write: one `stalled` event per unit of p_units whose
-- attempt's lease has expired, for every fleet. Each unit is locked (FOR
-- SHARE SKIP LOCKED) and its state and lease re-checked on the row it
-- locked, so a report can never follow a disposition, a release or a
-- reclaim that commits first; a unit some write holds right now is left
-- for the next pass. Units are locked in the order of claimNext's stale
-- reclaim (lease, id). The partial unique index
-- work_unit_events_one_stall_per_attempt reports each attempt once,
-- across replicas. Returns the events it appended. Like every write, it
-- first sets what its triggers read: whatever the caller set, its events
-- are announced in the transaction and take fresh stream positions.
CREATE OR REPLACE FUNCTION ledger_report_stalls(p_units uuid[])
RETURNS bigint
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT set_config('work_ledger.notify', '', true), set_config('work_ledger.live_batch', '', true),
           set_config('work_ledger.live_tag', '', true);
    WITH expired AS (
         SELECT u.id, u.fleet, u.domain, u.state, u.claimed_by, u.current_attempt_id, u.lease_expires_at,
                u.last_heartbeat_at
           FROM work_units u
          WHERE u.id = ANY (p_units)
            AND u.state = ANY (ledger_working_states()) AND u.lease_expires_at < now()
            -- Not one another replica reported since the pass read it (no
            -- lock taken, no insert tried).
            AND NOT EXISTS (SELECT 1 FROM work_unit_events e
                             WHERE e.attempt_id = u.current_attempt_id AND e.event_type = 'stalled')
          ORDER BY u.lease_expires_at, u.id
          FOR SHARE OF u SKIP LOCKED
     ), reported AS (
         INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
         SELECT fleet, id, current_attempt_id, 'stalled', state, state, claimed_by,
                jsonb_build_object('domain', domain, 'lease_expired_at', lease_expires_at,
                                   'last_heartbeat_at', last_heartbeat_at)
           FROM expired
         ON CONFLICT (attempt_id) WHERE event_type = 'stalled' DO NOTHING
         RETURNING 1
     )
    SELECT count(*) FROM reported;
$$;
COMMENT ON FUNCTION ledger_report_stalls(uuid[]) IS 'callers: app';

-- Tokens: created with their hash (never the secret) and an optional expiry,
-- an instant (p_expires_at) or a lifetime from now by the database's clock
-- (p_expires_in), not both. An expiry that is not after the token's
-- creation breaks api_tokens_expires_after_creation (23514).
CREATE OR REPLACE FUNCTION ledger_token_create(p_fleet text, p_name text, p_permissions text[], p_hash bytea,
                                               p_expires_at timestamptz DEFAULT NULL,
                                               p_expires_in interval DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    created timestamptz := clock_timestamp();
    minted uuid;
BEGIN
    IF p_expires_at IS NOT NULL AND p_expires_in IS NOT NULL THEN
        RAISE EXCEPTION 'a token expires at a time or after a lifetime, not both' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO api_tokens (fleet, name, permissions, token_hash, created_at, expires_at)
    VALUES (p_fleet, p_name, p_permissions, p_hash, created, coalesce(p_expires_at, created + p_expires_in))
    RETURNING id INTO minted;
    RETURN minted;
END
$$;
COMMENT ON FUNCTION ledger_token_create(text,text,text[],bytea,timestamp with time zone,interval) IS 'callers: owner';

CREATE OR REPLACE FUNCTION ledger_token_revoke(p_id uuid)
RETURNS boolean LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    WITH r AS (UPDATE api_tokens SET revoked_at = clock_timestamp() WHERE id = p_id AND revoked_at IS NULL RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM r);
$$;
COMMENT ON FUNCTION ledger_token_revoke(uuid) IS 'callers: owner';

-- `token revoke --unused-for`: every token not yet revoked whose last use
-- (or, never used, its creation) is older than p_unused_for; the rows as
-- they are now revoked. A lifetime that is not positive revokes nothing.
CREATE OR REPLACE FUNCTION ledger_token_revoke_unused(p_unused_for interval)
RETURNS SETOF api_tokens LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    UPDATE api_tokens t SET revoked_at = clock_timestamp()
     WHERE t.revoked_at IS NULL AND p_unused_for > interval '0'
       AND coalesce(t.last_used_at, t.created_at) < clock_timestamp() - p_unused_for
    RETURNING t.*;
$$;
COMMENT ON FUNCTION ledger_token_revoke_unused(interval) IS 'callers: owner';

-- A token's last use, at most one write a minute per token whatever the
-- number of replicas and requests: the service calls this after
-- authenticating a request whose token's last use is older (without
-- waiting for it), and a call within the minute matches no row. The row
-- lock it takes is never one a request waits for: authentication only reads.
-- Nor does it wait itself, holding a connection: a token row another write
-- holds (a revocation committing) is skipped. The answer: true when it
-- wrote, false when no write was due (or the token is gone or revoked),
-- NULL when the row was busy (the service then tries on the next request).
CREATE OR REPLACE FUNCTION ledger_token_touch(p_id uuid)
RETURNS boolean LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    WITH free AS (SELECT t.id, t.revoked_at IS NULL
                               AND (t.last_used_at IS NULL OR t.last_used_at < clock_timestamp() - interval '60 seconds') AS due
                    FROM api_tokens t WHERE t.id = p_id
                     FOR NO KEY UPDATE SKIP LOCKED),
         touched AS (UPDATE api_tokens t SET last_used_at = clock_timestamp()
                      WHERE t.id IN (SELECT f.id FROM free f WHERE f.due) RETURNING 1)
    SELECT CASE WHEN EXISTS (SELECT 1 FROM free) THEN EXISTS (SELECT 1 FROM touched)
                WHEN EXISTS (SELECT 1 FROM api_tokens t WHERE t.id = p_id) THEN NULL
                ELSE false END;
$$;
COMMENT ON FUNCTION ledger_token_touch(uuid) IS 'callers: app';
