-- The projection from Temporal (SPEC §12): the fleets' links to Temporal,
-- where the projection stands in each workflow run, and what lets a
-- workflow hold a unit (the functions are in repeatable/temporal.sql).

-- A token of the projection acts as the workflow of the workflow-modelled
-- unit it names (writes.sql, ledger_begin), never as an agent.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_known_permissions;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_known_permissions CHECK ((permissions <@ ARRAY[
    'ledger:read'::text, 'units:register'::text, 'units:claim'::text, 'questions:answer'::text,
    'units:dispose-any'::text, 'tokens:manage'::text, 'units:project'::text]));

-- A unit its workflow holds has no lease of the ledger's: Temporal times
-- its runs, and a unit without a lease never goes stale, so no agent can
-- reclaim it and the sweeper never reports it.
ALTER TABLE work_units DROP CONSTRAINT work_units_live_claim_has_holder;
ALTER TABLE work_units ADD CONSTRAINT work_units_live_claim_has_holder CHECK (((state <> ALL (ARRAY['claimed'::work_state, 'in_progress'::work_state]))
    OR ((claimed_by IS NOT NULL) AND (current_attempt_id IS NOT NULL)
        AND ((lease_expires_at IS NOT NULL) OR (workflow_id IS NOT NULL)))));

-- claimNext's READY indexes hold the units agents may claim: a
-- workflow-modelled unit is not one of them (its pick says so in its
-- WHERE, which these predicates cover: the pick's plan is unchanged).
DROP INDEX work_units_pick_idx;
CREATE INDEX work_units_pick_idx ON work_units USING btree (fleet, created_at, external_ref)
    WHERE ((state = 'ready'::work_state) AND (workflow_id IS NULL));
DROP INDEX work_units_pick_domain_idx;
CREATE INDEX work_units_pick_domain_idx ON work_units USING btree (fleet, domain, created_at, external_ref)
    WHERE ((state = 'ready'::work_state) AND (workflow_id IS NULL));

-- The projection finds a workflow's unit by its id.
CREATE INDEX work_units_workflow_idx ON work_units USING btree (fleet, workflow_id) WHERE (workflow_id IS NOT NULL);

-- `work-ledger temporal link`: new workflows of `namespace` matching
-- `query` (a Temporal list filter) become units of `fleet`.
CREATE TABLE temporal_links (
    fleet text NOT NULL,
    namespace text NOT NULL,
    query text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT temporal_links_pkey PRIMARY KEY (fleet, namespace, query),
    CONSTRAINT temporal_links_fleet_check CHECK ((fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text)),
    CONSTRAINT temporal_links_namespace_check CHECK (((char_length(namespace) >= 1) AND (char_length(namespace) <= 256))),
    CONSTRAINT temporal_links_query_check CHECK (((char_length(query) >= 1) AND (char_length(query) <= 8000)))
);

-- Per workflow run, the last event of its history the projection
-- projected (or skipped), moved in the transaction of the write that
-- projected it: a restart or a second replica resumes after it.
CREATE TABLE temporal_runs (
    fleet text NOT NULL,
    namespace text NOT NULL,
    workflow_id text NOT NULL,
    run_id text NOT NULL,
    unit_id uuid NOT NULL,
    last_event_id bigint DEFAULT 0 NOT NULL,
    closed boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT temporal_runs_pkey PRIMARY KEY (fleet, namespace, workflow_id, run_id),
    CONSTRAINT temporal_runs_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES work_units(fleet, id),
    CONSTRAINT temporal_runs_last_event_id_check CHECK ((last_event_id >= 0))
);
CREATE INDEX temporal_runs_unit_idx ON temporal_runs USING btree (unit_id);
ALTER TABLE temporal_runs ENABLE ROW LEVEL SECURITY;
