//! docs/assumptions.md names every site where the simulator answers an unknown, and every
//! row of it has its evidence.
#![forbid(unsafe_code)]

use std::path::Path;

const DOC: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/assumptions.md"
));

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push((
                p.display().to_string(),
                std::fs::read_to_string(&p).unwrap(),
            ));
        }
    }
}

/// The string or `unknown::NAME` right after each `.hard(` / `.pick(` call.
fn sites(src: &str) -> Vec<String> {
    let mut v = Vec::new();
    for call in [".hard(", ".pick("] {
        for (i, _) in src.match_indices(call) {
            let rest = src[i + call.len()..].trim_start();
            if let Some(r) = rest.strip_prefix('"') {
                v.push(r[..r.find('"').unwrap()].to_string());
            } else if let Some(r) = rest.strip_prefix("unknown::") {
                let end = r
                    .find(|c: char| !(c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
                    .unwrap();
                v.push(r[..end].to_string());
            }
        }
    }
    v
}

#[test]
fn every_unknown_site_is_documented() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/src"),
        &mut files,
    );
    let doc = DOC;
    let mut n = 0;
    for (path, src) in &files {
        if path.ends_with("unknowns.rs") {
            continue;
        }
        for site in sites(src) {
            n += 1;
            assert!(
                doc.contains(&format!("`{site}`")) || doc.contains(&format!("`unknown::{site}`")),
                "{path}: unknown site `{site}` has no row in docs/assumptions.md"
            );
        }
    }
    assert!(n >= 10, "found only {n} sites: the scan is broken");
}

#[test]
fn every_row_has_its_evidence() {
    let doc = DOC;
    let mut header: Option<Vec<String>> = None;
    for (i, line) in doc.lines().enumerate() {
        if !line.starts_with('|') {
            header = None;
            continue;
        }
        // Split on pipes that are not escaped.
        let mut cells = Vec::new();
        let mut cur = String::new();
        let mut prev = ' ';
        for c in line.chars() {
            if c == '|' && prev != '\\' {
                cells.push(cur.trim().to_string());
                cur.clear();
            } else {
                cur.push(c);
            }
            prev = c;
        }
        let cells = &cells[1..];
        let Some(h) = &header else {
            header = Some(cells.to_vec());
            continue;
        };
        if cells
            .iter()
            .all(|c| c.chars().all(|c| c == '-' || c == ':'))
        {
            continue;
        }
        assert_eq!(
            cells.len(),
            h.len(),
            "docs/assumptions.md line {}: {line}",
            i + 1
        );
        for (name, cell) in h.iter().zip(cells) {
            if name.contains("evidence") {
                assert!(
                    !cell.is_empty(),
                    "docs/assumptions.md line {}: no evidence",
                    i + 1
                );
            }
        }
    }
}
