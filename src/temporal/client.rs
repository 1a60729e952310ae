//! The Temporal client the ledger holds (SPEC §12, AC9.2): reads only. It
//! lists a namespace's workflow runs, describes one and reads its history
//! through Temporal's gRPC frontend; nothing here can start, signal, cancel,
//! terminate, update or reset a workflow, and nothing else in the ledger
//! holds a Temporal connection.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};

use temporalio_client::tonic::IntoRequest;
use temporalio_client::{ClientTlsOptions, Connection, ConnectionOptions, TlsOptions, Url};
use temporalio_common::protos::temporal::api::common::v1::WorkflowExecution;
use temporalio_common::protos::temporal::api::enums::v1::WorkflowExecutionStatus;
use temporalio_common::protos::temporal::api::history::v1::HistoryEvent;
use temporalio_common::protos::temporal::api::workflowservice::v1::{
    DescribeWorkflowExecutionRequest, GetWorkflowExecutionHistoryRequest, ListWorkflowExecutionsRequest,
};

/// Where Temporal's frontend is and how to reach it, as Temporal's own
/// clients name it (`--address`, `--namespace`, `--tls*`, `--api-key`).
#[derive(Debug, Clone, Default)]
pub struct TemporalEndpoint {
    /// `host:port` of the frontend (gRPC).
    pub address: String,
    /// The namespace of units registered with a `workflowId` by hand.
    pub namespace: String,
    pub tls: bool,
    pub tls_ca_path: Option<String>,
    pub tls_cert_path: Option<String>,
    pub tls_key_path: Option<String>,
    pub tls_server_name: Option<String>,
    pub api_key: Option<String>,
}

/// One run of a workflow, as Temporal lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub workflow_id: String,
    pub run_id: String,
    /// When it started, in microseconds since the epoch (runs of one
    /// workflow are projected in this order).
    pub started_us: i64,
}

/// The read-only client.
#[derive(Clone)]
pub struct TemporalReads {
    connection: Connection,
}

/// Temporal's answer to a read that failed (unreachable, not found, ...).
pub type ReadError = String;

/// Events asked for per history page.
const HISTORY_PAGE: i32 = 500;

impl TemporalReads {
    /// Connects to the frontend (a read of its system info; no write).
    pub async fn connect(endpoint: &TemporalEndpoint, identity: &str) -> Result<Self, ReadError> {
        let scheme = if endpoint.tls || endpoint.api_key.is_some() { "https" } else { "http" };
        let url = Url::parse(&format!("{scheme}://{}", endpoint.address))
            .map_err(|e| format!("--temporal-address `{}`: {e}", endpoint.address))?;
        let options = ConnectionOptions::new(url)
            .identity(identity.to_owned())
            .maybe_tls_options(tls_options(endpoint)?)
            .maybe_api_key(endpoint.api_key.clone())
            .connect_timeout(Duration::from_secs(5))
            .build();
        let connection = Connection::connect(options).await.map_err(|e| e.to_string())?;
        Ok(Self { connection })
    }

    /// Every run of `namespace` that `query` (a Temporal list filter) matches.
    pub async fn list(&self, namespace: &str, query: &str) -> Result<Vec<Run>, ReadError> {
        let mut service = self.connection.workflow_service();
        let mut runs = Vec::new();
        let mut next_page_token = Vec::new();
        loop {
            let request = ListWorkflowExecutionsRequest {
                namespace: namespace.to_owned(),
                page_size: 1000,
                next_page_token,
                query: query.to_owned(),
            };
            let page = service.list_workflow_executions(request.into_request()).await.map_err(status)?.into_inner();
            for info in page.executions {
                let Some(execution) = info.execution else { continue };
                let started_us =
                    info.start_time.map(|t| t.seconds * 1_000_000 + i64::from(t.nanos) / 1000).unwrap_or(0);
                runs.push(Run { workflow_id: execution.workflow_id, run_id: execution.run_id, started_us });
            }
            if page.next_page_token.is_empty() {
                return Ok(runs);
            }
            next_page_token = page.next_page_token;
        }
    }

    /// The status of the workflow's current run, read from its state, not
    /// from the visibility store (`None`: Temporal no longer has it):
    /// `Running`, `Completed`, `Failed`, `Canceled`, `Terminated`,
    /// `ContinuedAsNew`, `TimedOut`.
    pub async fn current_status(&self, namespace: &str, workflow_id: &str) -> Result<Option<String>, ReadError> {
        let request = DescribeWorkflowExecutionRequest {
            namespace: namespace.to_owned(),
            execution: Some(execution(workflow_id, "")),
        };
        match self.connection.workflow_service().describe_workflow_execution(request.into_request()).await {
            Ok(answer) => Ok(answer.into_inner().workflow_execution_info.map(|info| status_name(info.status))),
            Err(e) if e.code() == temporalio_client::tonic::Code::NotFound => Ok(None),
            Err(e) => Err(status(e)),
        }
    }

    /// One page of a run's history after `next_page_token` (empty: from
    /// its first event). While the run is open Temporal holds the read until
    /// events past the token exist (or its long-poll interval passes) and
    /// answers with a token to read on from; once the run is closed and read
    /// to its end, the token is empty.
    pub async fn history_page(
        &self,
        namespace: &str,
        workflow_id: &str,
        run_id: &str,
        next_page_token: Vec<u8>,
    ) -> Result<HistoryPage, ReadError> {
        let request = GetWorkflowExecutionHistoryRequest {
            namespace: namespace.to_owned(),
            execution: Some(execution(workflow_id, run_id)),
            maximum_page_size: HISTORY_PAGE,
            next_page_token,
            wait_new_event: true,
            ..Default::default()
        };
        let mut service = self.connection.workflow_service();
        let page = service.get_workflow_execution_history(request.into_request()).await.map_err(status)?.into_inner();
        Ok(HistoryPage { events: page.history.map(|h| h.events).unwrap_or_default(), next: page.next_page_token })
    }
}

/// Events of a run's history, and where to read on from (empty: the run is
/// closed and this page holds its last event).
pub struct HistoryPage {
    pub events: Vec<HistoryEvent>,
    pub next: Vec<u8>,
}

/// The list filter of every run of workflow `workflow_id`.
pub fn runs_of(workflow_id: &str) -> String {
    format!("WorkflowId = '{}'", workflow_id.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// `query` narrowed to the runs started at `since` or later, so that a pass
/// lists what is new rather than every run the filter ever matched (a
/// filter with its own `ORDER BY` is listed whole).
pub fn started_since(query: &str, since: DateTime<Utc>) -> String {
    if query.to_ascii_lowercase().contains("order by") {
        return query.to_owned();
    }
    format!("({query}) AND StartTime >= '{}'", since.to_rfc3339_opts(SecondsFormat::Millis, true))
}

fn execution(workflow_id: &str, run_id: &str) -> WorkflowExecution {
    WorkflowExecution { workflow_id: workflow_id.to_owned(), run_id: run_id.to_owned() }
}

fn status(e: temporalio_client::tonic::Status) -> ReadError {
    format!("{:?}: {}", e.code(), e.message())
}

/// Temporal's name of a run's status.
fn status_name(code: i32) -> String {
    let name = WorkflowExecutionStatus::try_from(code)
        .map(|s| s.as_str_name())
        .unwrap_or("WORKFLOW_EXECUTION_STATUS_UNSPECIFIED");
    match name.trim_start_matches("WORKFLOW_EXECUTION_STATUS_") {
        "RUNNING" => "Running",
        "COMPLETED" => "Completed",
        "FAILED" => "Failed",
        "CANCELED" => "Canceled",
        "TERMINATED" => "Terminated",
        "CONTINUED_AS_NEW" => "ContinuedAsNew",
        "TIMED_OUT" => "TimedOut",
        _ => "Unknown",
    }
    .to_owned()
}

/// TLS as configured (`None`: plain, unless an API key asks for TLS).
fn tls_options(endpoint: &TemporalEndpoint) -> Result<Option<TlsOptions>, ReadError> {
    let wanted = endpoint.tls || endpoint.tls_ca_path.is_some() || endpoint.tls_cert_path.is_some();
    if !wanted {
        return Ok(None);
    }
    let read = |path: &str| std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"));
    let client = match (&endpoint.tls_cert_path, &endpoint.tls_key_path) {
        (Some(cert), Some(key)) => {
            Some(ClientTlsOptions::builder().client_cert(read(cert)?).client_private_key(read(key)?).build())
        }
        (None, None) => None,
        _ => return Err("--temporal-tls-cert-path and --temporal-tls-key-path go together".to_owned()),
    };
    let ca = endpoint.tls_ca_path.as_deref().map(read).transpose()?;
    Ok(Some(
        TlsOptions::builder()
            .maybe_server_root_ca_cert(ca)
            .maybe_domain(endpoint.tls_server_name.clone())
            .maybe_client_tls_options(client)
            .build(),
    ))
}
