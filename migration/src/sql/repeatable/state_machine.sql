-- The state machine of SPEC §2 and §3, declared once. The write functions
-- (writes.sql) read from here which states an action leaves from and where
-- it leads; the guard below refuses any other change of state, for every
-- role, the write functions' own included. The Rust code explains the same
-- rules (legalActions) and a test holds it to this declaration.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- Every move: the action, who may make it, the state it leaves from and the
-- state it leads to, and for a dispose the disposition it sets. Who:
--   claimant  a token with units:claim (any agent of the fleet)
--   holder    a token with units:claim that holds the unit (claimed_by)
--   answerer  a token with questions:answer
--   operator  a token with units:dispose-any
--   workflow  the Temporal projection's token (units:project) acting as
--             the workflow of a workflow-modelled unit (SPEC §12): it claims
--             the unit when a run starts and, holding it, works it like a
--             holder; a run that completes with a disposition disposes of
--             it from VERIFIED
-- A stale reclaim keeps the state CLAIMED (a new attempt, a new holder);
-- a release of a BLOCKED unit keeps it BLOCKED (the holder goes, the
-- question stays).
CREATE OR REPLACE FUNCTION ledger_moves()
RETURNS TABLE (action text, actor text, from_state work_state, to_state work_state, disposition disposition)
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN QUERY
    SELECT m.action, m.actor, m.from_state::work_state, m.to_state::work_state, m.disposition::disposition
      FROM (VALUES
            ('claim',   'claimant', 'ready',       'claimed',     NULL),
            ('claim',   'workflow', 'ready',       'claimed',     NULL),
            ('reclaim', 'claimant', 'claimed',     'claimed',     NULL),
            ('reclaim', 'claimant', 'in_progress', 'claimed',     NULL),
            ('start',   'holder',   'claimed',     'in_progress', NULL),
            ('verify',  'holder',   'in_progress', 'verified',    NULL),
            ('block',   'holder',   'in_progress', 'blocked',     NULL),
            ('unblock', 'answerer', 'blocked',     'in_progress', NULL),  -- its holder still holds it
            ('unblock', 'answerer', 'blocked',     'ready',       NULL),  -- its holder released it
            ('release', 'holder',   'claimed',     'ready',       NULL),
            ('release', 'holder',   'in_progress', 'ready',       NULL),
            ('release', 'holder',   'blocked',     'blocked',     NULL),
            ('dispose', 'holder',   'verified',    'done',        'MIGRATED'),
            ('dispose', 'operator', 'verified',    'done',        'MIGRATED'),
            ('dispose', 'workflow', 'verified',    'done',        'MIGRATED')) AS m(action, actor, from_state, to_state, disposition)
    UNION ALL
    -- DROPPED, DEFERRED and DEAD: by the holder while it works on the unit,
    -- by an operator from any state that is not terminal.
    SELECT 'dispose', h.actor, h.from_state::work_state, 'abandoned'::work_state, d.disposition
      FROM unnest(ARRAY['DROPPED', 'DEFERRED', 'DEAD']::disposition[]) AS d(disposition)
     CROSS JOIN (VALUES ('holder', 'in_progress'), ('holder', 'blocked'),
                        ('workflow', 'in_progress'), ('workflow', 'verified'),
                        ('operator', 'ready'), ('operator', 'claimed'), ('operator', 'in_progress'),
                        ('operator', 'blocked'), ('operator', 'verified')) AS h(actor, from_state);
END
$$;

-- The helpers below are PL/pgSQL, like every function on a write's path:
-- PL/pgSQL keeps its statements' plans for the session, where a SQL
-- function with a pinned search_path is parsed and planned on every call.
-- All are immutable: called with constant arguments, PostgreSQL evaluates
-- them once when it plans the statement that names them (so a pick still
-- finds its partial indexes).

-- The held (live-claim) states: an agent holds at most one unit in them
-- (work_units_one_live_claim_per_agent) and the unit has a holder.
CREATE OR REPLACE FUNCTION ledger_held_states() RETURNS work_state[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN ARRAY['claimed', 'in_progress', 'blocked']::work_state[];
END
$$;

-- The declaration indexed for the writes, as immutable constants: a write
-- calls ledger_from and ledger_to with the state it found, at run time,
-- and ledger_moves() run again for each such call cost a write more than
-- its own statements (about 100 µs a call, several calls a write). Folded
-- into a constant, the declaration is read once per session: the lookups
-- below run no query.
--
-- ledger_move_sources(): 'action>actor>disposition' (an actor or a
-- disposition '*' for any) -> the states it leaves from, as an array literal.
CREATE OR REPLACE FUNCTION ledger_move_sources() RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN (SELECT jsonb_object_agg(g.k, g.states) FROM (
        SELECT m.action || '>' || CASE WHEN grouping(m.actor) = 1 THEN '*' ELSE m.actor END
               || '>' || CASE WHEN grouping(m.disposition) = 1 THEN '*' ELSE coalesce(m.disposition::text, '') END AS k,
               array_agg(DISTINCT m.from_state ORDER BY m.from_state)::text AS states
          FROM ledger_moves() m
         GROUP BY GROUPING SETS ((m.action), (m.action, m.actor), (m.action, m.disposition),
                                 (m.action, m.actor, m.disposition))) AS g);
END
$$;

-- ledger_move_targets(): 'action>from>disposition' -> the states it leads
-- to, as an array literal.
CREATE OR REPLACE FUNCTION ledger_move_targets() RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN (SELECT jsonb_object_agg(g.k, g.states) FROM (
        SELECT m.action || '>' || m.from_state::text || '>' || coalesce(m.disposition::text, '') AS k,
               array_agg(DISTINCT m.to_state ORDER BY m.to_state)::text AS states
          FROM ledger_moves() m
         GROUP BY 1) AS g);
END
$$;

-- The states `p_action` leaves from, by any actor, or by one of `p_actors`
-- (and with `p_disposition`, for a dispose).
CREATE OR REPLACE FUNCTION ledger_from(p_action text, p_actors text[] DEFAULT NULL, p_disposition disposition DEFAULT NULL)
RETURNS work_state[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    actor text;
    found work_state[] := '{}';
BEGIN
    IF p_actors IS NULL THEN
        RETURN coalesce((ledger_move_sources() ->> (p_action || '>*>' || coalesce(p_disposition::text, '*')))::work_state[],
                        '{}');
    END IF;
    FOREACH actor IN ARRAY p_actors LOOP
        found := found || coalesce((ledger_move_sources()
                                    ->> (p_action || '>' || actor || '>' || coalesce(p_disposition::text, '*')))::work_state[],
                                   '{}');
    END LOOP;
    IF cardinality(p_actors) <= 1 THEN
        RETURN found;
    END IF;
    RETURN (SELECT coalesce(array_agg(DISTINCT s ORDER BY s), '{}') FROM unnest(found) AS s);
END
$$;

-- Where `p_action` leads from `p_from` (for a dispose, with
-- `p_disposition`); NULL when it does not leave from there. Of two targets
-- (unblock: back to the holder, or READY when the holder released the
-- unit), `p_held` picks the held one or the other.
CREATE OR REPLACE FUNCTION ledger_to(p_action text, p_from work_state, p_disposition disposition DEFAULT NULL,
                                     p_held boolean DEFAULT NULL)
RETURNS work_state
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    target work_state;
BEGIN
    FOREACH target IN ARRAY coalesce((ledger_move_targets()
                                      ->> (p_action || '>' || p_from::text || '>' || coalesce(p_disposition::text, '')))::work_state[],
                                     '{}') LOOP
        IF p_held IS NULL OR (target = ANY (ledger_held_states())) = p_held THEN
            RETURN target;
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;

-- The working states: the unit has a lease, and it goes stale when the
-- lease runs out (the states a reclaim leaves from).
CREATE OR REPLACE FUNCTION ledger_working_states() RETURNS work_state[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN ledger_from('reclaim');
END
$$;

-- The terminal states: no move leaves from them.
CREATE OR REPLACE FUNCTION ledger_terminal_states() RETURNS work_state[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN (SELECT array_agg(s ORDER BY s) FROM unnest(enum_range(NULL::work_state)) AS s
             WHERE NOT EXISTS (SELECT 1 FROM ledger_moves() m WHERE m.from_state = s));
END
$$;

-- The roles a token acts in on a unit: its permissions and whether it holds it.
CREATE OR REPLACE FUNCTION ledger_actors(p_permissions text[], p_holds boolean) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN array_remove(ARRAY[
        CASE WHEN 'units:claim' = ANY (p_permissions) THEN 'claimant' END,
        CASE WHEN 'units:claim' = ANY (p_permissions) AND p_holds THEN 'holder' END,
        CASE WHEN 'questions:answer' = ANY (p_permissions) THEN 'answerer' END,
        CASE WHEN 'units:dispose-any' = ANY (p_permissions) THEN 'operator' END,
        CASE WHEN 'units:project' = ANY (p_permissions) AND p_holds THEN 'workflow' END], NULL);
END
$$;

-- Every declared move as 'from>to>disposition' (no disposition: ''): an
-- immutable constant, which the guard's plan keeps for its session (a call
-- of ledger_moves() per row would run it again for every write).
CREATE OR REPLACE FUNCTION ledger_move_keys() RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN (SELECT array_agg(DISTINCT m.from_state::text || '>' || m.to_state::text || '>'
                             || coalesce(m.disposition::text, ''))
              FROM ledger_moves() m);
END
$$;

-- The guard, for every role: a unit changes state only along a declared
-- move, and its disposition is set once (with the terminal state the
-- table's CHECK pairs it with) and never changed again. The write
-- functions hold the same rules in their own statements; this is what
-- holds for anyone, whatever function or statement they use.
CREATE OR REPLACE FUNCTION work_units_state_machine() RETURNS trigger LANGUAGE plpgsql
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF OLD.disposition IS NOT NULL AND (NEW.disposition, NEW.disposed_at) IS DISTINCT FROM (OLD.disposition, OLD.disposed_at) THEN
        RAISE EXCEPTION 'disposition of unit % is permanent', OLD.id USING ERRCODE = 'WL002',
            CONSTRAINT = 'work_units_disposition_immutable';
    END IF;
    -- A move into a terminal state names its disposition ('?' when the
    -- unit has none, which no move names); any other names none.
    IF NEW.state IS DISTINCT FROM OLD.state AND NOT (
        OLD.state::text || '>' || NEW.state::text || '>'
        || CASE WHEN NEW.state = ANY (ledger_terminal_states()) THEN coalesce(NEW.disposition::text, '?') ELSE '' END
        = ANY (ledger_move_keys())
    ) THEN
        RAISE EXCEPTION 'illegal state transition % -> % for unit %', OLD.state, NEW.state, OLD.id
            USING ERRCODE = 'WL004', CONSTRAINT = 'work_units_legal_transition';
    END IF;
    RETURN NEW;
END
$$;
CREATE OR REPLACE TRIGGER work_units_state_machine BEFORE UPDATE OF state, disposition, disposed_at ON work_units
    FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state OR NEW.disposition IS DISTINCT FROM OLD.disposition
                       OR NEW.disposed_at IS DISTINCT FROM OLD.disposed_at)
    EXECUTE FUNCTION work_units_state_machine();

-- The full guard of the owner's writes checks the same
-- moves: it reads them from here too.
CREATE OR REPLACE FUNCTION work_units_guard() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    -- The domain too: the read models group a unit's whole history by it
    -- (projections.sql), and no write moves a unit to another.
    IF NEW.id <> OLD.id OR NEW.fleet <> OLD.fleet OR NEW.external_ref <> OLD.external_ref
       OR NEW.created_at <> OLD.created_at OR NEW.domain <> OLD.domain THEN
        RAISE EXCEPTION 'work unit identity is immutable' USING ERRCODE = 'WL001',
            CONSTRAINT = 'work_units_identity_immutable';
    END IF;
    IF OLD.state = ANY (ledger_terminal_states()) AND (NEW.state, NEW.claimed_by, NEW.current_attempt_id,
       NEW.lease_expires_at, NEW.attempt_count, NEW.evidence_urls, NEW.domain, NEW.workflow_id)
       IS DISTINCT FROM (OLD.state, OLD.claimed_by, OLD.current_attempt_id, OLD.lease_expires_at,
       OLD.attempt_count, OLD.evidence_urls, OLD.domain, OLD.workflow_id) THEN
        RAISE EXCEPTION 'unit % is terminal (%)', OLD.id, OLD.state USING ERRCODE = 'WL003',
            CONSTRAINT = 'work_units_terminal_frozen';
    END IF;
    -- work_units.cost_cents is a roll-up of its attempts, maintained by the
    -- attempts trigger; any other change to it is refused.
    IF NEW.cost_cents <> OLD.cost_cents AND NEW.cost_cents <> (
        SELECT coalesce(sum(a.cost_cents), 0) FROM work_unit_attempts a WHERE a.unit_id = NEW.id
    ) THEN
        RAISE EXCEPTION 'cost_cents of unit % must equal the sum of its attempts', NEW.id
            USING ERRCODE = 'WL005', CONSTRAINT = 'work_units_cost_rollup';
    END IF;
    NEW.updated_at := clock_timestamp();
    RETURN NEW;
END
$$;
