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

-- Evidence: a link (ledger_is_link, migration 0012) of visible characters.
CREATE OR REPLACE FUNCTION ledger_is_evidence(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    RETURN ledger_is_link(p) AND ledger_is_visible(p);
END
$$;
