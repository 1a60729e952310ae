/// mimalloc: the request path allocates and frees small objects on every
/// worker thread, where glibc's allocator spent about 15% of the HTTP floor's
/// time and made workers wait on its locks (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    // Held to the end: dropping it flushes the spans still queued for export.
    let telemetry = work_ledger::telemetry::init(work_ledger::cli::one_shot());
    let code = match work_ledger::cli::run().await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            std::process::ExitCode::FAILURE
        }
    };
    // The flush blocks: off the runtime's workers (the exporter sends on them).
    let _ = tokio::task::spawn_blocking(move || drop(telemetry)).await;
    code
}
