-- The least a claim of SPEC §3 does on the ledger's tables, as one statement: the agent's held unit
-- looked for, a stale unit before a READY one, attempt N+1, the unit taken, the `claimed` event.
-- Run as the writer role under row-level security, as the write functions run. Left out although
-- the SPEC asks for them: authentication, the idempotency lookup, rework to fresh eyes, the reclaim
-- of a stale attempt. Any claim that keeps the guarantees does at least this much.
\set a random(1, 1000000000)
WITH held AS (
     SELECT id FROM work_units WHERE fleet = 'f' AND claimed_by = 'agent-' || :a
        AND state IN ('claimed', 'in_progress', 'blocked')
 ), stale AS (
     SELECT id, attempt_count FROM work_units WHERE fleet = 'f' AND state IN ('claimed', 'in_progress')
        AND lease_expires_at < now() AND NOT EXISTS (SELECT 1 FROM held)
      ORDER BY lease_expires_at, id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
 ), ready AS (
     SELECT id, attempt_count FROM work_units WHERE fleet = 'f' AND state = 'ready'
        AND NOT EXISTS (SELECT 1 FROM held) AND NOT EXISTS (SELECT 1 FROM stale)
      ORDER BY created_at, external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
 ), pick AS (
     SELECT * FROM stale UNION ALL SELECT * FROM ready
 ), att AS (
     INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
     SELECT 'f', id, attempt_count + 1, 'agent-' || :a FROM pick
     RETURNING id, unit_id, attempt_no, started_at
 ), taken AS (
     UPDATE work_units u SET state = 'claimed', claimed_by = 'agent-' || :a, current_attempt_id = att.id,
            attempt_count = att.attempt_no, lease_expires_at = now() + interval '900 seconds',
            last_heartbeat_at = now(), updated_at = clock_timestamp(),
            first_claimed_at = coalesce(u.first_claimed_at, att.started_at)
       FROM att WHERE u.id = att.unit_id
     RETURNING u.id
 ), ev AS (
     INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
     SELECT 'f', unit_id, id, 'claimed', 'ready', 'claimed', 'agent-' || :a,
            jsonb_build_object('attempt_no', attempt_no, 'lease_seconds', 900) FROM att
 )
 SELECT unit_id FROM att;
