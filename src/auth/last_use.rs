//! Tokens' last use, recorded off the requests' path.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sea_orm::DatabaseConnection;
use uuid::Uuid;

use crate::db;

/// Records tokens' last use (`api_tokens.last_used_at`) off the requests'
/// path: a call that is due (the lookup found the last record older than a
/// minute) is queued and nobody waits for it, and the process sends at
/// most one a minute per token (a burst of requests of one token would
/// otherwise each send one before the first commits). One sender at a time
/// writes everything queued in one statement, so that a thousand tokens
/// connecting at once (a fleet's reconnect) cost a few commits, not a
/// thousand. The database keeps it to one write a minute across replicas
/// (`ledger_token_touch`). One per [`crate::ledger::Ledger`].
#[derive(Debug, Default)]
pub struct LastUse {
    /// When this process last sent a token's record.
    sent: Arc<Mutex<HashMap<Uuid, Instant>>>,
    /// Records due and not sent yet, and whether a sender is running.
    queue: Arc<Mutex<Queued>>,
}

#[derive(Debug, Default)]
struct Queued {
    due: Vec<Uuid>,
    sending: bool,
}

impl LastUse {
    /// A token's use is recorded at most this often.
    const EVERY: Duration = Duration::from_secs(60);
    /// Tokens remembered before the ones sent over a minute ago are forgotten.
    const REMEMBERED: usize = 4096;
    /// Records per statement.
    const BATCH: usize = 1000;

    /// Records a use of `token` in the background, unless this process did
    /// within the minute. A failure is logged: it costs only the record.
    pub fn record(&self, db: &DatabaseConnection, token: Uuid) {
        if !self.admit(token, Instant::now()) {
            return;
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        queue.due.push(token);
        if std::mem::replace(&mut queue.sending, true) {
            return;
        }
        drop(queue);
        let (db, sent, queue) = (db.clone(), self.sent.clone(), self.queue.clone());
        tokio::spawn(async move {
            loop {
                let due: Vec<Uuid> = {
                    let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
                    if queue.due.is_empty() {
                        queue.sending = false;
                        return;
                    }
                    let n = queue.due.len().min(Self::BATCH);
                    queue.due.drain(..n).collect()
                };
                match db::tokens::touch_all(&db, due).await {
                    // A busy row: the next request of that token tries again.
                    Ok(touched) => {
                        let mut sent = sent.lock().unwrap_or_else(|e| e.into_inner());
                        touched.iter().filter(|(_, t)| t.is_none()).for_each(|(id, _)| _ = sent.remove(id));
                    }
                    Err(err) => tracing::warn!(error = %err, "cannot record the tokens' last use"),
                }
            }
        });
    }

    fn admit(&self, token: Uuid, now: Instant) -> bool {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let recent = |at: &Instant| now.duration_since(*at) < Self::EVERY;
        if sent.get(&token).is_some_and(recent) {
            return false;
        }
        if sent.len() >= Self::REMEMBERED {
            sent.retain(|_, at| recent(at));
        }
        sent.insert(token, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_s_last_use_is_sent_at_most_once_a_minute() {
        let last_use = LastUse::default();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let start = Instant::now();
        assert!(last_use.admit(a, start));
        assert!(!last_use.admit(a, start + Duration::from_secs(59)), "a burst sends one");
        assert!(last_use.admit(b, start + Duration::from_secs(1)), "each token its own");
        assert!(last_use.admit(a, start + LastUse::EVERY), "and again after the minute");
    }
}
