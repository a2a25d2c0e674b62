//! The api's layers, checked on its source. From the bottom: the context; request cells, which
//! know the worker only as a `Completer`; the worker, which drives the engine and runs user
//! handlers; and on top the endpoint and listener modules, which add the application's
//! operations to the handles the worker builds. Each names nothing of the layers above it, so
//! imports go one way: a change to the user-facing layer cannot reach into progress, and each
//! layer can be read (and tested) without those above.

use std::path::{Path, PathBuf};

/// Each layer below the top, as the source files it is made of (a folder is all of its files),
/// with the modules above it.
const LAYERS: [(&str, &[&str]); 3] = [
    ("context.rs", &["request", "worker", "endpoint", "listener"]),
    ("request.rs", &["worker", "endpoint", "listener"]),
    ("worker", &["endpoint", "listener"]),
];

/// The worker's modules built only for tests (declared under `#[cfg(test)]` in `mod.rs`): like
/// tests, they may use the public API.
const TEST_ONLY: [&str; 2] = ["test_pair", "layering"];

/// Every `.rs` file at `path`: the file itself, or those under the folder, recursively.
fn sources(path: &Path, found: &mut Vec<PathBuf>) {
    if !path.is_dir() {
        found.push(path.to_owned());
        return;
    }
    for entry in std::fs::read_dir(path).expect("read a source directory") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() || path.extension().is_some_and(|ext| ext == "rs") {
            sources(&path, found);
        }
    }
}

/// The files of a layer (see [`LAYERS`]) with their text.
fn layer_sources(layer: &str) -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(layer), &mut paths);
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
    let sources = layer_sources("worker");
    assert!(sources.len() > 10, "found only {} files under src/worker", sources.len());
    for (path, source) in sources {
        for module in ["endpoint", "listener"] {
            let needle = format!("crate::{module}");
            assert!(!source.contains(&needle), "{} mentions {needle}", path.display());
        }
    }
}

/// No layer's code reaches a layer above it: by the module's path, through a `use crate::{...}`
/// group, or through the crate root's re-exports of its items (`crate::EpParams`). Tests, and
/// the modules built only for them, may.
#[test]
fn no_layer_reaches_a_layer_above_it() {
    let modules = include_str!("mod.rs");
    for module in TEST_ONLY {
        let gated =
            [format!("#[cfg(test)]\nmod {module};"), format!("#[cfg(test)]\npub(crate) mod {module};")];
        assert!(gated.iter().any(|decl| modules.contains(decl.as_str())), "{module} is not test-only");
    }
    for (layer, above) in LAYERS {
        let mut forbidden: Vec<String> = above.iter().map(|module| module.to_string()).collect();
        for module in above {
            forbidden.extend(root_exports_of(module));
        }
        for (path, source) in layer_sources(layer) {
            if TEST_ONLY.iter().any(|module| path.ends_with(format!("{module}.rs"))) {
                continue;
            }
            for root in crate_roots(&non_test_code(&source)) {
                assert!(!forbidden.contains(&root), "{} reaches crate::{root}", path.display());
            }
        }
    }
}

/// The checks above see what they look for: grouped and plain paths, the root's lists, and
/// where a file's tests begin.
#[test]
fn the_layering_checks_see_grouped_paths_and_root_exports() {
    // Spelled with arguments: this file must pass the check that no worker file names them.
    let code = format!(
        "use crate::{{status::Status, {e}::{{A, B}}}};\nlet x = crate::{l}::f(crate::EpParams);",
        e = "endpoint",
        l = "listener"
    );
    assert_eq!(crate_roots(&code), ["status", "endpoint", "listener", "EpParams"]);
    assert!(root_exports_of("endpoint").iter().any(|name| name == "EpParams"));
    assert!(root_exports_of("listener").iter().any(|name| name == "ConnRequest"));
    assert!(root_exports_of("worker").iter().any(|name| name == "Worker"));
    let commented =
        "/// See [`crate::EpParams`].\nlet y = 1;\n#[cfg(test)]\nmod tests {\nuse crate::EpParams;";
    assert!(crate_roots(&non_test_code(commented)).is_empty());
}
