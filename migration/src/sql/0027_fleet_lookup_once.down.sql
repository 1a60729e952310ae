DO $$
DECLARE
    p record;
BEGIN
    FOR p IN SELECT c.relname, pol.polname, pg_get_expr(pol.polqual, pol.polrelid) AS q,
                    pg_get_expr(pol.polwithcheck, pol.polrelid) AS w
               FROM pg_policy pol JOIN pg_class c ON c.oid = pol.polrelid
              WHERE pg_get_expr(pol.polqual, pol.polrelid) ~ '\(\s*SELECT (current_fleet|reader_fleet)\(\) AS \w+\)'
    LOOP
        EXECUTE format('ALTER POLICY %I ON %I USING %s%s', p.polname, p.relname,
                       regexp_replace(p.q, '\(\s*SELECT (current_fleet|reader_fleet)\(\) AS \w+\)', '\1()', 'g'),
                       CASE WHEN p.w IS NULL THEN ''
                            ELSE ' WITH CHECK ' || regexp_replace(p.w, '\(\s*SELECT (current_fleet|reader_fleet)\(\) AS \w+\)', '\1()', 'g') END);
    END LOOP;
END
$$;
