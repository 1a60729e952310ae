//! The house (issue 56): the dependencies between `src/`'s top-level
//! modules point one way, and no file there passes 400 lines. Read from the
//! source itself, so a change that breaks either fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file of `src/` belongs to (`src/db/units.rs` -> `db`).
fn module_of(path: &Path) -> String {
    let relative = path.strip_prefix(src()).unwrap_or(path);
    let first = relative.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned()).unwrap_or_default();
    first.trim_end_matches(".rs").to_owned()
}

/// The code of a file without its comments and its test module (tests
/// may reach anywhere). A comment starts at `//` at the start of a line or
/// after white space, so a URL in a string stays code.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    let strip = |line: &str| -> String {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            return String::new();
        }
        match line.find(" //") {
            Some(at) => line[..at].to_owned(),
            None => line.to_owned(),
        }
    };
    text.lines().map(strip).collect::<Vec<_>>().join("\n")
}

fn ident(text: &str) -> String {
    text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The top-level modules `text` names as `crate::<module>`, also in a
/// group (`use crate::{db, ledger::Ledger}`).
fn uses(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            found.extend(inner.split(',').map(|item| ident(item.trim())).filter(|name| !name.is_empty()));
            continue;
        }
        let name = ident(rest);
        if !name.is_empty() {
            found.insert(name);
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    assert!(files.len() > 50, "the sources were not found under {}", src().display());
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(&file);
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let targets: Vec<String> = uses(&code(&text)).into_iter().filter(|target| *target != module).collect();
        graph.entry(module).or_default().extend(targets);
    }
    graph
}

/// A path from `from` back to `to`, if there is one.
fn path(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_owned()]];
    while let Some(trail) = stack.pop() {
        let last = trail.last().cloned().unwrap_or_default();
        if last == to {
            return Some(trail);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in graph.get(&last).into_iter().flatten() {
            let mut longer = trail.clone();
            longer.push(next.clone());
            stack.push(longer);
        }
    }
    None
}

#[test]
fn no_import_circle_between_top_level_modules() {
    let graph = graph();
    let mut circles = Vec::new();
    for (module, targets) in &graph {
        for target in targets {
            if let Some(back) = path(&graph, target, module) {
                circles.push(format!("{module} -> {}", back.join(" -> ")));
            }
        }
    }
    assert!(circles.is_empty(), "import circles between src/'s modules:\n{}", circles.join("\n"));
}

#[test]
fn the_reader_sees_a_circle_when_there_is_one() {
    // The parser above, on a made-up pair of modules that name each other.
    assert_eq!(uses(&code("use crate::db::units; // crate::ledger\nlet x = crate::auth::f();")).len(), 2);
    let grouped = uses(&code("use crate::{http::serve, live};\nlet u = \"http://x\"; crate::mcp::f();"));
    assert_eq!(grouped, BTreeSet::from(["http".to_owned(), "live".to_owned(), "mcp".to_owned()]));
    let mut graph = BTreeMap::new();
    graph.insert("a".to_owned(), BTreeSet::from(["b".to_owned()]));
    graph.insert("b".to_owned(), BTreeSet::from(["a".to_owned()]));
    assert_eq!(path(&graph, "b", "a"), Some(vec!["b".to_owned(), "a".to_owned()]));
}

#[test]
fn no_file_in_src_passes_400_lines() {
    let mut files = Vec::new();
    sources(&src(), &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).unwrap_or_default().lines().count();
            (lines > 400).then(|| format!("{} ({lines} lines)", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over 400 lines: {long:?}");
}
