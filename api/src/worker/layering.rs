//! The worker's place in the crate's layers, checked on its source: the worker sits below the
//! endpoint and listener modules, which add the application's operations to what it builds and
//! run on top of it, and it names nothing of theirs. Imports go one way, so a change to the
//! user-facing layer cannot reach into progress, and the worker can be read (and tested) alone.

use std::path::{Path, PathBuf};

/// The modules above the worker.
const UPPER: [&str; 2] = ["endpoint", "listener"];

/// The worker's modules built only for tests (declared under `#[cfg(test)]` in `mod.rs`): like
/// tests, they may use the public API.
const TEST_ONLY: [&str; 2] = ["test_pair", "layering"];

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read the worker's source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

fn worker_sources() -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/worker");
    let mut paths = Vec::new();
    sources(&dir, &mut paths);
    assert!(paths.len() > 10, "found only {paths:?} under {}", dir.display());
    paths.into_iter().map(|path| (path.clone(), std::fs::read_to_string(&path).expect("source"))).collect()
}

/// A file's code as built outside tests: up to its `mod tests`, comment lines left out (a doc
/// link to the user-facing API is documentation, not a dependency).
fn non_test_code(source: &str) -> String {
    let code = source.lines().take_while(|line| *line != "mod tests {");
    code.filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The first segment of every `crate::` path in `code`, looking into `crate::{...}` groups.
fn crate_roots(code: &str) -> Vec<String> {
    let mut roots = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        roots.push(first_segment(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            roots.push(first_segment(&item));
        } else {
            roots.push(first_segment(rest));
        }
    }
    roots.retain(|root| !root.is_empty());
    roots
}

fn first_segment(path: &str) -> String {
    path.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// The names the crate root re-exports from `module` (`pub use module::{...};` in `lib.rs`).
fn root_exports_of(module: &str) -> Vec<String> {
    let lib = include_str!("../lib.rs");
    let start = format!("pub use {module}::{{");
    let at = lib.find(&start).unwrap_or_else(|| panic!("lib.rs has no `{start}`"));
    let list = &lib[at + start.len()..];
    let list = &list[..list.find('}').expect("the list closes")];
    list.split(',').map(|name| name.trim().to_owned()).filter(|name| !name.is_empty()).collect()
}

/// No file under `src/worker` mentions the endpoint or listener module by its path, in code or
/// in a comment.
#[test]
fn the_worker_names_no_endpoint_or_listener_module() {
    for (path, source) in worker_sources() {
        for module in UPPER {
            let needle = format!("crate::{module}");
            assert!(!source.contains(&needle), "{} mentions {needle}", path.display());
        }
    }
}

/// Nor does the worker's code reach them another way: through a `use crate::{...}` group, or
/// through the crate root's re-exports of their items (`crate::EpParams`). Tests, and the
/// modules built only for them, may.
#[test]
fn the_worker_reaches_no_endpoint_or_listener_item_through_the_crate_root() {
    let modules = include_str!("mod.rs");
    for module in TEST_ONLY {
        let gated =
            [format!("#[cfg(test)]\nmod {module};"), format!("#[cfg(test)]\npub(crate) mod {module};")];
        assert!(gated.iter().any(|decl| modules.contains(decl.as_str())), "{module} is not test-only");
    }
    let mut forbidden: Vec<String> = UPPER.iter().map(|module| module.to_string()).collect();
    for module in UPPER {
        forbidden.extend(root_exports_of(module));
    }
    for (path, source) in worker_sources() {
        if TEST_ONLY.iter().any(|module| path.ends_with(format!("{module}.rs"))) {
            continue;
        }
        for root in crate_roots(&non_test_code(&source)) {
            assert!(!forbidden.contains(&root), "{} reaches crate::{root}", path.display());
        }
    }
}

/// The checks above see what they look for: grouped and plain paths, and the root's list.
#[test]
fn the_layering_checks_see_grouped_paths_and_root_exports() {
    let code = format!(
        "use crate::{{status::Status, {}::{{A, B}}}};\nlet x = crate::{}::f(crate::EpParams);",
        UPPER[0], UPPER[1]
    );
    assert_eq!(crate_roots(&code), ["status", UPPER[0], UPPER[1], "EpParams"]);
    assert!(root_exports_of(UPPER[0]).iter().any(|name| name == "EpParams"));
    assert!(root_exports_of(UPPER[1]).iter().any(|name| name == "ConnRequest"));
    let commented =
        "/// See [`crate::EpParams`].\nlet y = 1;\n#[cfg(test)]\nmod tests {\nuse crate::EpParams;";
    assert!(crate_roots(&non_test_code(commented)).is_empty());
}
