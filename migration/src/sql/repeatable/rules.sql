-- The input rules of SPEC §9 that a write's arguments can break, as the
-- database holds them for every caller (the service checks the same rules
-- first, in src/ledger/validate.rs, for its messages; a test holds the two
-- to the same characters). PL/pgSQL, so a write's call costs an expression,
-- not a parse.
--
-- A repeatable file: `migrate` applies it again whenever its text changed.

-- No invisible formatting character: Unicode's Cf (bidirectional
-- overrides and isolates, zero-width characters, the soft hyphen, the byte
-- order mark, tag characters, ...), Zl and Zp. They make one string
-- display as another.
CREATE OR REPLACE FUNCTION ledger_is_unformatted(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN p !~ '[\u00AD\u0600-\u0605\u061C\u06DD\u070F\u0890-\u0891\u08E2\u180E\u200B-\u200F\u2028-\u202E\u2060-\u2064\u2066-\u206F\uFEFF\uFFF9-\uFFFB\U000110BD\U000110CD\U00013430-\U0001343F\U0001BCA0-\U0001BCA3\U0001D173-\U0001D17A\U000E0001\U000E0020-\U000E007F]';
END
$$;

-- No control character (Unicode Cc) and no invisible formatting character.
CREATE OR REPLACE FUNCTION ledger_is_visible(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN p !~ '[\u0001-\u001F\u007F-\u009F]' AND ledger_is_unformatted(p);
END
$$;

-- Identifiers, refs, labels and idempotency keys: 1 to 256 visible characters.
CREATE OR REPLACE FUNCTION ledger_is_label(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN char_length(p) BETWEEN 1 AND 256 AND ledger_is_visible(p);
END
$$;

-- Answers and reasons: non-blank, at most 8000 characters, no control
-- character but line breaks and tabs.
CREATE OR REPLACE FUNCTION ledger_is_long_text(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN char_length(p) <= 8000 AND p !~ '^[[:space:]]*$'
           AND p !~ '[\u0001-\u0008\u000B\u000C\u000E-\u001F\u007F-\u009F]';
END
$$;

-- Questions: long text with no invisible formatting character, except the
-- zero-width non-joiner and joiner (U+200C, U+200D) between two visible
-- characters, where they shape the text (Persian words, emoji sequences).
CREATE OR REPLACE FUNCTION ledger_is_question(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN ledger_is_long_text(p)
           AND ledger_is_unformatted(translate(p, U&'\200C\200D', 'xx'))
           AND p !~ '(^|[[:space:]\u200C\u200D])[\u200C\u200D]' AND p !~ '[\u200C\u200D]($|[[:space:]])';
END
$$;

-- Evidence: a link (ledger_is_link) of visible characters.
CREATE OR REPLACE FUNCTION ledger_is_evidence(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN ledger_is_link(p) AND ledger_is_visible(p);
END
$$;

-- ---------------------------------------------------------------------------
-- Rules the tables themselves hold (column defaults, CHECKs and an index use them),
-- so this file is applied before the versioned migrations.
-- ---------------------------------------------------------------------------

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
CREATE OR REPLACE FUNCTION ledger_new_id() RETURNS uuid
    LANGUAGE plpgsql PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

-- An absolute http(s) link of at most 2048 characters with no space or
-- control character (the service checks more; this is the floor a hand-made
-- row must meet, so that whatever the table holds, the API can read).
CREATE OR REPLACE FUNCTION ledger_is_link(p_url text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
    SELECT char_length(p_url) <= 2048 AND p_url ~* '^https?://[^[:space:][:cntrl:]/?#]+([/?#][^[:space:][:cntrl:]]*)?$'
$_$;

-- Every element a link (no NULL element either).
CREATE OR REPLACE FUNCTION ledger_are_links(p_urls text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    AS $$
    SELECT coalesce(bool_and(x IS NOT NULL AND public.ledger_is_link(x)), true) FROM unnest(p_urls) AS x
$$;

-- The triage desk (issue 26): questions compare by their normalised text,
-- so one answer can serve every identical question. The text folds case,
-- runs of white space and trailing punctuation ("Is X used?" = "is  x used").
CREATE OR REPLACE FUNCTION ledger_question_norm(q text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'public', 'pg_temp'
    RETURN regexp_replace(btrim(regexp_replace(lower(q), '\s+'::text, ' '::text, 'g'::text)), '[[:space:][:punct:]]+$'::text, ''::text);

COMMENT ON FUNCTION ledger_new_id() IS 'A UUID version 7: Unix milliseconds, then random bits (ids in creation order)';
