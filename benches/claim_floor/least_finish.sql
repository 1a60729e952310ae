-- The least claim-and-finish of SPEC §3 on the ledger's tables, as three statements (claim, start,
-- dispose DROPPED), run as the writer role under row-level security as the write functions run:
-- each writes its unit, its attempt and its event, with the foreign keys, the checks, the state
-- machine's guard and the live-delivery marker on. Left out although the SPEC asks for them: authentication, the
-- idempotency lookup, stale units, rework to fresh eyes, the refusals' reasons.
-- Its agents are its own (no other variant's agent holds a unit it would find).
\set a random(1000000001, 2000000000)
WITH held AS (
     SELECT id FROM work_units WHERE fleet = 'f' AND claimed_by = 'agent-' || :a
        AND state IN ('claimed', 'in_progress', 'blocked')
 ), ready AS (
     SELECT id, attempt_count FROM work_units WHERE fleet = 'f' AND state = 'ready'
        AND NOT EXISTS (SELECT 1 FROM held)
      ORDER BY created_at, external_ref LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED
 ), att AS (
     INSERT INTO work_unit_attempts (fleet, unit_id, attempt_no, agent_id)
     SELECT 'f', id, attempt_count + 1, 'agent-' || :a FROM ready
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
 SELECT unit_id AS u FROM att \gset
WITH w AS (
     UPDATE work_units u SET state = 'in_progress', updated_at = clock_timestamp()
      WHERE u.id = :u AND u.claimed_by = 'agent-' || :a AND u.state = 'claimed'
     RETURNING u.id, u.current_attempt_id
 ), ev AS (
     INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
     SELECT 'f', id, current_attempt_id, 'transitioned', 'claimed', 'in_progress', 'agent-' || :a, '{}' FROM w
 )
 SELECT id FROM w;
WITH w AS (
     UPDATE work_units u SET state = 'abandoned', disposition = 'DROPPED', disposed_at = now(), lease_expires_at = NULL,
            updated_at = clock_timestamp(), evidence_urls = array_append(u.evidence_urls, 'https://ci.example/noop')
      WHERE u.id = :u AND u.claimed_by = 'agent-' || :a AND u.state = 'in_progress'
     RETURNING u.id, u.current_attempt_id, u.state
 ), a AS (
     UPDATE work_unit_attempts a SET outcome = 'abandoned', ended_at = now() FROM w WHERE a.id = w.current_attempt_id
 ), ev AS (
     INSERT INTO work_unit_events (fleet, unit_id, attempt_id, event_type, from_state, to_state, agent_id, detail)
     SELECT 'f', id, current_attempt_id, 'disposed', 'in_progress', state, 'agent-' || :a,
            jsonb_build_object('disposition', 'DROPPED', 'evidence_url', 'https://ci.example/noop') FROM w
 )
 SELECT id FROM w;
