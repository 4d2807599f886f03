//! `unsafe` only at the C boundary: every `unsafe fn` of the crate carries a `# Safety`
//! section (clippy checks the blocks' `// SAFETY:` lines), and only the modules that take the
//! caller's raw pointers or load nvJitLink contain `unsafe` at all.

use std::fs;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The doc, comment and attribute lines right above line `i`.
fn above(lines: &[&str], i: usize) -> String {
    lines[..i]
        .iter()
        .rev()
        .map(|l| l.trim_start())
        .take_while(|t| t.starts_with("//") || t.starts_with("#["))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn unsafe_stays_at_the_boundary_and_says_why() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let boundary = ["api/", "jit.rs", "lib.rs"];
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(f).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            let code = l.split("//").next().unwrap_or("");
            if !code.contains("unsafe") {
                continue;
            }
            if !boundary.iter().any(|b| rel.starts_with(b)) {
                bad.push(format!("{rel}:{}: unsafe outside the C boundary", i + 1));
            }
            if code.contains("unsafe fn ") || code.contains("unsafe extern \"C\" fn ") {
                let why = above(&lines, i);
                if !why.contains("# Safety") {
                    bad.push(format!(
                        "{rel}:{}: no # Safety section: {}",
                        i + 1,
                        l.trim()
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
