//! One rule for tests that need something the machine may lack (Chromium,
//! Node.js, Prometheus, `pg_autoctl`, a PostgreSQL backend on this host):
//! with `CI` set (`.ci/run` exports `CI=true`) a missing prerequisite fails
//! the test; otherwise the test is skipped, and says so where `cargo test`
//! shows it, not in the captured output that a passing test throws away.
//!
//! A skip writes one `SKIPPED` line to the process's stderr at once (libtest
//! captures only the `print!`/`eprint!` macros, not writes to the stderr
//! handle) and a summary of every skip after libtest's own `test result:`
//! line, when the test process exits.

use std::io::Write;
use std::sync::{Mutex, Once};

/// Whether this run is CI: `CI` set to anything but empty, `false` or `0`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

static SKIPPED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static SUMMARY: Once = Once::new();

/// Fails the calling test in CI; elsewhere records and shows the skip. The
/// caller returns right after: `if cannot { skip("why"); return; }`.
pub fn skip(why: &str) {
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    assert!(!in_ci(), "{test}: {why} (CI is set, so this fails instead of skipping; .ci/run installs it)");
    let line = format!("{test}: {why}");
    let _ = writeln!(std::io::stderr(), "SKIPPED {line}");
    SKIPPED.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    SUMMARY.call_once(|| {
        let _ = atexit(summary);
    });
}

unsafe extern "C" {
    /// The C library's exit hook: libtest ends the process with `exit` (or
    /// by returning from `main`), which runs it after the `test result:` line.
    safe fn atexit(hook: extern "C" fn()) -> std::ffi::c_int;
}

extern "C" fn summary() {
    let skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = format!("\n{} test(s) SKIPPED (they passed without running; CI would fail them):\n", skipped.len());
    for line in skipped.iter() {
        out.push_str(&format!("  {line}\n"));
    }
    let _ = std::io::stderr().write_all(out.as_bytes());
}
