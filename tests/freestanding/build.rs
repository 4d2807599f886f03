//! Links the check program with no C runtime and no libc: any accidental `std` (or libc)
//! dependency in nvbare-core then fails to link.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux") {
        for arg in ["-nostartfiles", "-nostdlib", "-static", "-no-pie"] {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
}
