//! Lists the forward migrations, `src/sql/NNNN_<what>.sql`, in their order,
//! so that a migration is its one file: `migrations()` includes what this
//! writes. Each is recorded as `m20261207_<NNNNNN>_<what>` (the names the
//! first two were recorded under), so a migration's name follows from its
//! file name alone.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = Path::new("src/sql");
    println!("cargo:rerun-if-changed=src/sql");
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .expect("migration/src/sql")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| {
            let Some(stem) = name.strip_suffix(".sql") else { return false };
            let (number, what) = stem.split_once('_').unwrap_or_default();
            number.len() == 4 && number.bytes().all(|b| b.is_ascii_digit()) && !what.is_empty()
        })
        .collect();
    files.sort();
    let mut out = String::from("vec![\n");
    for (at, file) in files.iter().enumerate() {
        let stem = file.trim_end_matches(".sql");
        let (number, what) = stem.split_once('_').unwrap_or_default();
        let number: usize = number.parse().unwrap_or_default();
        assert_eq!(number, at + 1, "migration {file}: the files are numbered 0001, 0002, ... with no gap");
        let _ = writeln!(
            out,
            "    sql_migration!(\"m20261207_{number:06}_{what}\", include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/src/sql/{file}\"))),"
        );
    }
    out.push(']');
    let target = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("migrations.rs");
    std::fs::write(target, out).expect("write migrations.rs");
}
