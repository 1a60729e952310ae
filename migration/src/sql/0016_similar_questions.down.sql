DROP INDEX blocking_questions_norm_idx;
ALTER TABLE blocking_questions DROP COLUMN norm;
DROP FUNCTION ledger_question_norm(text);
