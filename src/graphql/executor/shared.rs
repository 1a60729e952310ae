//! Identical queries over HTTP sharing one execution
//! ([`shared_reads`](crate::graphql::shared_reads)): a request leads one or
//! joins it, and the execution runs as one of its callers.

use std::sync::Arc;

use async_graphql::{Request, Response};
use chrono::Utc;

use super::{LedgerSchema, Run, Write, Written};
use crate::auth::Principal;
use crate::graphql::loaders::{RequestLoaders, RequestTime};
use crate::graphql::shared_reads::{Key, Turn};
use crate::ledger::LedgerError;

impl LedgerSchema {
    /// A query's answer from the execution it shares with its twins under
    /// `key`, `who` among its callers.
    pub(super) async fn shared(
        &self,
        request: Request,
        run: &Run,
        span: tracing::Span,
        key: Key,
        who: Principal,
        write: Write,
    ) -> Arc<Written> {
        let panicked = || {
            let err = async_graphql::Error::from(LedgerError::internal("a shared read's execution panicked"));
            Arc::new(Written::new(Response::from_errors(vec![err.into_server_error(Default::default())]), write))
        };
        let work = {
            let (this, run, span) = (self.clone(), run.clone(), span.clone());
            move |members: Vec<Principal>| this.run_as(request, run, span, members, write)
        };
        match self.0.reads.enter(key.clone(), who.clone(), work) {
            Turn::Leads(outcome) => outcome.await.unwrap_or_else(panicked),
            Turn::Joins(outcome, work) => {
                self.0.ledger.metrics().shared_reads.inc();
                // The execution authenticates the caller it runs as; a
                // request that joins it has its own token checked meanwhile,
                // in one statement, so a revocation refuses it too.
                let (outcome, live) = tokio::join!(outcome, self.0.ledger.still_live(&who));
                if let Err(err) = live {
                    let err = async_graphql::Error::from(err).into_server_error(Default::default());
                    let answer = Arc::new(Written::new(Response::from_errors(vec![err]), write));
                    run.root.finish(&span, &answer.response);
                    return answer;
                }
                let answer = match outcome {
                    Some(shared) if shared.response.errors.is_empty() => shared,
                    // The error may be the running caller's own (its turn
                    // for a fleet-wide read): the twins that waited for it
                    // go once more through the gate (one execution more,
                    // not one each), then take what comes.
                    _ => match self.0.reads.enter(key, who, work) {
                        Turn::Leads(outcome) | Turn::Joins(outcome, _) => outcome.await.unwrap_or_else(panicked),
                    },
                };
                run.root.finish(&span, &answer.response);
                answer
            }
        }
    }

    /// Executes a checked query as one of `members` whose token has its
    /// turn for a fleet-wide read free (they are callers of one fleet and
    /// permissions, whose answers are the same), else as its own caller;
    /// its clock starts now, with the execution, after its twins arrived.
    async fn run_as(
        self,
        request: Request,
        run: Run,
        span: tracing::Span,
        members: Vec<Principal>,
        write: Write,
    ) -> Written {
        let own = run.who.as_ref().map(|who| who.token_id);
        let free = members.into_iter().find(|who| self.0.ledger.scan_turn_free(who));
        let mut request = request.data(RequestTime(Utc::now()));
        if let Some(who) = free.filter(|who| Some(who.token_id) != own) {
            let loaders = RequestLoaders::new(&self.0.ledger, &who, false);
            request = request.data(loaders).data(who);
        }
        Written::new(self.run(request, &run, span).await, write)
    }
}
