-- The service's claim statement: claimNext by a fresh agent, no key, no domain, notified after commit.
\set a random(1, 1000000000)
SELECT result FROM ledger_claim('f', 'agent-' || :a, 'after-commit', NULL, NULL, 900, NULL, NULL);
