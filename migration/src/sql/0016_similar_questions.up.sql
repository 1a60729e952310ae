-- The triage desk (issue 26): questions compare by their normalised text,
-- so one answer can serve every identical question. The text folds case,
-- runs of white space and trailing punctuation ("Is X used?" = "is  x used").
CREATE FUNCTION ledger_question_norm(q text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, public, pg_temp
RETURN regexp_replace(btrim(regexp_replace(lower(q), '\s+', ' ', 'g')), '[[:space:][:punct:]]+$', '');

ALTER TABLE blocking_questions ADD COLUMN norm text GENERATED ALWAYS AS (ledger_question_norm(question)) STORED;

-- Open questions with the same text (alsoAnswerSimilar, the groups of
-- open questions) and answered ones newest first (similarAnswered).
CREATE INDEX blocking_questions_norm_idx ON blocking_questions (fleet, norm, status, answered_at DESC);
