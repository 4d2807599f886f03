//! Every `unsafe fn`, `unsafe impl` and `unsafe trait` in this crate says why it is sound: a
//! `// SAFETY:` comment (impls, and implementations of unsafe trait methods) or a `# Safety`
//! doc section (functions and traits that put a contract on their callers) right above it.
//! Clippy checks `unsafe {}` blocks and impls (`undocumented_unsafe_blocks`); this also covers
//! unsafe trait methods that are implemented, which it does not.

use std::fs;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The comment, doc and attribute lines directly above line `i`.
fn preamble(lines: &[&str], i: usize) -> String {
    let mut above = Vec::new();
    for l in lines[..i].iter().rev() {
        let t = l.trim_start();
        if t.starts_with("//") || t.starts_with("#[") {
            above.push(t);
        } else {
            break;
        }
    }
    above.join("\n")
}

#[test]
fn every_unsafe_item_says_why_it_is_sound() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut missing = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if !["unsafe fn ", "unsafe impl", "unsafe trait "]
                .iter()
                .any(|p| code.contains(p))
            {
                continue;
            }
            let why = preamble(&lines, i);
            if !why.contains("SAFETY:") && !why.contains("# Safety") {
                missing.push(format!(
                    "{}:{}: {}",
                    file.strip_prefix(&src).unwrap_or(file).display(),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "unsafe items without a SAFETY: comment or # Safety section:\n{}",
        missing.join("\n")
    );
}

#[test]
fn raw_ioctl_helpers_are_unsafe_to_call() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // A pointer argument the kernel writes through: callers must promise what it points to.
    let sys = fs::read_to_string(src.join("vfio/sys.rs")).unwrap();
    assert!(
        sys.contains("unsafe fn ioctl(fd: BorrowedFd<'_>, nr: u32, arg: *mut c_void)"),
        "vfio::sys::ioctl must be an unsafe fn"
    );
    // A wrong `NoPointers` impl would let safe code hand the driver a garbage pointer.
    let nv = fs::read_to_string(src.join("nvidia/ioctl.rs")).unwrap();
    assert!(
        nv.contains("unsafe trait NoPointers"),
        "NoPointers must be an unsafe trait"
    );
    assert!(
        !nv.contains("\nimpl NoPointers"),
        "every NoPointers impl is unsafe"
    );
}
