-- The service's claim-and-finish as SQL: claimNext, start and dispose DROPPED, each one call of
-- its write function, by a fresh agent (as its own token, minted by run.sh), notified after commit.
\set a random(1, 2000000)
SELECT (unit).id AS u FROM ledger_claim(sha256(convert_to('agent-' || :a, 'UTF8')), 'after-commit', NULL, NULL, 900, NULL, NULL) \gset
SELECT result FROM ledger_transition(sha256(convert_to('agent-' || :a, 'UTF8')), 'after-commit', NULL, NULL, :u, NULL, 'in_progress', NULL);
SELECT result FROM ledger_dispose(sha256(convert_to('agent-' || :a, 'UTF8')), 'after-commit', NULL, NULL, :u, NULL, 'DROPPED', 'https://ci.example/noop', NULL);
