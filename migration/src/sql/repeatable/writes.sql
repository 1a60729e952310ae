-- Every write of the ledger (SPEC §2, §3), once. The service calls each as
-- one autocommit statement; nothing else may write the ledger's tables
-- (work_ledger_app has no INSERT, UPDATE or DELETE on them).
--
-- A repeatable file: `migrate` applies it again whenever its text changed
-- (CREATE OR REPLACE); the schema itself stays in the versioned migrations.
-- A change of a function's arguments or result must DROP the old signature
-- here first.
--
-- Who acts is the token (SPEC §8): every write of a fleet takes the hash of
-- the caller's bearer token (p_token) and the caller's intent (the unit, the
-- attempt, the disposition, the evidence, the reason), never the fleet, the
-- agent, the permissions or the states it may move from. ledger_begin
-- authenticates the token (unknown, revoked, expired), checks its
-- permission and scopes the call to the token's fleet; the moves come from
-- the state machine's declaration (state_machine.sql). So raw SQL as the
-- service's role acts only as a token it holds, and only as the state
-- machine allows.
--
-- The writes run as work_ledger_writer (SECURITY DEFINER), which owns
-- every function this file defines (`migrate` hands it each one, read from
-- the file's own CREATE FUNCTION statements) and does not own the tables:
-- row-level security applies inside them, scoped to the token's fleet, so
-- another fleet's unit, attempt or question is NOT_FOUND. Names resolve in
-- a pinned path with pg_temp last.
--
-- Every write returns one row (result, unit, info):
--   result  'ok' | 'claimed' | 'reclaimed' | 'renewed' | 'held' | 'replayed'
--           or the refusal's code (UNAUTHENTICATED, FORBIDDEN, INVALID_INPUT,
--           EVIDENCE_REQUIRED, NOT_FOUND, LEASE_LOST, NOT_CLAIM_HOLDER,
--           ILLEGAL_TRANSITION, DISPOSITION_IMMUTABLE, UNIT_ALREADY_CLAIMED,
--           AGENT_BUSY, WORKFLOW_OWNED, QUESTION_NOT_OPEN, IDEMPOTENCY_KEY_REUSED,
--           RETRY)
--   unit    the unit as the call leaves it (NULL when not found)
--   info    what the refusal needs beyond the unit (holder, attempt,
--           argument and rule, ...); for a replay, the first call's outcome
-- so a refusal is explained by the same call that refused it. Every write
-- that changes something appends its event(s) in the same transaction. The
-- service checks every argument before the call, for its messages; the
-- checks here hold for every caller.
--
-- The common arguments: p_token (SHA-256 of the bearer token), p_notify
-- ('after-commit' when the service notifies after its commit, else NULL),
-- and for keyed writes p_key and p_hash (the idempotency key and the
-- request's fingerprint, NULL without a key).
--
-- Lock order, for every write: the unit's row first (its UPDATE, or FOR NO
-- KEY UPDATE), then its attempt, its question, then the events. Two writes
-- on one unit queue on the unit's row and never deadlock.

-- Signatures this file no longer defines: the writes that took the fleet,
-- the agent and the permitted states as arguments.
DROP FUNCTION IF EXISTS ledger_claim(text, text, text, text, text, integer, text, uuid);
DROP FUNCTION IF EXISTS ledger_heartbeat(text, text, text, uuid, integer);
DROP FUNCTION IF EXISTS ledger_transition(text, text, text, text, text, uuid, uuid, text, text);
DROP FUNCTION IF EXISTS ledger_block(text, text, text, text, text, uuid, uuid, text, text);
DROP FUNCTION IF EXISTS ledger_unblock(text, text, text, text, text, uuid, uuid, text, integer, boolean);
DROP FUNCTION IF EXISTS ledger_unblock(text, text, text, text, text, uuid, text, integer);
DROP FUNCTION IF EXISTS ledger_unblock(text, text, text, text, text, uuid, uuid, text, integer);
DROP FUNCTION IF EXISTS ledger_release(text, text, text, text, text, uuid, uuid, text, text);
DROP FUNCTION IF EXISTS ledger_record_cost(text, text, text, text, text, uuid, uuid, bigint, boolean);
DROP FUNCTION IF EXISTS ledger_dispose(text, text, text, text, text, uuid, uuid, text, text, text, text, text[], text[]);
DROP FUNCTION IF EXISTS ledger_register(text, text, text, text[], text[], text[]);
DROP FUNCTION IF EXISTS ledger_begin(text, text);
DROP FUNCTION IF EXISTS ledger_begin(bytea, text, text[], text, text);
DROP FUNCTION IF EXISTS ledger_replay(text, text, text, text);
DROP FUNCTION IF EXISTS ledger_pick(text, text, text);

-- ---------------------------------------------------------------------------
-- Helpers (run inside the write functions; no EXECUTE for anyone else).
--
-- Every helper on a write's path is PL/pgSQL, not a SQL function: with its
-- search_path pinned a SQL function cannot be inlined, and PostgreSQL 15
-- parses and plans its body again on every call, where PL/pgSQL keeps each
-- statement's plan for the session (issue 28: about 100 µs per claim).
-- ---------------------------------------------------------------------------

-- The start of every write of a fleet: who the token is, and whether it may.
--   who       the token's row (its fleet and name are the caller's)
--   refusal   NULL when the write may go on; else the answer's result:
--             UNAUTHENTICATED, FORBIDDEN (no permission of p_permissions),
--             INVALID_INPUT (the key), IDEMPOTENCY_KEY_REUSED, or 'replayed'
--             (a key the agent used before for the same request)
--   info      what the refusal says; for a replay, the first call's outcome
--   replayed  the unit of a replay
-- It scopes the transaction to the token's fleet (row-level security reads
-- it) and says how its events are announced. Every setting a write or its
-- triggers read is set here, before anything reads it, whatever the caller
-- set before the call: the live-delivery caches start empty, so no caller
-- can hand a write's events a stream position of its choosing.
--
-- The idempotency check (SPEC §3): a key the agent used before answers
-- 'replayed' with the unit as it is now when the request is the same, and
-- IDEMPOTENCY_KEY_REUSED when it is not. Two concurrent uses of one new key
-- both pass here; the unique index on (fleet, agent_id, source_event_id)
-- refuses the second's event, and the service runs that call again, which
-- then replays.
--
-- A token of the Temporal projection (units:project) acts as the workflow
-- of the unit p_unit it names: `who.name` comes back as
-- 'workflow:<workflow id>', the holder the unit's attempts and events name
-- (SPEC §12); a unit no workflow models is FORBIDDEN to it.
CREATE OR REPLACE FUNCTION ledger_begin(p_token bytea, p_notify text, p_permissions text[], p_key text, p_hash text,
                                        p_unit uuid DEFAULT NULL,
                                        OUT who api_tokens, OUT refusal text, OUT info jsonb, OUT replayed uuid)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    first work_unit_events;
BEGIN
    SELECT t.* INTO who FROM api_tokens t WHERE t.token_hash = p_token;
    PERFORM set_config('work_ledger.fleet', coalesce(who.fleet, ''), true),
            set_config('work_ledger.notify', coalesce(p_notify, ''), true),
            set_config('work_ledger.live_batch', '', true),
            set_config('work_ledger.live_tag', '', true);
    IF who.id IS NULL OR who.revoked_at IS NOT NULL THEN
        refusal := 'UNAUTHENTICATED';
        info := jsonb_build_object('reason', 'unknown');
    ELSIF who.expires_at <= now() THEN
        refusal := 'UNAUTHENTICATED';
        info := jsonb_build_object('reason', 'expired', 'expired_at', who.expires_at);
    ELSIF NOT (who.permissions && p_permissions) THEN
        refusal := 'FORBIDDEN';
        info := jsonb_build_object('permission', p_permissions[1]);
    ELSIF p_unit IS NOT NULL AND 'units:project' = ANY (who.permissions)
          AND EXISTS (SELECT 1 FROM work_units u WHERE u.id = p_unit AND u.workflow_id IS NULL) THEN
        refusal := 'FORBIDDEN';
        info := jsonb_build_object('permission', p_permissions[1]);
    END IF;
    IF refusal IS NOT NULL THEN
        RETURN;
    ELSIF p_unit IS NOT NULL AND 'units:project' = ANY (who.permissions) THEN
        -- (A unit not in the token's fleet keeps the name: the write then finds no unit.)
        who.name := coalesce((SELECT 'workflow:' || u.workflow_id FROM work_units u WHERE u.id = p_unit), who.name);
    END IF;
    IF p_key IS NOT NULL AND (p_hash IS NULL OR NOT ledger_is_label(p_key)) THEN
        refusal := 'INVALID_INPUT';
        info := jsonb_build_object('argument', 'idempotencyKey',
                                   'rule', 'must be 1 to 256 printable characters with no invisible formatting characters');
    ELSIF p_key IS NOT NULL THEN
        SELECT e.* INTO first FROM work_unit_events e
         WHERE e.fleet = who.fleet AND e.agent_id = who.name AND e.source_event_id = p_key;
        IF first.id IS NULL THEN
            RETURN;
        ELSIF first.request_hash = p_hash THEN
            -- What the first call answered: a claim's outcome from its event.
            refusal := 'replayed';
            replayed := first.unit_id;
            info := jsonb_build_object('outcome', CASE
                WHEN first.event_type = 'claimed' AND first.from_state = ANY (ledger_from('claim')) THEN 'claimed'
                WHEN first.event_type = 'claimed' THEN 'reclaimed'
                WHEN first.event_type = 'heartbeat' THEN 'renewed'
                ELSE 'ok' END);
        ELSE
            refusal := 'IDEMPOTENCY_KEY_REUSED';
            info := jsonb_build_object('key', p_key);
        END IF;
    END IF;
END
$$;

-- The answer row: the result with the unit as it is now.
CREATE OR REPLACE FUNCTION ledger_answer(p_result text, p_unit uuid, p_info jsonb DEFAULT '{}')
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT p_result, (SELECT w FROM work_units w WHERE w.id = p_unit), coalesce(p_info, '{}'::jsonb);
END
$$;

-- An argument that breaks a rule of SPEC §9: INVALID_INPUT naming it.
CREATE OR REPLACE FUNCTION ledger_invalid(p_unit uuid, p_argument text, p_rule text)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY SELECT * FROM ledger_answer('INVALID_INPUT', p_unit,
                                             jsonb_build_object('argument', p_argument, 'rule', p_rule));
END
$$;

-- Appends one event: the event column list, once.
CREATE OR REPLACE FUNCTION ledger_log(p_fleet text, p_unit uuid, p_attempt uuid, p_type event_type, p_from work_state,
                                      p_to work_state, p_agent text, p_detail jsonb, p_key text DEFAULT NULL,
                                      p_hash text DEFAULT NULL, p_cost bigint DEFAULT 0)
RETURNS void LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail,
                                  source_event_id, request_hash, cost_delta_cents)
    VALUES (p_fleet, p_unit, p_attempt, p_type, p_from, p_to, p_agent, coalesce(p_detail, '{}'::jsonb), p_key, p_hash,
            coalesce(p_cost, 0));
END
$$;

-- Why a write on unit p_unit matched nothing, most important first (SPEC
-- §5): not there; disposed (DISPOSITION_IMMUTABLE for a dispose, else
-- ILLEGAL_TRANSITION); the fence p_attempt is not the current attempt
-- (LEASE_LOST); the caller may act on the unit (its holder, or p_any: an
-- operator's write or one that is not holder-only) but not from this state
-- (ILLEGAL_TRANSITION); the caller's own attempt was superseded
-- (LEASE_LOST); someone else holds it (NOT_CLAIM_HOLDER).
CREATE OR REPLACE FUNCTION ledger_refusal(p_agent text, p_unit uuid, p_attempt uuid, p_dispose boolean, p_any boolean)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    w work_units;
    mine work_unit_attempts;
BEGIN
    SELECT * INTO w FROM work_units u WHERE u.id = p_unit;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'unit', 'id', p_unit);
        RETURN;
    END IF;
    IF w.state = ANY (ledger_terminal_states()) THEN
        RETURN QUERY SELECT CASE WHEN p_dispose THEN 'DISPOSITION_IMMUTABLE' ELSE 'ILLEGAL_TRANSITION' END, w, '{}'::jsonb;
        RETURN;
    END IF;
    IF p_attempt IS NOT NULL AND w.current_attempt_id IS DISTINCT FROM p_attempt THEN
        RETURN QUERY SELECT 'LEASE_LOST'::text, w, jsonb_build_object('attempt_id', p_attempt);
        RETURN;
    END IF;
    IF w.claimed_by = p_agent OR p_any THEN
        RETURN QUERY SELECT 'ILLEGAL_TRANSITION'::text, w, '{}'::jsonb;
        RETURN;
    END IF;
    SELECT * INTO mine FROM work_unit_attempts a WHERE a.unit_id = p_unit AND a.agent_id = p_agent
     ORDER BY a.attempt_no DESC LIMIT 1;
    IF FOUND AND mine.outcome = 'superseded' THEN
        RETURN QUERY SELECT 'LEASE_LOST'::text, w, jsonb_build_object('attempt_id', mine.id);
        RETURN;
    END IF;
    RETURN QUERY SELECT 'NOT_CLAIM_HOLDER'::text, w, jsonb_build_object('holder', w.claimed_by);
END
$$;

-- Why a write on attempt p_attempt (heartbeat, recordCost) matched nothing.
CREATE OR REPLACE FUNCTION ledger_attempt_refusal(p_agent text, p_attempt uuid)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    a work_unit_attempts;
    w work_units;
BEGIN
    SELECT * INTO a FROM work_unit_attempts x WHERE x.id = p_attempt;
    IF NOT FOUND THEN
        RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'attempt', 'id', p_attempt);
        RETURN;
    END IF;
    SELECT * INTO w FROM work_units u WHERE u.id = a.unit_id;
    IF a.agent_id <> p_agent THEN
        RETURN QUERY SELECT 'NOT_CLAIM_HOLDER'::text, w, jsonb_build_object('holder', coalesce(w.claimed_by, a.agent_id));
    ELSIF a.outcome = 'superseded' THEN
        RETURN QUERY SELECT 'LEASE_LOST'::text, w, jsonb_build_object('attempt_id', p_attempt);
    ELSE
        RETURN QUERY SELECT 'ILLEGAL_TRANSITION'::text, w, '{}'::jsonb;
    END IF;
END
$$;

-- ---------------------------------------------------------------------------
-- Claims and leases.
-- ---------------------------------------------------------------------------

-- The unit claimNext takes, locked: stale units (a working state whose
-- lease expired) first, longest expired first, then the oldest claimable
-- unit agents may claim (not a workflow's: SPEC §12; the READY indexes
-- leave those out too) by registration time, then external ref (an order
-- only the pick's own READY indexes give, so no planner estimate can send the pick through
-- the fleet's keyset index and over every unit claimed before; migration
-- 0025), optionally of one domain, with FOR NO KEY UPDATE SKIP LOCKED so
-- that 64 agents claim at once without queueing on each other's rows. NO
-- KEY UPDATE is the lock the claim's own UPDATE takes: FOR UPDATE would
-- also conflict with the KEY SHARE lock any insert referencing the unit
-- holds (an event, a stall report), and SKIP LOCKED would pass over a free
-- unit. Rework goes to fresh eyes (SPEC §3): not the unit whose last
-- attempt this agent just ended FAILED, while another is free. NULL when
-- nothing is claimable. The states come from the declaration
-- (ledger_from, folded into each statement's plan as a constant).
--
-- The fleet's picks and a domain's are statements of their own: PL/pgSQL
-- keeps one generic plan per statement for the session, and a plan for
-- "(p_domain IS NULL OR u.domain = p_domain)" could only filter the fleet's
-- READY units by domain instead of reading the domain's index. (Planning
-- them for every call instead cost about 400 µs per claim, issue 28.)
CREATE OR REPLACE FUNCTION ledger_pick(p_fleet text, p_agent text, p_domain text)
RETURNS work_units LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    pick work_units;
BEGIN
    IF p_domain IS NULL THEN
        SELECT * INTO pick FROM work_units u
         WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('reclaim')) AND u.lease_expires_at < now()
         ORDER BY u.lease_expires_at, u.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.workflow_id IS NULL
               AND NOT (u.attempt_count > 0 AND EXISTS (
                       SELECT 1 FROM work_unit_attempts a
                        WHERE a.id = u.current_attempt_id AND a.agent_id = p_agent AND a.outcome = 'failed'))
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.workflow_id IS NULL
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
    ELSE
        SELECT * INTO pick FROM work_units u
         WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('reclaim')) AND u.lease_expires_at < now()
           AND u.domain = p_domain
         ORDER BY u.lease_expires_at, u.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.domain = p_domain
               AND u.workflow_id IS NULL
               AND NOT (u.attempt_count > 0 AND EXISTS (
                       SELECT 1 FROM work_unit_attempts a
                        WHERE a.id = u.current_attempt_id AND a.agent_id = p_agent AND a.outcome = 'failed'))
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
        IF pick.id IS NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = p_fleet AND u.state = ANY (ledger_from('claim')) AND u.domain = p_domain
               AND u.workflow_id IS NULL
             ORDER BY u.created_at, u.external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED;
        END IF;
    END IF;
    RETURN pick;
END
$$;

-- claimNext (p_unit NULL) and claimUnit (p_unit given), with a lease of
-- p_lease seconds (30 to 86400). One statement picks and locks the unit
-- (ledger_pick for claimNext; for claimUnit the named unit, waiting for its
-- lock, re-checked, so a concurrent claimant finds it taken); the claim then
-- supersedes a stale attempt, opens attempt N+1, takes the unit and appends
-- `stale_reclaimed` (when stale) and `claimed`, all in this call's
-- transaction.
--
-- When nothing was claimed: an agent that holds a unit in a working state
-- gets it back with its lease renewed ('renewed', a heartbeat event), one
-- that holds a BLOCKED unit gets it as it is ('held'); claimNext with
-- nothing claimable answers no row; claimUnit says why not.
--
-- A workflow-modelled unit is its workflow's (SPEC §12): claimNext never
-- picks it and claimUnit refuses it (WORKFLOW_OWNED), but for the Temporal
-- projection's token, which claims it for the workflow (ledger_begin) when
-- a run starts, with no lease: Temporal times the run.
CREATE OR REPLACE FUNCTION ledger_claim(p_token bytea, p_notify text, p_key text, p_hash text, p_lease integer,
                                        p_domain text, p_unit uuid)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    v_agent text;
    held work_units;
    pick work_units;
    reclaimed boolean;
    v_attempt uuid;
    v_started timestamptz;
    w work_units;
    v_project boolean;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    v_agent := (b.who).name;
    v_project := 'units:project' = ANY ((b.who).permissions);
    IF v_project AND p_unit IS NULL THEN
        RETURN; -- the projection claims the units of its workflows only
    ELSIF p_lease IS NULL OR p_lease NOT BETWEEN 30 AND 86400 THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'leaseSeconds', 'must be between 30 and 86400');
        RETURN;
    ELSIF p_domain IS NOT NULL AND NOT ledger_is_label(p_domain) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'domain', 'must be 1 to 256 printable characters with no invisible formatting characters');
        RETURN;
    END IF;
    SELECT * INTO held FROM work_units u
     WHERE u.fleet = v_fleet AND u.claimed_by = v_agent AND u.state = ANY (ledger_held_states());
    IF held.id IS NULL THEN
        IF p_unit IS NOT NULL THEN
            SELECT * INTO pick FROM work_units u
             WHERE u.fleet = v_fleet AND u.id = p_unit AND (u.workflow_id IS NULL OR v_project)
               AND (u.state = ANY (ledger_from('claim'))
                    OR (u.state = ANY (ledger_from('reclaim')) AND u.lease_expires_at < now()))
               FOR NO KEY UPDATE;
        ELSE
            pick := ledger_pick(v_fleet, v_agent, p_domain);
        END IF;
    END IF;

    IF pick.id IS NOT NULL THEN
        reclaimed := pick.state = ANY (ledger_from('reclaim'));
        IF reclaimed THEN
            UPDATE work_unit_attempts a SET outcome = 'superseded', ended_at = now() WHERE a.id = pick.current_attempt_id;
        END IF;
        INSERT INTO work_unit_attempts AS a (fleet, unit_id, attempt_no, agent_id)
        VALUES (v_fleet, pick.id, pick.attempt_count + 1, v_agent) RETURNING a.id, a.started_at INTO v_attempt, v_started;
        -- first_claimed_at (0035): attempt 1's start, kept for the cycle times.
        UPDATE work_units u
           SET state = ledger_to(CASE WHEN reclaimed THEN 'reclaim' ELSE 'claim' END, pick.state),
               claimed_by = v_agent, current_attempt_id = v_attempt,
               attempt_count = pick.attempt_count + 1,
               lease_expires_at = CASE WHEN pick.workflow_id IS NULL THEN now() + p_lease * interval '1 second' END,
               last_heartbeat_at = now(), updated_at = clock_timestamp(),
               first_claimed_at = coalesce(u.first_claimed_at, v_started)
         WHERE u.id = pick.id
        RETURNING u.* INTO w;
        IF reclaimed THEN
            PERFORM ledger_log(v_fleet, pick.id, pick.current_attempt_id, 'stale_reclaimed', pick.state, w.state,
                               v_agent, jsonb_build_object('previous_agent', pick.claimed_by,
                                                           'previous_attempt_id', pick.current_attempt_id));
        END IF;
        PERFORM ledger_log(v_fleet, w.id, v_attempt, 'claimed', pick.state, w.state, v_agent,
                           jsonb_build_object('attempt_no', w.attempt_count, 'lease_seconds', p_lease), p_key, p_hash);
        RETURN QUERY SELECT CASE WHEN reclaimed THEN 'reclaimed' ELSE 'claimed' END, w, '{}'::jsonb;
        RETURN;
    END IF;

    IF held.id IS NOT NULL AND (p_unit IS NULL OR p_unit = held.id) THEN
        IF NOT held.state = ANY (ledger_working_states()) THEN
            RETURN QUERY SELECT 'held'::text, held, '{}'::jsonb;
            RETURN;
        END IF;
        UPDATE work_units u
           SET lease_expires_at = CASE WHEN u.workflow_id IS NULL THEN now() + p_lease * interval '1 second' END,
               last_heartbeat_at = now(), updated_at = clock_timestamp()
         WHERE u.id = held.id AND u.claimed_by = v_agent AND u.state = ANY (ledger_working_states())
        RETURNING u.* INTO w;
        IF w.id IS NULL THEN
            -- A reclaim committed while this call waited for the row: the
            -- caller's attempt is gone (LEASE_LOST); anything else, run again.
            IF EXISTS (SELECT 1 FROM work_unit_attempts a WHERE a.id = held.current_attempt_id AND a.outcome = 'superseded') THEN
                RETURN QUERY SELECT * FROM ledger_answer('LEASE_LOST', held.id,
                                                         jsonb_build_object('attempt_id', held.current_attempt_id));
            ELSE
                RETURN QUERY SELECT 'RETRY'::text, NULL::work_units, '{}'::jsonb;
            END IF;
            RETURN;
        END IF;
        PERFORM ledger_log(v_fleet, w.id, w.current_attempt_id, 'heartbeat', w.state, w.state, v_agent,
                           jsonb_build_object('lease_seconds', p_lease,
                                              'via', CASE WHEN p_unit IS NULL THEN 'claimNext' ELSE 'claimUnit' END),
                           p_key, p_hash);
        RETURN QUERY SELECT 'renewed'::text, w, '{}'::jsonb;
        RETURN;
    END IF;

    IF p_unit IS NULL THEN
        RETURN; -- nothing claimable
    END IF;
    -- Why the named unit could not be claimed.
    SELECT * INTO w FROM work_units u WHERE u.id = p_unit;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'unit', 'id', p_unit);
    ELSIF w.workflow_id IS NOT NULL AND NOT v_project AND NOT w.state = ANY (ledger_terminal_states()) THEN
        RETURN QUERY SELECT 'WORKFLOW_OWNED'::text, w, jsonb_build_object('workflow_id', w.workflow_id);
    ELSIF (w.state = ANY (ledger_held_states()) AND w.claimed_by IS NOT NULL
           AND NOT (w.state = ANY (ledger_working_states()) AND w.lease_expires_at < now())) THEN
        RETURN QUERY SELECT 'UNIT_ALREADY_CLAIMED'::text, w, jsonb_build_object('holder', w.claimed_by);
    ELSIF (w.state = ANY (ledger_from('claim')) OR w.state = ANY (ledger_from('reclaim'))) AND held.id IS NOT NULL THEN
        RETURN QUERY SELECT 'AGENT_BUSY'::text, w, jsonb_build_object('held_id', held.id, 'held_ref', held.external_ref);
    ELSIF w.state = ANY (ledger_from('claim')) OR w.state = ANY (ledger_from('reclaim')) THEN
        -- It became claimable after this call's pick: the service runs it again.
        RETURN QUERY SELECT 'RETRY'::text, w, '{}'::jsonb;
    ELSE
        RETURN QUERY SELECT 'ILLEGAL_TRANSITION'::text, w, '{}'::jsonb;
    END IF;
END
$$;

-- heartbeat: extends the lease of the caller's current attempt p_attempt by
-- p_lease seconds (30 to 86400). Allowed after expiry as long as nobody
-- reclaimed the unit; a superseded attempt matches nothing (LEASE_LOST).
CREATE OR REPLACE FUNCTION ledger_heartbeat(p_token bytea, p_notify text, p_attempt uuid, p_lease integer)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    w work_units;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', NULL, NULL);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    IF p_lease IS NULL OR p_lease NOT BETWEEN 30 AND 86400 THEN
        RETURN QUERY SELECT * FROM ledger_invalid(NULL, 'leaseSeconds', 'must be between 30 and 86400');
        RETURN;
    END IF;
    UPDATE work_units u SET lease_expires_at = now() + p_lease * interval '1 second', last_heartbeat_at = now(),
                            updated_at = clock_timestamp()
     WHERE u.fleet = (b.who).fleet AND u.claimed_by = (b.who).name AND u.state = ANY (ledger_working_states())
       AND u.current_attempt_id = p_attempt
    RETURNING u.* INTO w;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_attempt_refusal((b.who).name, p_attempt);
        RETURN;
    END IF;
    PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'heartbeat', w.state, w.state, w.claimed_by,
                       jsonb_build_object('lease_seconds', p_lease, 'via', 'heartbeat'));
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

-- ---------------------------------------------------------------------------
-- The unit's life after the claim. p_attempt, when given, fences the write
-- to that attempt (in the WHERE: a superseded holder's write matches
-- nothing and is LEASE_LOST).
-- ---------------------------------------------------------------------------

-- transition: to IN_PROGRESS (the move `start`), or to VERIFIED with
-- evidence (`verify`: ends the attempt as verified and clears the lease:
-- done work cannot be reclaimed; the holder stays recorded until dispose).
-- Any other target matches no move and is refused.
CREATE OR REPLACE FUNCTION ledger_transition(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid,
                                             p_attempt uuid, p_to text, p_evidence text)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    w work_units;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    IF p_to = 'verified' AND p_evidence IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer('EVIDENCE_REQUIRED', p_unit, jsonb_build_object('action', 'verify'));
        RETURN;
    ELSIF p_evidence IS NOT NULL AND NOT ledger_is_evidence(p_evidence) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'evidenceUrl', 'must be an absolute http(s) URL of at most 2048 characters');
        RETURN;
    END IF;
    IF p_to = 'in_progress' THEN
        UPDATE work_units u SET state = ledger_to('start', u.state), updated_at = clock_timestamp()
         WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('start', '{holder}'))
           AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
        RETURNING u.* INTO w;
        IF w.id IS NOT NULL THEN
            PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'transitioned', (ledger_from('start'))[1], w.state,
                               v_agent, '{}'::jsonb, p_key, p_hash);
        END IF;
    ELSIF p_to = 'verified' THEN
        UPDATE work_units u
           SET state = ledger_to('verify', u.state), lease_expires_at = NULL,
               evidence_urls = array_append(u.evidence_urls, p_evidence), updated_at = clock_timestamp()
         WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('verify', '{holder}'))
           AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
        RETURNING u.* INTO w;
        IF w.id IS NOT NULL THEN
            UPDATE work_unit_attempts a SET outcome = 'verified', evidence_url = p_evidence, ended_at = now()
             WHERE a.id = w.current_attempt_id;
            PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'transitioned', (ledger_from('verify'))[1], w.state,
                               v_agent, jsonb_build_object('evidence_url', p_evidence), p_key, p_hash);
        END IF;
    END IF;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, false, false);
        RETURN;
    END IF;
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

-- block: the holder asks a question (1 to 8000 characters) of
-- p_group's desk and the unit waits for the answer (`block`); the lease is
-- suspended so a blocked unit never stalls.
CREATE OR REPLACE FUNCTION ledger_block(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid,
                                        p_attempt uuid, p_question text, p_group text)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    w work_units;
    v_question uuid;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    IF p_question IS NULL OR NOT ledger_is_question(p_question) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'question', 'must be non-blank, at most 8000 characters, printable apart from line breaks and tabs, with no invisible formatting characters');
        RETURN;
    ELSIF p_group IS NULL OR NOT ledger_is_label(p_group) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'assigneeGroup', 'must be 1 to 256 printable characters with no invisible formatting characters');
        RETURN;
    END IF;
    UPDATE work_units u SET state = ledger_to('block', u.state), lease_expires_at = NULL, updated_at = clock_timestamp()
     WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('block', '{holder}'))
       AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
    RETURNING u.* INTO w;
    IF w.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, false, false);
        RETURN;
    END IF;
    INSERT INTO blocking_questions AS q (fleet, unit_id, attempt_id, question, assignee_group, asked_by)
    VALUES (w.fleet, w.id, w.current_attempt_id, p_question, p_group, v_agent) RETURNING q.id INTO v_question;
    PERFORM ledger_log(w.fleet, w.id, w.current_attempt_id, 'blocked', (ledger_from('block'))[1], w.state, v_agent,
                       jsonb_build_object('question_id', v_question, 'assignee_group', p_group), p_key, p_hash);
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

-- unblock: answers the open question of a BLOCKED unit (`unblock`); back to
-- IN_PROGRESS with a fresh lease of the default 900 seconds when it still
-- has its holder, to READY when the holder released it meanwhile.
-- p_question, when given, must be the unit's open question: an answer meant
-- for a question that was answered, cancelled or replaced meanwhile is
-- QUESTION_NOT_OPEN (naming the open one, if any) and changes nothing. With
-- p_similar, every other open question with the same normalised text in
-- the named question's assignee group is answered too (a desk answers for
-- its own group only, SPEC §7).
CREATE OR REPLACE FUNCTION ledger_unblock(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid,
                                          p_question uuid, p_answer text, p_similar boolean)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    v_agent text;
    locked uuid;
    open_question uuid;
    w work_units;
    o work_units;
    text_norm text;
    v_group text;
    others uuid[];
    also uuid[] := '{}';
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{questions:answer}', p_key, p_hash);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    v_agent := (b.who).name;
    IF p_answer IS NULL OR NOT ledger_is_long_text(p_answer) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'answer', 'must be non-blank, at most 8000 characters, and printable apart from line breaks and tabs');
        RETURN;
    END IF;
    IF p_similar THEN
        -- Every blocked unit waiting on the same text in the same group, the
        -- named one among them, locked in id order: two such answers never
        -- deadlock.
        SELECT q.norm, q.assignee_group INTO text_norm, v_group
          FROM blocking_questions q WHERE q.unit_id = p_unit AND q.status = 'open';
        SELECT array_agg(l.id ORDER BY l.id) INTO others FROM (
            SELECT u.id FROM work_units u JOIN blocking_questions q ON q.unit_id = u.id AND q.status = 'open'
             WHERE u.fleet = v_fleet AND q.fleet = v_fleet AND q.norm = text_norm AND q.assignee_group = v_group
               AND u.state = ANY (ledger_from('unblock'))
             ORDER BY u.id FOR NO KEY UPDATE OF u) l;
    END IF;
    SELECT u.id INTO locked FROM work_units u WHERE u.id = p_unit AND u.state = ANY (ledger_from('unblock', '{answerer}'))
       FOR NO KEY UPDATE;
    -- A new statement after the lock: it sees the question as the last
    -- write on the unit left it.
    SELECT q.id INTO open_question FROM blocking_questions q WHERE q.unit_id = p_unit AND q.status = 'open';
    IF p_question IS NOT NULL AND open_question IS DISTINCT FROM p_question
       AND EXISTS (SELECT 1 FROM work_units u WHERE u.id = p_unit) THEN
        RETURN QUERY SELECT * FROM ledger_answer('QUESTION_NOT_OPEN', p_unit,
                                                 jsonb_build_object('question_id', p_question, 'open_question_id', open_question));
        RETURN;
    END IF;
    IF locked IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, NULL, false, true);
        RETURN;
    END IF;
    -- The named unit, and with p_similar every other blocked unit waiting
    -- on the same text: each back to its holder (or READY when released),
    -- its open question answered, with its own event.
    FOR o IN
        UPDATE work_units u
           SET state = ledger_to('unblock', u.state, NULL, u.claimed_by IS NOT NULL),
               lease_expires_at = CASE WHEN u.claimed_by IS NULL THEN NULL ELSE now() + interval '900 seconds' END,
               updated_at = clock_timestamp()
         WHERE u.state = ANY (ledger_from('unblock'))
           AND (u.id = locked
                OR (u.id = ANY (coalesce(others, '{}'))
                    AND EXISTS (SELECT 1 FROM blocking_questions q
                                 WHERE q.unit_id = u.id AND q.status = 'open' AND q.norm = text_norm
                                   AND q.assignee_group = v_group)))
        RETURNING u.*
    LOOP
        UPDATE blocking_questions q SET status = 'answered', answer = p_answer, answered_by = v_agent, answered_at = now()
         WHERE q.unit_id = o.id AND q.status = 'open'
        RETURNING q.id INTO open_question;
        IF o.id = locked THEN
            w := o;
            PERFORM ledger_log(v_fleet, o.id, o.current_attempt_id, 'unblocked', (ledger_from('unblock'))[1], o.state,
                               v_agent, jsonb_build_object('question_id', open_question), p_key, p_hash);
        ELSE
            PERFORM ledger_log(v_fleet, o.id, o.current_attempt_id, 'unblocked', (ledger_from('unblock'))[1], o.state,
                               v_agent, jsonb_build_object('question_id', open_question, 'answered_with', p_unit),
                               NULL, NULL);
            also := also || o.id;
        END IF;
    END LOOP;
    RETURN QUERY SELECT 'ok'::text, w, jsonb_build_object('also_answered', to_jsonb(also));
END
$$;

-- release: the holder gives the unit up (`release`). From a working state
-- back to READY, ending the attempt as p_outcome ('abandoned', the default,
-- or 'failed'; 'superseded' for a workflow's run that continued as new); on a BLOCKED unit the attempt ends as blocked, the holder is
-- cleared and the unit waits for its answer.
CREATE OR REPLACE FUNCTION ledger_release(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid,
                                          p_attempt uuid, p_outcome text, p_reason text)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    prev work_units;
    w work_units;
    ended attempt_outcome;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    -- A workflow's run continued as new: its attempt is superseded by the next run's.
    IF coalesce(p_outcome, 'abandoned') NOT IN ('abandoned', 'failed')
       AND NOT (p_outcome = 'superseded' AND 'units:project' = ANY ((b.who).permissions)) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'outcome', 'a release ends the attempt as ABANDONED or FAILED');
        RETURN;
    ELSIF p_reason IS NOT NULL AND NOT ledger_is_long_text(p_reason) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'reason', 'must be non-blank, at most 8000 characters, and printable apart from line breaks and tabs');
        RETURN;
    END IF;
    SELECT * INTO prev FROM work_units u
     WHERE u.id = p_unit AND u.claimed_by = v_agent AND u.state = ANY (ledger_from('release', '{holder}'))
       AND (p_attempt IS NULL OR u.current_attempt_id = p_attempt)
       FOR NO KEY UPDATE;
    IF prev.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, false, false);
        RETURN;
    END IF;
    UPDATE work_units u
       SET state = ledger_to('release', prev.state), claimed_by = NULL, lease_expires_at = NULL,
           updated_at = clock_timestamp()
     WHERE u.id = prev.id
    RETURNING u.* INTO w;
    UPDATE work_unit_attempts a
       SET outcome = CASE WHEN w.state = prev.state THEN 'blocked' ELSE coalesce(p_outcome, 'abandoned') END::attempt_outcome,
           ended_at = now()
     WHERE a.id = prev.current_attempt_id
    RETURNING a.outcome INTO ended;
    PERFORM ledger_log(w.fleet, prev.id, prev.current_attempt_id, 'released', prev.state, w.state, v_agent,
                       jsonb_build_object('outcome', ended, 'reason', p_reason), p_key, p_hash);
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

-- recordCost: adds p_cents (0 to 1,000,000,000) to attempt p_attempt, or
-- (p_attempt NULL) to the caller's latest attempt of unit p_unit (for an
-- operator without one: the unit's current attempt). The attempt's agent,
-- or an operator (units:dispose-any), may bill at any time, also after the
-- attempt ended or the unit was disposed. The attempts trigger rolls the
-- cost up to the unit. The unit's row is locked before the attempt's, as
-- every write does.
CREATE OR REPLACE FUNCTION ledger_record_cost(p_token bytea, p_notify text, p_key text, p_hash text,
                                              p_attempt uuid, p_unit uuid, p_cents bigint)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    v_agent text;
    v_operator boolean;
    target uuid := p_attempt;
    w work_units;
    billed work_unit_attempts;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim,units:dispose-any}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    v_agent := (b.who).name;
    v_operator := 'operator' = ANY (ledger_actors((b.who).permissions, false));
    IF p_key IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'idempotencyKey', 'is required: a replayed cost must count once');
        RETURN;
    ELSIF p_cents IS NULL OR p_cents NOT BETWEEN 0 AND 1000000000 THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'cents', 'must be between 0 and 1000000000');
        RETURN;
    ELSIF (p_attempt IS NULL) = (p_unit IS NULL) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'attemptId', 'give exactly one of attemptId and unitId');
        RETURN;
    END IF;
    IF target IS NULL THEN
        target := coalesce(
            (SELECT a.id FROM work_unit_attempts a WHERE a.unit_id = p_unit AND a.agent_id = v_agent
              ORDER BY a.attempt_no DESC LIMIT 1),
            (SELECT u.current_attempt_id FROM work_units u WHERE u.id = p_unit AND v_operator));
        IF target IS NULL THEN
            SELECT * INTO w FROM work_units u WHERE u.id = p_unit;
            IF w.id IS NULL THEN
                RETURN QUERY SELECT 'NOT_FOUND'::text, NULL::work_units, jsonb_build_object('what', 'unit', 'id', p_unit);
            ELSE
                RETURN QUERY SELECT 'NOT_CLAIM_HOLDER'::text, w, jsonb_build_object('holder', w.claimed_by);
            END IF;
            RETURN;
        END IF;
    END IF;
    SELECT * INTO w FROM work_units u
     WHERE u.id = (SELECT a.unit_id FROM work_unit_attempts a WHERE a.id = target)
       FOR NO KEY UPDATE;
    UPDATE work_unit_attempts a SET cost_cents = a.cost_cents + p_cents
     WHERE a.id = target AND (a.agent_id = v_agent OR v_operator) AND w.id IS NOT NULL
    RETURNING a.* INTO billed;
    IF billed.id IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_attempt_refusal(v_agent, target);
        RETURN;
    END IF;
    PERFORM ledger_log(v_fleet, billed.unit_id, billed.id, 'cost_recorded', NULL, NULL, v_agent, '{}'::jsonb,
                       p_key, p_hash, p_cents);
    RETURN QUERY SELECT * FROM ledger_answer('ok', billed.unit_id);
END
$$;

-- dispose: the permanent disposition p_disposition (`dispose`). Who may
-- set it from which state, and the terminal state it leads to, are the
-- declaration's: the holder's moves for the holder, an operator's for a
-- token with units:dispose-any. p_evidence is the link (NULL: keep the
-- verification evidence, for MIGRATED). Ends an open attempt as abandoned
-- and cancels an open question.
CREATE OR REPLACE FUNCTION ledger_dispose(p_token bytea, p_notify text, p_key text, p_hash text, p_unit uuid,
                                          p_attempt uuid, p_disposition text, p_evidence text, p_reason text)
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_agent text;
    v_disposition disposition;
    actors text[];
    prev work_units;
    w work_units;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:claim,units:dispose-any}', p_key, p_hash, p_unit);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_agent := (b.who).name;
    v_disposition := (SELECT d FROM unnest(enum_range(NULL::disposition)) AS d WHERE d::text = p_disposition);
    IF v_disposition IS NULL THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'disposition', 'must be one of MIGRATED, DROPPED, DEFERRED, DEAD');
        RETURN;
    ELSIF p_evidence IS NOT NULL AND NOT ledger_is_evidence(p_evidence) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'evidenceUrl', 'must be an absolute http(s) URL of at most 2048 characters');
        RETURN;
    ELSIF p_reason IS NOT NULL AND NOT ledger_is_long_text(p_reason) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(p_unit, 'reason', 'must be non-blank, at most 8000 characters, and printable apart from line breaks and tabs');
        RETURN;
    END IF;
    SELECT * INTO prev FROM work_units u WHERE u.id = p_unit FOR NO KEY UPDATE;
    actors := ledger_actors((b.who).permissions, prev.claimed_by = v_agent);
    IF prev.id IS NULL OR NOT prev.state = ANY (ledger_from('dispose', actors, v_disposition))
       OR (p_attempt IS NOT NULL AND prev.current_attempt_id IS DISTINCT FROM p_attempt) THEN
        RETURN QUERY SELECT * FROM ledger_refusal(v_agent, p_unit, p_attempt, true, 'operator' = ANY (actors));
        RETURN;
    ELSIF p_evidence IS NULL AND (v_disposition <> 'MIGRATED' OR cardinality(prev.evidence_urls) = 0) THEN
        RETURN QUERY SELECT * FROM ledger_answer('EVIDENCE_REQUIRED', p_unit, jsonb_build_object('action', 'dispose'));
        RETURN;
    END IF;
    UPDATE work_units u
       SET state = ledger_to('dispose', prev.state, v_disposition), disposition = v_disposition, disposed_at = now(),
           lease_expires_at = NULL, updated_at = clock_timestamp(),
           evidence_urls = CASE WHEN p_evidence IS NULL OR p_evidence = ANY(u.evidence_urls) THEN u.evidence_urls
                                ELSE array_append(u.evidence_urls, p_evidence) END
     WHERE u.id = prev.id
    RETURNING u.* INTO w;
    UPDATE work_unit_attempts a SET outcome = 'abandoned', ended_at = now()
     WHERE a.id = prev.current_attempt_id AND a.outcome IS NULL;
    UPDATE blocking_questions q SET status = 'cancelled', cancelled_at = now()
     WHERE q.unit_id = prev.id AND q.status = 'open';
    PERFORM ledger_log(w.fleet, prev.id, prev.current_attempt_id, 'disposed', prev.state, w.state, v_agent,
                       jsonb_build_object('disposition', v_disposition,
                                          'evidence_url', coalesce(p_evidence, w.evidence_urls[cardinality(w.evidence_urls)]),
                                          'reason', p_reason),
                       p_key, p_hash);
    RETURN QUERY SELECT 'ok'::text, w, '{}'::jsonb;
END
$$;

-- registerUnits (and import): 1 to 1000 units; inserts the units that do
-- not exist yet, one `registered` event each, and answers every requested
-- unit in input order. Existing units come back untouched (idempotent by
-- (fleet, external_ref)); ON CONFLICT DO NOTHING waits for a concurrent
-- registration of the same ref and then skips it. p_domains and
-- p_workflows run alongside p_refs (NULL or an empty string: the default
-- domain, no workflow).
CREATE OR REPLACE FUNCTION ledger_register(p_token bytea, p_notify text, p_refs text[], p_domains text[],
                                           p_workflows text[])
RETURNS TABLE (result text, unit work_units, info jsonb)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    b record;
    v_fleet text;
    bad record;
BEGIN
    SELECT * INTO b FROM ledger_begin(p_token, p_notify, '{units:register}', NULL, NULL);
    IF b.refusal IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_answer(b.refusal, b.replayed, b.info);
        RETURN;
    END IF;
    v_fleet := (b.who).fleet;
    IF coalesce(cardinality(p_refs), 0) NOT BETWEEN 1 AND 1000
       OR cardinality(p_domains) > cardinality(p_refs) OR cardinality(p_workflows) > cardinality(p_refs) THEN
        RETURN QUERY SELECT * FROM ledger_invalid(NULL, 'units', 'must hold 1 to 1000 units per call');
        RETURN;
    END IF;
    SELECT i.ord, CASE WHEN i.external_ref IS NULL OR NOT ledger_is_label(i.external_ref) THEN 'externalRef'
                       WHEN nullif(i.domain, '') IS NOT NULL AND NOT ledger_is_label(i.domain) THEN 'domain'
                       ELSE 'workflowId' END AS argument
      INTO bad
      FROM unnest(p_refs, p_domains, p_workflows) WITH ORDINALITY AS i(external_ref, domain, workflow_id, ord)
     WHERE i.ord <= cardinality(p_refs)
       AND (i.external_ref IS NULL OR NOT ledger_is_label(i.external_ref)
            OR (nullif(i.domain, '') IS NOT NULL AND NOT ledger_is_label(i.domain))
            OR (nullif(i.workflow_id, '') IS NOT NULL AND NOT ledger_is_label(i.workflow_id)))
     ORDER BY i.ord LIMIT 1;
    IF bad.ord IS NOT NULL THEN
        RETURN QUERY SELECT * FROM ledger_invalid(NULL, format('units[%s].%s', bad.ord - 1, bad.argument),
                                                  'must be 1 to 256 printable characters with no invisible formatting characters');
        RETURN;
    END IF;
    WITH input AS (
         SELECT DISTINCT ON (i.external_ref) i.external_ref, coalesce(nullif(i.domain, ''), 'default') AS domain,
                nullif(i.workflow_id, '') AS workflow_id
           FROM unnest(p_refs, p_domains, p_workflows) WITH ORDINALITY AS i(external_ref, domain, workflow_id, ord)
          WHERE i.ord <= cardinality(p_refs)
          ORDER BY i.external_ref, i.ord
     ), ins AS (
         INSERT INTO work_units AS u (fleet, external_ref, domain, workflow_id)
         SELECT v_fleet, input.external_ref, input.domain, input.workflow_id FROM input ORDER BY input.external_ref
         ON CONFLICT (fleet, external_ref) DO NOTHING
         RETURNING u.id, u.external_ref, u.state
     )
    -- Set-based (one INSERT for the batch): the same columns as ledger_log.
    INSERT INTO work_unit_events (fleet, unit_id, event_type, to_state, agent_id, detail)
    SELECT v_fleet, ins.id, 'registered', ins.state, (b.who).name,
           jsonb_build_object('external_ref', ins.external_ref)
      FROM ins;
    -- A new statement: it sees units committed by concurrent registrations too.
    RETURN QUERY SELECT 'ok'::text, u, '{}'::jsonb
                   FROM unnest(p_refs) WITH ORDINALITY AS i(external_ref, ord)
                   JOIN work_units u ON u.fleet = v_fleet AND u.external_ref = i.external_ref
                  ORDER BY i.ord;
END
$$;
