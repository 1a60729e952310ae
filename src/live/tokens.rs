//! The tokens of open WebSocket connections: counted per token, checked
//! again on every revocation notice and after a reconnect, and a
//! subscription's own check before it sends anything.

use std::collections::HashMap;
use std::sync::Arc;

use async_graphql::dataloader::Loader;
use sea_orm::{DatabaseConnection, DbErr};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::{Live, unshare};
use crate::db;
use crate::ledger::LedgerError;

/// Which of many tokens no longer work, in one statement on the live pool:
/// a reconnect storm of 10,000 subscriptions asks a few times, not 10,000.
/// No cache: each batch is read after every check in it was asked.
pub(super) struct TokenChecks(pub(super) DatabaseConnection);

impl Loader<Uuid> for TokenChecks {
    type Value = db::tokens::Dead;
    type Error = Arc<DbErr>;

    async fn load(&self, keys: &[Uuid]) -> Result<HashMap<Uuid, Self::Value>, Self::Error> {
        Ok(db::tokens::dead_among(&self.0, keys.to_vec()).await.map_err(Arc::new)?.into_iter().collect())
    }
}

impl Live {
    /// Ids of tokens revoked from now on (the `work_ledger_tokens` channel).
    pub fn revocations(&self) -> broadcast::Receiver<Uuid> {
        self.0.revoked.subscribe()
    }

    pub(super) fn token_revoked(&self, token: Uuid) {
        let _ = self.0.revoked.send(token);
    }

    /// Some token was revoked (the notice says not which, nor of what
    /// fleet): check the open connections' tokens.
    pub(super) fn recheck_tokens(&self) {
        self.0.known_tokens.forget_all();
        self.0.token_check.notify_one();
    }

    pub(super) async fn check_tokens_on_notice(&self) {
        loop {
            tokio::select! {
                _ = self.stopping() => return,
                _ = self.0.token_check.notified() => self.check_tokens().await,
            }
        }
    }

    /// Why `token` no longer works, asked now (`None`: it does): a
    /// subscription asks once its tail has its starting point, before it
    /// sends anything, so that a revocation takes effect on the next request
    /// (SPEC §8) and not only when its notice arrives.
    /// Checks asked at once share one statement.
    pub async fn token_dead(&self, token: Uuid) -> Result<Option<db::tokens::Dead>, LedgerError> {
        Ok(self.0.token_checks.load_one(token).await.map_err(unshare)?)
    }
    /// Closes the connections of every tracked token that was revoked,
    /// deleted or expired (an expired one's connections close on their own
    /// timers; this catches any left).
    pub(super) async fn check_tokens(&self) {
        let tokens: Vec<Uuid> = self.0.tokens.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().collect();
        if tokens.is_empty() {
            return;
        }
        match db::tokens::dead_among(&self.0.db, tokens).await {
            Ok(dead) => dead.into_iter().for_each(|(t, _)| self.token_revoked(t)),
            Err(err) => tracing::warn!(error = %err, "cannot re-check the tokens of open subscriptions"),
        }
    }

    /// Registers an open connection's token, so that after a reconnect (when
    /// revocation notices may have been lost) it is checked again; unless the
    /// token already has `max` open connections (SPEC §9: WebSockets per
    /// token), checked and counted under one lock.
    pub fn try_track_token(&self, token: Uuid, max: usize) -> Option<TrackedToken> {
        let mut tokens = self.0.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let open = tokens.entry(token).or_default();
        if *open >= max {
            if *open == 0 {
                tokens.remove(&token);
            }
            return None;
        }
        *open += 1;
        Some(TrackedToken { live: self.clone(), token })
    }
}

/// A WebSocket connection's token, counted while the connection is open.
pub struct TrackedToken {
    live: Live,
    token: Uuid,
}

impl Drop for TrackedToken {
    fn drop(&mut self) {
        let mut tokens = self.live.0.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = tokens.get_mut(&self.token) {
            *n -= 1;
            if *n == 0 {
                tokens.remove(&self.token);
            }
        }
    }
}
