//! Link settings for the `skillgate` binary that Cargo's profiles cannot express.
//!
//! On Linux with glibc, the binary is linked with packed relative relocations (`DT_RELR`, the
//! linker's `-z pack-relative-relocs`). A position-independent executable carries a relocation
//! for every pointer in its read-only data (vtables, string tables), which the loader reads and
//! applies at every start. Stored one by one they take 24 bytes each, about 2 MB of the shipped
//! binary and all of it paged in at start; packed, a few kilobytes.
//!
//! This needs GNU ld 2.38 or later (or lld 15, or mold) where the binary is built and glibc 2.36
//! or later (Debian 12, Ubuntu 22.10, RHEL 10) where it runs. For an older system, build with
//! `SKILLGATE_LINK_RELR=0`.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=SKILLGATE_LINK_RELR");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    let off = std::env::var("SKILLGATE_LINK_RELR").as_deref() == Ok("0");
    if os == "linux" && env == "gnu" && !off {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
