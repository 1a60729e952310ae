//! The writer: real ledger operations (the library's `Ledger`, as the server
//! runs them, notifying after commit), paced over all fleets at `rate` events
//! per second. Each fleet repeats one cycle of ten events, each fleet's
//! operations in order:
//!
//! | unit | operations (one event each) | feeds |
//! | --- | --- | --- |
//! | A | register, claim, start, block (a question opens) | `blockingQuestionOpened` |
//! | B | register, claim, then its lease is moved into the past | `unitStalled` (a server's sweeper appends `stalled`) |
//! | C | register, claim, release | |
//!
//! Moving B's lease stands for time passing (the shortest lease is 30 s); it
//! is one UPDATE of `lease_expires_at`, as a heartbeat's, with no event of
//! its own: the `stalled` event is the sweeper's, and it takes that tick's
//! place in the rate.

use std::collections::HashMap;
use std::time::Instant;

use sea_orm::{ConnectionTrait, DatabaseConnection};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use uuid::Uuid;
use work_ledger::auth::Principal;
use work_ledger::db::entities::WorkState;
use work_ledger::db::stmt;
use work_ledger::ledger::{Ledger, RegisterUnit, Release};

use super::support::AnyError;

/// When the writer saw each of its events committed: (unit, event type).
pub type Commits = HashMap<(Uuid, String), Instant>;

pub struct FleetWriter {
    pub ledger: Ledger,
    /// Moves leases (as the bench's owner login).
    pub owner: DatabaseConnection,
    pub who: Principal,
}

/// A failed operation is tried again this many times, 250 ms apart, with
/// the same idempotency key (a write that did happen is answered from it):
/// the servers' reconnect storm can keep the database busy for a while.
const TRIES: usize = 20;

impl FleetWriter {
    /// One operation per tick until the ticks end (the queued ones done); an
    /// operation that keeps failing ends the bench (its message says which).
    pub async fn run(self, mut ticks: mpsc::UnboundedReceiver<()>) -> Result<Commits, AnyError> {
        let mut commits = Commits::new();
        let mut units = [Uuid::nil(); 3];
        let mut step = 0usize;
        while ticks.recv().await.is_some() {
            let mut tries = 0;
            let done = loop {
                match self.step(step, &mut units).await {
                    Ok(done) => break done,
                    Err(err) if tries + 1 >= TRIES => return Err(format!("{}: {err}", self.who.fleet).into()),
                    Err(_) => tries += 1,
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
            };
            if let Some((unit, event)) = done {
                commits.insert((unit, event.to_owned()), Instant::now());
            }
            step += 1;
        }
        Ok(commits)
    }

    /// Operation `step` of the fleet's cycles; the event it committed.
    async fn step(&self, step: usize, units: &mut [Uuid; 3]) -> Result<Option<(Uuid, &'static str)>, AnyError> {
        let cycle = step / 10;
        let key = Some(format!("bench-{step}"));
        let agent = |unit: &str| self.agent(&format!("agent-{cycle}-{unit}"));
        let [a, b, c] = *units;
        Ok(match step % 10 {
            0 => {
                self.mint_agents(cycle).await?;
                units[0] = self.register(&format!("c{cycle}-a")).await?;
                Some((units[0], "registered"))
            }
            1 => self.claim(&agent("a"), a, key).await?,
            2 => {
                let holder = agent("a");
                let started = self.ledger.transition(&holder, a, WorkState::InProgress, None, None, key);
                started.await.map_err(|e| format!("start: {e}"))?;
                Some((a, "transitioned"))
            }
            3 => {
                let question = format!("bench question {cycle} of {}: which schema?", self.who.fleet);
                let holder = agent("a");
                let blocked = self.ledger.block(&holder, a, question, None, None, key);
                blocked.await.map_err(|e| format!("block: {e}"))?;
                Some((a, "blocked"))
            }
            4 => {
                units[1] = self.register(&format!("c{cycle}-b")).await?;
                Some((units[1], "registered"))
            }
            5 => self.claim(&agent("b"), b, key).await?,
            6 => {
                let moved = stmt(
                    "UPDATE work_units SET lease_expires_at = now() - interval '1 second' WHERE id = $1",
                    [b.into()],
                );
                self.owner.execute_raw(moved).await.map_err(|e| format!("moving a lease: {e}"))?;
                None
            }
            7 => {
                units[2] = self.register(&format!("c{cycle}-c")).await?;
                Some((units[2], "registered"))
            }
            8 => self.claim(&agent("c"), c, key).await?,
            _ => {
                let release = Release { unit_id: c, attempt_id: None, reason: None, outcome: None };
                self.ledger.release(&agent("c"), release, key).await.map_err(|e| format!("release: {e}"))?;
                Some((c, "released"))
            }
        })
    }

    /// Agent `name` of the writer's fleet: an agent holds one unit at a time,
    /// and each unit here has an agent of its own, acting as its own token
    /// (every write acts as a token, SPEC §8), minted by [`Self::mint_agents`].
    fn agent(&self, name: &str) -> Principal {
        let token_hash = Sha256::digest(format!("{}:{name}", self.who.fleet)).into();
        Principal { name: name.to_owned(), token_hash, ..self.who.clone() }
    }

    /// The tokens of cycle `cycle`'s three agents, in one statement (not an
    /// event: the rate counts the ledger's).
    async fn mint_agents(&self, cycle: usize) -> Result<(), AnyError> {
        self.owner
            .execute_raw(stmt(
                "INSERT INTO api_tokens (fleet, name, permissions, token_hash)
                 SELECT $1, n, ARRAY['ledger:read', 'units:claim'], sha256(convert_to($1 || ':' || n, 'UTF8'))
                   FROM unnest(ARRAY['a', 'b', 'c']) u, LATERAL (SELECT 'agent-' || $2 || '-' || u) AS x(n)
                 ON CONFLICT (token_hash) DO NOTHING",
                [self.who.fleet.as_str().into(), (cycle as i64).into()],
            ))
            .await
            .map_err(|e| format!("minting cycle {cycle}'s agents: {e}"))?;
        Ok(())
    }

    async fn claim(
        &self,
        agent: &Principal,
        unit: Uuid,
        key: Option<String>,
    ) -> Result<Option<(Uuid, &'static str)>, AnyError> {
        self.ledger.claim_unit(agent, unit, Some(900), key).await.map_err(|e| format!("claim: {e}"))?;
        Ok(Some((unit, "claimed")))
    }

    /// Registering an external ref again answers the unit it registered.
    async fn register(&self, external_ref: &str) -> Result<Uuid, AnyError> {
        let unit = RegisterUnit { external_ref: external_ref.to_owned(), domain: None, workflow_id: None };
        let units = self.ledger.register_units(&self.who, vec![unit]).await.map_err(|e| format!("register: {e}"))?;
        Ok(units.first().ok_or("register answered no unit")?.id)
    }
}
