//! The Rust side of every struct in the bindings has the size and field offsets the C compiler
//! gives the installed `ucp.h`: a C probe is compiled against the header and its `sizeof` and
//! `offsetof` for each struct and field are compared with the values bindgen recorded (which the
//! bindings assert about the Rust types at compile time). Prints `skipped:` without a C compiler
//! or without the header (`libucx-dev`).

use std::collections::BTreeMap;
use std::process::Command;

const BINDINGS: &str = include_str!("../src/bindings.rs");
const HEADER: &str = "/usr/include/ucp/api/ucp.h";

/// `(type, field)` → the offset, and `(type, "")` → the size, as the bindings record them.
fn recorded() -> BTreeMap<(String, String), usize> {
    let text: String = BINDINGS.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = BTreeMap::new();
    for piece in text.split("[\"Offsetoffield:").skip(1) {
        // `A::B"][::core::mem::offset_of!(A,B)-Nusize]`
        let (name, rest) = piece.split_once("\"]").expect("a closing quote");
        let (ty, field) = name.split_once("::").expect("type::field");
        let n = rest.split_once(")-").and_then(|(_, r)| r.split_once("usize")).expect("an offset").0;
        // Anonymous members, and the unnamed unions bindgen names `T__bindgen_ty_N`, have no C
        // name; the field that holds such a union is checked under its parent.
        if !field.starts_with("__bindgen") && !ty.contains("__bindgen_ty") {
            out.insert((ty.to_owned(), field.to_owned()), n.parse().expect("a number"));
        }
    }
    for piece in text.split("[\"Sizeof").skip(1) {
        let (ty, rest) = piece.split_once("\"]").expect("a closing quote");
        let n = rest.split_once(">()-").and_then(|(_, r)| r.split_once("usize")).expect("a size").0;
        if ty.contains("__bindgen_ty") {
            continue;
        }
        out.insert((ty.to_owned(), String::new()), n.parse().expect("a number"));
    }
    out
}

/// How C names a type bindgen named `ty`: a typedef keeps its `_t` name, a tagged struct is
/// `struct ty`.
fn c_type(ty: &str) -> String {
    if ty.ends_with("_t") {
        ty.to_owned()
    } else {
        format!("struct {ty}")
    }
}

#[test]
fn every_struct_has_the_c_compilers_size_and_offsets() {
    if !std::path::Path::new(HEADER).exists() {
        println!("skipped: no {HEADER} (apt-get install libucx-dev)");
        return;
    }
    let expected = recorded();
    let structs = expected.keys().filter(|(_, f)| f.is_empty()).count();
    assert!(structs >= 30, "only {structs} structs found in the bindings");
    let mut probe =
        String::from("#include <stddef.h>\n#include <stdio.h>\n#include <ucp/api/ucp.h>\nint main(void) {\n");
    for (ty, field) in expected.keys() {
        let c = c_type(ty);
        if field.is_empty() {
            probe += &format!("    printf(\"{ty} %zu\\n\", sizeof({c}));\n");
        } else {
            probe += &format!("    printf(\"{ty} {field} %zu\\n\", offsetof({c}, {field}));\n");
        }
    }
    probe += "    return 0;\n}\n";
    let dir = std::env::temp_dir().join(format!("zcx-capi-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (source, binary) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&source, probe).unwrap();
    let compiled = match Command::new("cc").arg("-o").arg(&binary).arg(&source).output() {
        Ok(out) => out,
        Err(e) => {
            println!("skipped: no C compiler ({e})");
            return;
        }
    };
    assert!(
        compiled.status.success(),
        "the probe did not compile: {}",
        String::from_utf8_lossy(&compiled.stderr)
    );
    let out = Command::new(&binary).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut checked = 0;
    for line in text.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let (key, value) = match words[..] {
            [ty, size] => ((ty.to_owned(), String::new()), size),
            [ty, field, offset] => ((ty.to_owned(), field.to_owned()), offset),
            _ => panic!("probe line {line:?}"),
        };
        let c: usize = value.parse().unwrap();
        assert_eq!(expected[&key], c, "{key:?}: the bindings say {}, the C compiler {c}", expected[&key]);
        checked += 1;
    }
    assert_eq!(checked, expected.len(), "every recorded size and offset was probed");
    println!("{structs} structs, {checked} sizes and offsets agree with the C compiler");
}
