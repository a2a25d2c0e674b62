//! What the tests that run UCX programs on zcx's `libucp.so.0` share: where the library is, how to
//! run a program on it, and the check that the process really loaded it.
//!
//! `ZCX_CAPI_LIBDIR` names the directory to put first on `LD_LIBRARY_PATH`
//! (`scripts/capi/build.sh` prints it). Without it, the tests use the library cargo built beside
//! them (`target/<profile>/libucp.so`), through a directory of their own holding the SONAME link.
//! Pointing `ZCX_CAPI_LIBDIR` at UCX's own library directory runs the same tests on UCX, which is
//! how a harness is checked before zcx's library can pass it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory whose `libucp.so.0` the programs must load.
pub fn libdir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("ZCX_CAPI_LIBDIR").filter(|d| !d.is_empty()) {
            return PathBuf::from(dir);
        }
        // target/<profile>/deps/<test> → target/<profile>/libucp.so
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
        let built = profile_dir.join("libucp.so");
        ensure_built(profile_dir, &built);
        let dir = profile_dir.join("capi-libdir");
        std::fs::create_dir_all(&dir).expect("create the library directory");
        let link = dir.join("libucp.so.0");
        // Replace rather than keep: another test process may be creating the same link now.
        let tmp = dir.join(format!("libucp.so.0.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&built, &tmp).expect("link libucp.so.0");
        std::fs::rename(&tmp, &link).expect("install the link");
        dir
    })
    .clone()
}

/// Builds the shared library when the test was built without it (cargo builds a library's
/// `cdylib` only when something asks for it), in the test's own profile and target directory.
fn ensure_built(profile_dir: &Path, built: &Path) {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let target_dir = profile_dir.parent().expect("target/");
        let profile = profile_dir.file_name().and_then(|n| n.to_str()).expect("a profile name");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "zcx-capi", "--lib", "--quiet"]).arg("--target-dir").arg(target_dir);
        if profile == "release" {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo to build libucp.so");
        assert!(status.success(), "building libucp.so failed");
    });
    assert!(built.exists(), "{} is missing after building it", built.display());
}

/// `program` set up to load `libucp.so.0` from [`libdir`] first.
pub fn command_on_lib(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    let dir = libdir();
    let path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(rest) if !rest.is_empty() => {
            let mut joined = dir.into_os_string();
            joined.push(":");
            joined.push(rest);
            joined
        }
        _ => dir.into_os_string(),
    };
    command.env("LD_LIBRARY_PATH", path);
    command
}

/// The files named `libucp.so*` that process `pid` has mapped, resolved to their real paths.
pub fn mapped_libucp(pid: u32) -> Vec<PathBuf> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let mut found: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter(|path| {
            Path::new(path).file_name().is_some_and(|n| n.to_string_lossy().starts_with("libucp.so"))
        })
        .map(|path| std::fs::canonicalize(path).unwrap_or_else(|_| PathBuf::from(path)))
        .collect();
    found.sort();
    found.dedup();
    found
}

/// Panics unless the only `libucp` process `pid` has mapped is [`libdir`]'s.
pub fn assert_loads_libdir(pid: u32) {
    assert_maps_libdir(pid, &mapped_libucp(pid));
}

/// Panics unless `mapped` (what [`mapped_libucp`] read of process `pid`) is exactly [`libdir`]'s
/// `libucp`: for a caller that already read the maps of a process that may exit any moment,
/// whose maps a second read could find empty.
pub fn assert_maps_libdir(pid: u32, mapped: &[PathBuf]) {
    let expected = std::fs::canonicalize(libdir().join("libucp.so.0")).expect("libucp.so.0 in the libdir");
    assert_eq!(mapped, [expected], "process {pid} must map exactly the libucp under test");
}

/// Whether `program` exists; prints the `skipped:` line when it does not.
pub fn have(program: &str, test: &str) -> bool {
    let found = Path::new(program).exists()
        || std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).exists()));
    if !found {
        println!("skipped: {test}: {program} is not installed");
    }
    found
}
