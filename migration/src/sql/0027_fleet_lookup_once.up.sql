-- Row-level security looked up the fleet once per row (issue 27).
--
-- The totals tables' policies (0018-0020, and api_tokens') compared each row
-- with current_fleet(), and every reader policy with reader_fleet(): SQL
-- functions with a pinned search_path, which PostgreSQL neither inlines nor
-- runs once, so a scan called them for every row it read. reader_fleet()
-- also reads fleet_readers: the "Claims per week" panel, as a reader login,
-- spent 15 of its 17 ms of SQL on 7,300 such calls over claim_days.
--
-- Each lookup is now a sub-select, which PostgreSQL runs once per statement
-- (an InitPlan) and still uses as an index condition. Same rows: the value is
-- the same for the whole statement either way (the fleet setting and the
-- session's login do not change inside a statement).
-- Test: views::a_reader_login_looks_up_its_fleet_once_per_statement_not_per_row,
-- and views::no_row_level_security_policy_calls_a_fleet_function_per_row for
-- any policy written the old way later.
DO $$
DECLARE
    p record;
    once constant text := '(SELECT \1())';
BEGIN
    FOR p IN SELECT c.relname, pol.polname, pg_get_expr(pol.polqual, pol.polrelid) AS q,
                    pg_get_expr(pol.polwithcheck, pol.polrelid) AS w
               FROM pg_policy pol JOIN pg_class c ON c.oid = pol.polrelid
              WHERE pg_get_expr(pol.polqual, pol.polrelid) IN ('(fleet = current_fleet())', '(fleet = reader_fleet())')
    LOOP
        EXECUTE format('ALTER POLICY %I ON %I USING %s%s', p.polname, p.relname,
                       regexp_replace(p.q, '(current_fleet|reader_fleet)\(\)', once, 'g'),
                       CASE WHEN p.w IS NULL THEN ''
                            ELSE ' WITH CHECK ' || regexp_replace(p.w, '(current_fleet|reader_fleet)\(\)', once, 'g') END);
    END LOOP;
END
$$;
