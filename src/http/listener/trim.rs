//! Memory a flood's connections took, handed back to the system once the
//! flood is over (`malloc_trim` on glibc; its arenas otherwise keep the
//! peak for good).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::places::Places;

/// Hands the allocator's free memory back to the system a few seconds
/// after the open connections fell well below their peak (glibc keeps it
/// otherwise: after a flood of 20,000 idle sockets the process stayed at
/// 600 MB).
///
/// The peak is the most connections open since the last trim, not since the
/// last tick: a flood whose clients go away slowly ebbs over several ticks,
/// and no single tick would see it fall far.
pub(super) async fn trim_after_floods(places: Arc<Places>, cap: usize, stop: CancellationToken) {
    const TICK: Duration = Duration::from_secs(5);
    // Below this many connections of difference, what there is to give back
    // is not worth a trim: 35-60 KB each once a flood is over, so at most a
    // few MB are kept.
    let worth = (cap / 8).clamp(16, 64);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(TICK) => {}
        }
        let now = places.open();
        let fell =
            places.peak.fetch_update(Ordering::AcqRel, Ordering::Acquire, |peak| (peak >= now + worth).then_some(now));
        if fell.is_ok() {
            let _ = tokio::task::spawn_blocking(release_free_memory).await;
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_memory() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    let released = unsafe { libc::malloc_trim(0) };
    tracing::debug!(released, "returned free memory to the system after a connection flood");
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_memory() {}
