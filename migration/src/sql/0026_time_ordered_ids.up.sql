-- Ids in time order (issue 28): a unit, attempt, event or question id is a
-- UUID version 7 (RFC 9562): 48 bits of Unix milliseconds, then random bits.
--
-- With random (version 4) ids every write of the claim path put its index
-- entries on a random leaf page of seven indexes keyed by an id
-- (work_units_pkey and (fleet, id); the attempts' primary key, (fleet, id)
-- and (unit_id, attempt_no); the events' primary key and (unit_id, ...)).
-- After each checkpoint the first change of a page writes the whole page to
-- the WAL, so a claim wrote 18-19 KB of WAL (85% of it page images of
-- those leaves) against the seed claim's 6 KB; ids in creation order keep
-- a fleet's new entries on a few pages: 6.2-6.5 KB per claim, measured
-- with pg_waldump (docs/BENCHMARKS.md). New rows' entries also stay
-- together in the buffer cache instead of spread over every leaf.
--
-- Still 74 random bits per id: an id is no easier to guess. Ids already
-- written stay as they are; order by id is never a meaning (pages order by
-- (created_at, id)).
--
-- PL/pgSQL with its search_path pinned, like every function here: one
-- simple expression, evaluated without a plan of its own (a few µs a row).
CREATE FUNCTION ledger_new_id() RETURNS uuid LANGUAGE plpgsql VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    -- Bytes 0-5: the milliseconds; the version nibble 4 of gen_random_uuid
    -- (0100) becomes 7 (0111) by setting bits 52 and 53.
    RETURN encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                                          PLACING substring(int8send((EXTRACT(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                                          FROM 1 FOR 6),
                                  52, 1), 53, 1),
                  'hex')::uuid;
END
$$;
COMMENT ON FUNCTION ledger_new_id() IS 'A UUID version 7: Unix milliseconds, then random bits (ids in creation order)';
ALTER TABLE work_units ALTER COLUMN id SET DEFAULT ledger_new_id();
ALTER TABLE work_unit_attempts ALTER COLUMN id SET DEFAULT ledger_new_id();
ALTER TABLE work_unit_events ALTER COLUMN id SET DEFAULT ledger_new_id();
ALTER TABLE blocking_questions ALTER COLUMN id SET DEFAULT ledger_new_id();
