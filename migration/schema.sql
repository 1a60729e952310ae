CREATE TYPE public.attempt_outcome AS ENUM (
    'verified',
    'blocked',
    'failed',
    'abandoned',
    'superseded'
);

CREATE TYPE public.disposition AS ENUM (
    'MIGRATED',
    'DROPPED',
    'DEFERRED',
    'DEAD'
);

CREATE TYPE public.event_type AS ENUM (
    'registered',
    'claimed',
    'heartbeat',
    'transitioned',
    'blocked',
    'unblocked',
    'cost_recorded',
    'disposed',
    'released',
    'stale_reclaimed',
    'stalled'
);

CREATE TYPE public.question_status AS ENUM (
    'open',
    'answered',
    'cancelled'
);

CREATE TYPE public.work_state AS ENUM (
    'ready',
    'claimed',
    'in_progress',
    'blocked',
    'verified',
    'done',
    'abandoned'
);

CREATE TABLE public.work_units (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    fleet text NOT NULL,
    external_ref text NOT NULL,
    domain text DEFAULT 'default'::text NOT NULL,
    state public.work_state DEFAULT 'ready'::public.work_state NOT NULL,
    disposition public.disposition,
    disposed_at timestamp with time zone,
    workflow_id text,
    claimed_by text,
    current_attempt_id uuid,
    lease_expires_at timestamp with time zone,
    last_heartbeat_at timestamp with time zone,
    attempt_count integer DEFAULT 0 NOT NULL,
    cost_cents bigint DEFAULT 0 NOT NULL,
    evidence_urls text[] DEFAULT '{}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    first_claimed_at timestamp with time zone,
    CONSTRAINT work_units_attempt_count_check CHECK ((attempt_count >= 0)),
    CONSTRAINT work_units_cost_cents_check CHECK ((cost_cents >= 0)),
    CONSTRAINT work_units_disposed_at_with_disposition CHECK (((disposition IS NULL) = (disposed_at IS NULL))),
    CONSTRAINT work_units_disposition_matches_state CHECK ((((state = 'done'::public.work_state) AND (disposition = 'MIGRATED'::public.disposition)) OR ((state = 'abandoned'::public.work_state) AND (disposition = ANY (ARRAY['DROPPED'::public.disposition, 'DEFERRED'::public.disposition, 'DEAD'::public.disposition]))) OR ((state <> ALL (ARRAY['done'::public.work_state, 'abandoned'::public.work_state])) AND (disposition IS NULL)))),
    CONSTRAINT work_units_evidence_links CHECK (((cardinality(evidence_urls) = 0) OR public.ledger_are_links(evidence_urls))),
    CONSTRAINT work_units_external_ref_shape CHECK (((char_length(external_ref) >= 1) AND (char_length(external_ref) <= 256) AND (external_ref !~ '[[:cntrl:]]'::text))),
    CONSTRAINT work_units_first_claim_when_claimed CHECK (((first_claimed_at IS NULL) = (attempt_count = 0))),
    CONSTRAINT work_units_lease_only_while_working CHECK (((lease_expires_at IS NULL) OR (state = ANY (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state])))),
    CONSTRAINT work_units_live_claim_has_holder CHECK (((state <> ALL (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state])) OR ((claimed_by IS NOT NULL) AND (current_attempt_id IS NOT NULL) AND ((lease_expires_at IS NOT NULL) OR (workflow_id IS NOT NULL))))),
    CONSTRAINT work_units_ready_has_no_holder CHECK (((state <> 'ready'::public.work_state) OR ((claimed_by IS NULL) AND (lease_expires_at IS NULL)))),
    CONSTRAINT work_units_settled_has_evidence CHECK (((state <> ALL (ARRAY['verified'::public.work_state, 'done'::public.work_state, 'abandoned'::public.work_state])) OR (cardinality(evidence_urls) > 0)))
)
WITH (autovacuum_vacuum_scale_factor='0.02', autovacuum_analyze_scale_factor='0.01');

CREATE TABLE public.api_tokens (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    fleet text NOT NULL,
    name text NOT NULL,
    permissions text[] NOT NULL,
    token_hash bytea NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    revoked_at timestamp with time zone,
    expires_at timestamp with time zone,
    last_used_at timestamp with time zone,
    CONSTRAINT api_tokens_expires_after_creation CHECK ((expires_at > created_at)),
    CONSTRAINT api_tokens_fleet_check CHECK ((fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text)),
    CONSTRAINT api_tokens_known_permissions CHECK ((permissions <@ ARRAY['ledger:read'::text, 'units:register'::text, 'units:claim'::text, 'questions:answer'::text, 'units:dispose-any'::text, 'tokens:manage'::text, 'units:project'::text])),
    CONSTRAINT api_tokens_name_check CHECK (((char_length(name) >= 1) AND (char_length(name) <= 256) AND (name !~ '[[:cntrl:]]'::text))),
    CONSTRAINT api_tokens_token_hash_check CHECK ((octet_length(token_hash) = 32))
);

CREATE TABLE public.work_unit_events (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    seq bigint NOT NULL,
    fleet text NOT NULL,
    unit_id uuid NOT NULL,
    attempt_id uuid,
    event_type public.event_type NOT NULL,
    from_state public.work_state,
    to_state public.work_state,
    agent_id text,
    cost_delta_cents bigint DEFAULT 0 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    source_event_id text,
    request_hash text,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    tx_id bigint DEFAULT 0 NOT NULL,
    batch bigint DEFAULT 0 NOT NULL,
    CONSTRAINT work_unit_events_cost_delta_bounded CHECK ((cost_delta_cents <= 1000000000)),
    CONSTRAINT work_unit_events_cost_delta_cents_check CHECK ((cost_delta_cents >= 0)),
    CONSTRAINT work_unit_events_key_has_agent CHECK (((source_event_id IS NULL) OR (agent_id IS NOT NULL))),
    CONSTRAINT work_unit_events_key_has_hash CHECK (((source_event_id IS NULL) OR (request_hash IS NOT NULL)))
);

CREATE TABLE public.agent_cost_days (
    fleet text NOT NULL,
    day date NOT NULL,
    agent_id text NOT NULL,
    domain text NOT NULL,
    prior_day date,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.agent_latest (
    fleet text NOT NULL,
    agent_id text NOT NULL,
    started_at timestamp with time zone NOT NULL,
    attempt_id uuid NOT NULL,
    unit_id uuid NOT NULL
);

CREATE TABLE public.agent_totals (
    fleet text NOT NULL,
    agent_id text NOT NULL,
    domain text NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.audit_runs (
    id bigint NOT NULL,
    scope text NOT NULL,
    finished_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    findings jsonb NOT NULL,
    CONSTRAINT audit_runs_findings_check CHECK ((jsonb_typeof(findings) = 'object'::text)),
    CONSTRAINT audit_runs_scope_check CHECK (((length(scope) >= 1) AND (length(scope) <= 256)))
);

ALTER TABLE public.audit_runs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.audit_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.blocking_questions (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    fleet text NOT NULL,
    unit_id uuid NOT NULL,
    attempt_id uuid NOT NULL,
    question text NOT NULL,
    status public.question_status DEFAULT 'open'::public.question_status NOT NULL,
    answer text,
    assignee_group text DEFAULT 'agent-questions'::text NOT NULL,
    asked_by text NOT NULL,
    answered_by text,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    answered_at timestamp with time zone,
    cancelled_at timestamp with time zone,
    norm text GENERATED ALWAYS AS (public.ledger_question_norm(question)) STORED,
    CONSTRAINT blocking_questions_answer_check CHECK (((char_length(answer) >= 1) AND (char_length(answer) <= 8000))),
    CONSTRAINT blocking_questions_answered_has_answer CHECK (((status = 'answered'::public.question_status) = ((answer IS NOT NULL) AND (answered_by IS NOT NULL) AND (answered_at IS NOT NULL)))),
    CONSTRAINT blocking_questions_cancelled_has_time CHECK (((status = 'cancelled'::public.question_status) = (cancelled_at IS NOT NULL))),
    CONSTRAINT blocking_questions_question_check CHECK (((char_length(question) >= 1) AND (char_length(question) <= 8000)))
);

CREATE TABLE public.claim_agents (
    fleet text NOT NULL,
    day date NOT NULL,
    agent_id text NOT NULL
);

CREATE TABLE public.claim_days (
    fleet text NOT NULL,
    day date NOT NULL,
    claims bigint NOT NULL,
    agents bigint NOT NULL,
    verified bigint NOT NULL,
    stale bigint NOT NULL,
    never_started bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.cost_days (
    fleet text NOT NULL,
    day date NOT NULL,
    domain text NOT NULL,
    state public.work_state NOT NULL,
    disposition public.disposition,
    prior_day date,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.cycle_weeks (
    fleet text NOT NULL,
    week date NOT NULL,
    units bigint NOT NULL,
    median_seconds double precision NOT NULL,
    p90_seconds double precision NOT NULL
);

CREATE TABLE public.cycle_weeks_until (
    fleet text NOT NULL,
    until date NOT NULL
);

CREATE TABLE public.disposal_agent_counts (
    fleet text NOT NULL,
    week boolean NOT NULL,
    start date NOT NULL,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    agents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.disposal_agents (
    fleet text NOT NULL,
    week boolean NOT NULL,
    start date NOT NULL,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    agent_id text NOT NULL
);

CREATE TABLE public.disposal_days (
    fleet text NOT NULL,
    day date,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    reworked bigint NOT NULL,
    verified_units bigint NOT NULL,
    verified_cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.disposal_fleet_days (
    fleet text NOT NULL,
    day date,
    disposition public.disposition NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    reworked bigint NOT NULL,
    verified_units bigint NOT NULL,
    verified_cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.disposal_weeks (
    fleet text NOT NULL,
    week date,
    domain text NOT NULL,
    disposition public.disposition NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    reworked bigint NOT NULL,
    verified_units bigint NOT NULL,
    verified_cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.event_days (
    fleet text NOT NULL,
    day date NOT NULL,
    event_type public.event_type NOT NULL,
    events bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.event_totals (
    fleet text NOT NULL,
    event_type public.event_type NOT NULL,
    events bigint NOT NULL,
    agent_id text,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.fleet_readers (
    role_name name NOT NULL,
    fleet text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT fleet_readers_fleet_check CHECK ((fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text))
);

CREATE TABLE public.live_notify_secret (
    singleton boolean DEFAULT true NOT NULL,
    inner_key bytea NOT NULL,
    outer_key bytea NOT NULL,
    CONSTRAINT live_notify_secret_inner_key_check CHECK ((octet_length(inner_key) = 64)),
    CONSTRAINT live_notify_secret_outer_key_check CHECK ((octet_length(outer_key) = 64)),
    CONSTRAINT live_notify_secret_singleton_check CHECK (singleton)
);

CREATE TABLE public.never_started (
    attempt_id uuid NOT NULL,
    fleet text NOT NULL,
    started_at timestamp with time zone NOT NULL
);

CREATE TABLE public.projection_marks (
    name text NOT NULL,
    mark bigint DEFAULT 0 NOT NULL,
    version text,
    folded_events bigint DEFAULT 0 NOT NULL,
    folded_at timestamp with time zone
);

CREATE TABLE public.schema_breaking_changes (
    migration text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.schema_repeatable (
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.schema_repeatable_history (
    name text NOT NULL,
    checksum text NOT NULL,
    applied_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL
);

CREATE TABLE public.seaql_migrations (
    version character varying NOT NULL,
    applied_at bigint NOT NULL
);

CREATE TABLE public.temporal_links (
    fleet text NOT NULL,
    namespace text NOT NULL,
    query text NOT NULL,
    created_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT temporal_links_fleet_check CHECK ((fleet ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'::text)),
    CONSTRAINT temporal_links_namespace_check CHECK (((char_length(namespace) >= 1) AND (char_length(namespace) <= 256))),
    CONSTRAINT temporal_links_query_check CHECK (((char_length(query) >= 1) AND (char_length(query) <= 8000)))
);

CREATE TABLE public.temporal_runs (
    fleet text NOT NULL,
    namespace text NOT NULL,
    workflow_id text NOT NULL,
    run_id text NOT NULL,
    unit_id uuid NOT NULL,
    last_event_id bigint DEFAULT 0 NOT NULL,
    closed boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT temporal_runs_last_event_id_check CHECK ((last_event_id >= 0))
);

CREATE TABLE public.unit_totals (
    fleet text NOT NULL,
    domain text NOT NULL,
    state public.work_state NOT NULL,
    disposition public.disposition,
    reworked boolean NOT NULL,
    units bigint NOT NULL,
    cost_cents bigint NOT NULL,
    folded boolean DEFAULT false NOT NULL
)
WITH (autovacuum_vacuum_threshold='2000', autovacuum_vacuum_scale_factor='0', autovacuum_analyze_threshold='2000', autovacuum_analyze_scale_factor='0');

CREATE TABLE public.work_unit_attempts (
    id uuid DEFAULT public.ledger_new_id() NOT NULL,
    fleet text NOT NULL,
    unit_id uuid NOT NULL,
    attempt_no integer NOT NULL,
    agent_id text NOT NULL,
    outcome public.attempt_outcome,
    cost_cents bigint DEFAULT 0 NOT NULL,
    evidence_url text,
    started_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    ended_at timestamp with time zone,
    CONSTRAINT work_unit_attempts_attempt_no_check CHECK ((attempt_no >= 1)),
    CONSTRAINT work_unit_attempts_cost_cents_check CHECK ((cost_cents >= 0)),
    CONSTRAINT work_unit_attempts_evidence_link CHECK (((evidence_url IS NULL) OR public.ledger_is_link(evidence_url))),
    CONSTRAINT work_unit_attempts_outcome_ends CHECK (((outcome IS NULL) = (ended_at IS NULL))),
    CONSTRAINT work_unit_attempts_verified_has_evidence CHECK (((outcome IS DISTINCT FROM 'verified'::public.attempt_outcome) OR (evidence_url IS NOT NULL)))
);

CREATE SEQUENCE public.work_unit_events_batch_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    MAXVALUE 281474976710655
    CACHE 1;

ALTER TABLE public.work_unit_events ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.work_unit_events_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY public.agent_latest
    ADD CONSTRAINT agent_latest_pkey PRIMARY KEY (fleet, agent_id);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash);

ALTER TABLE ONLY public.audit_runs
    ADD CONSTRAINT audit_runs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.blocking_questions
    ADD CONSTRAINT blocking_questions_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.claim_agents
    ADD CONSTRAINT claim_agents_pkey PRIMARY KEY (fleet, day, agent_id);

ALTER TABLE ONLY public.cycle_weeks
    ADD CONSTRAINT cycle_weeks_pkey PRIMARY KEY (fleet, week);

ALTER TABLE ONLY public.cycle_weeks_until
    ADD CONSTRAINT cycle_weeks_until_pkey PRIMARY KEY (fleet);

ALTER TABLE ONLY public.disposal_agents
    ADD CONSTRAINT disposal_agents_pkey PRIMARY KEY (fleet, week, domain, start, disposition, agent_id);

ALTER TABLE ONLY public.fleet_readers
    ADD CONSTRAINT fleet_readers_pkey PRIMARY KEY (role_name);

ALTER TABLE ONLY public.live_notify_secret
    ADD CONSTRAINT live_notify_secret_pkey PRIMARY KEY (singleton);

ALTER TABLE ONLY public.never_started
    ADD CONSTRAINT never_started_pkey PRIMARY KEY (attempt_id);

ALTER TABLE ONLY public.projection_marks
    ADD CONSTRAINT projection_marks_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.schema_breaking_changes
    ADD CONSTRAINT schema_breaking_changes_pkey PRIMARY KEY (migration);

ALTER TABLE ONLY public.schema_repeatable_history
    ADD CONSTRAINT schema_repeatable_history_pkey PRIMARY KEY (name, checksum);

ALTER TABLE ONLY public.schema_repeatable
    ADD CONSTRAINT schema_repeatable_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.seaql_migrations
    ADD CONSTRAINT seaql_migrations_pkey PRIMARY KEY (version);

ALTER TABLE ONLY public.temporal_links
    ADD CONSTRAINT temporal_links_pkey PRIMARY KEY (fleet, namespace, query);

ALTER TABLE ONLY public.temporal_runs
    ADD CONSTRAINT temporal_runs_pkey PRIMARY KEY (fleet, namespace, workflow_id, run_id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_fleet_id_key UNIQUE (fleet, id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_unit_attempt_no_key UNIQUE (unit_id, attempt_no);

ALTER TABLE ONLY public.work_unit_events
    ADD CONSTRAINT work_unit_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_fleet_external_ref_key UNIQUE (fleet, external_ref);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_fleet_id_key UNIQUE (fleet, id);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_pkey PRIMARY KEY (id);

CREATE INDEX agent_cost_days_day_idx ON public.agent_cost_days USING btree (fleet, day) INCLUDE (agent_id, domain, prior_day, units, cost_cents);

CREATE INDEX audit_runs_last_idx ON public.audit_runs USING btree (scope, finished_at DESC);

CREATE INDEX blocking_questions_keyset_idx ON public.blocking_questions USING btree (fleet, created_at, id);

CREATE INDEX blocking_questions_norm_idx ON public.blocking_questions USING btree (fleet, norm, status, answered_at DESC);

CREATE UNIQUE INDEX blocking_questions_one_open_per_unit ON public.blocking_questions USING btree (unit_id) WHERE (status = 'open'::public.question_status);

CREATE INDEX blocking_questions_unit_idx ON public.blocking_questions USING btree (unit_id, created_at);

CREATE INDEX cost_days_day_idx ON public.cost_days USING btree (fleet, day) INCLUDE (domain, state, disposition, prior_day, units, cost_cents);

CREATE INDEX disposal_agent_counts_idx ON public.disposal_agent_counts USING btree (fleet, week, domain, start) INCLUDE (disposition, agents);

CREATE INDEX disposal_days_day_idx ON public.disposal_days USING btree (fleet, day) INCLUDE (domain, disposition, units, cost_cents);

CREATE INDEX disposal_fleet_days_day_idx ON public.disposal_fleet_days USING btree (fleet, day) INCLUDE (disposition, units, cost_cents);

CREATE INDEX disposal_weeks_week_idx ON public.disposal_weeks USING btree (fleet, week) INCLUDE (domain, disposition, units, cost_cents, reworked, verified_units, verified_cost_cents);

CREATE INDEX event_days_day_idx ON public.event_days USING btree (fleet, day) INCLUDE (event_type, events);

CREATE INDEX never_started_started_idx ON public.never_started USING btree (fleet, started_at);

CREATE INDEX temporal_runs_unit_idx ON public.temporal_runs USING btree (unit_id);

CREATE INDEX work_unit_attempts_agent_started_idx ON public.work_unit_attempts USING btree (fleet, agent_id, started_at) INCLUDE (cost_cents, unit_id, id);

CREATE INDEX work_unit_events_agent_idx ON public.work_unit_events USING btree (fleet, agent_id, created_at DESC, id DESC);

CREATE UNIQUE INDEX work_unit_events_agent_source_event_id_key ON public.work_unit_events USING btree (fleet, agent_id, source_event_id) WHERE (source_event_id IS NOT NULL);

CREATE INDEX work_unit_events_batch_idx ON public.work_unit_events USING btree (batch);

CREATE INDEX work_unit_events_cost_idx ON public.work_unit_events USING btree (fleet, created_at) INCLUDE (unit_id, attempt_id, cost_delta_cents) WHERE (event_type = 'cost_recorded'::public.event_type);

CREATE INDEX work_unit_events_keyset_idx ON public.work_unit_events USING btree (fleet, created_at DESC, id DESC);

CREATE UNIQUE INDEX work_unit_events_one_stall_per_attempt ON public.work_unit_events USING btree (attempt_id) WHERE (event_type = 'stalled'::public.event_type);

CREATE INDEX work_unit_events_position_idx ON public.work_unit_events USING btree (fleet, batch, tx_id, seq);

CREATE INDEX work_unit_events_unit_cost_idx ON public.work_unit_events USING btree (unit_id, seq) INCLUDE (created_at, attempt_id, cost_delta_cents) WHERE (event_type = 'cost_recorded'::public.event_type);

CREATE INDEX work_unit_events_unit_idx ON public.work_unit_events USING btree (unit_id, created_at DESC, id DESC);

CREATE INDEX work_units_claimable_domain_idx ON public.work_units USING btree (fleet, domain, created_at, id) WHERE (state = 'ready'::public.work_state);

CREATE INDEX work_units_claimable_idx ON public.work_units USING btree (fleet, created_at, id) WHERE (state = 'ready'::public.work_state);

CREATE INDEX work_units_cost_idx ON public.work_units USING btree (fleet, cost_cents DESC, id);

CREATE INDEX work_units_disposed_at_idx ON public.work_units USING btree (fleet, disposed_at) INCLUDE (disposition, domain, cost_cents, id, created_at, first_claimed_at) WHERE (disposition IS NOT NULL);

CREATE INDEX work_units_disposed_idx ON public.work_units USING btree (fleet, created_at, id) WHERE (disposition IS NOT NULL);

CREATE INDEX work_units_keyset_idx ON public.work_units USING btree (fleet, created_at, id);

CREATE INDEX work_units_live_lease_idx ON public.work_units USING btree (fleet, lease_expires_at) WHERE (state = ANY (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state]));

CREATE UNIQUE INDEX work_units_one_live_claim_per_agent ON public.work_units USING btree (claimed_by, fleet) WHERE (state = ANY (ARRAY['claimed'::public.work_state, 'in_progress'::public.work_state, 'blocked'::public.work_state]));

CREATE INDEX work_units_pick_domain_idx ON public.work_units USING btree (fleet, domain, created_at, external_ref) WHERE ((state = 'ready'::public.work_state) AND (workflow_id IS NULL));

CREATE INDEX work_units_pick_idx ON public.work_units USING btree (fleet, created_at, external_ref) WHERE ((state = 'ready'::public.work_state) AND (workflow_id IS NULL));

CREATE INDEX work_units_rework_idx ON public.work_units USING btree (fleet, created_at, id) WHERE (attempt_count > 1);

CREATE INDEX work_units_workflow_idx ON public.work_units USING btree (fleet, workflow_id) WHERE (workflow_id IS NOT NULL);

ALTER TABLE ONLY public.blocking_questions
    ADD CONSTRAINT blocking_questions_attempt_fk FOREIGN KEY (fleet, attempt_id) REFERENCES public.work_unit_attempts(fleet, id);

ALTER TABLE ONLY public.blocking_questions
    ADD CONSTRAINT blocking_questions_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.temporal_runs
    ADD CONSTRAINT temporal_runs_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.work_unit_attempts
    ADD CONSTRAINT work_unit_attempts_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.work_unit_events
    ADD CONSTRAINT work_unit_events_attempt_fk FOREIGN KEY (fleet, attempt_id) REFERENCES public.work_unit_attempts(fleet, id);

ALTER TABLE ONLY public.work_unit_events
    ADD CONSTRAINT work_unit_events_unit_fk FOREIGN KEY (fleet, unit_id) REFERENCES public.work_units(fleet, id);

ALTER TABLE ONLY public.work_units
    ADD CONSTRAINT work_units_current_attempt_fk FOREIGN KEY (fleet, current_attempt_id) REFERENCES public.work_unit_attempts(fleet, id) DEFERRABLE INITIALLY DEFERRED;

ALTER TABLE public.agent_cost_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.agent_latest ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.agent_totals ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.api_tokens ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.blocking_questions ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.claim_agents ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.claim_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.cost_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.cycle_weeks ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.cycle_weeks_until ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_agent_counts ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_agents ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_fleet_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.disposal_weeks ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.event_days ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.event_totals ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.never_started ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.temporal_runs ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.unit_totals ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.work_unit_attempts ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.work_unit_events ENABLE ROW LEVEL SECURITY;

ALTER TABLE public.work_units ENABLE ROW LEVEL SECURITY;
