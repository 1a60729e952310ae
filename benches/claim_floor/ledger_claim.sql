-- The service's claim statement: claimNext by a fresh agent (as its own token, minted by run.sh
-- with the hash sha256 of its name), no key, no domain, notified after commit.
\set a random(1, 2000000)
SELECT result FROM ledger_claim(sha256(convert_to('agent-' || :a, 'UTF8')), 'after-commit', NULL, NULL, 900, NULL, NULL);
