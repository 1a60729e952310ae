-- claimNext reads the READY units alone, however many units of the fleet
-- were claimed before (issue 28).
--
-- The pick ordered the READY units by (created_at, id), and two indexes give
-- that order for a fleet: the partial READY index and the fleet's keyset
-- index work_units_keyset_idx (fleet, created_at, id), which keeps every
-- unit. A fleet registered and analyzed while all its units are READY (a
-- new programme, a big import; autoanalyze waits for 10% of the table to
-- change) makes the two look alike to the planner, which then took the
-- keyset index: a claimed unit stays in it, live, in the same place, so
-- every pick stepped over each unit claimed before it (one claim 3.3 ms
-- after 16,000 claims, 1.1 ms through the READY index; the bench's claim
-- phases paid it on every call).
--
-- The pick now orders by (created_at, external_ref), which only the READY
-- indexes give: the keyset index would need a sort, so no statistics can
-- make it the cheaper path. created_at is the registration's clock time of
-- each row and registrations insert in ref order, so the claim order is the
-- one it was; (fleet, external_ref) is unique, so the order is total. Reads
-- of READY units by (created_at, id) take the same index with an
-- incremental sort of each instant's units. Same number of indexes: a claim
-- writes no entry in either (the unit leaves READY).
CREATE INDEX work_units_pick_idx ON work_units (fleet, created_at, external_ref) WHERE state = 'ready';
CREATE INDEX work_units_pick_domain_idx ON work_units (fleet, domain, created_at, external_ref) WHERE state = 'ready';
DROP INDEX work_units_claimable_idx;
DROP INDEX work_units_claimable_domain_idx;
ALTER INDEX work_units_pick_idx RENAME TO work_units_claimable_idx;
ALTER INDEX work_units_pick_domain_idx RENAME TO work_units_claimable_domain_idx;
