//! The built `skillgate` binary itself: the link settings `build.rs` gives it on Linux with
//! glibc, read off its ELF file.

/// The dynamic section's entries (tag, value) of a 64-bit little-endian ELF file.
fn dynamic_entries(elf: &[u8]) -> Vec<(u64, u64)> {
    assert_eq!(&elf[..4], b"\x7fELF", "an ELF file");
    assert_eq!((elf[4], elf[5]), (2, 1), "64-bit, little-endian");
    let u16_at = |at: usize| u16::from_le_bytes(elf[at..at + 2].try_into().unwrap()) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let u64_at = |at: usize| u64::from_le_bytes(elf[at..at + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36), u16_at(0x38));
    const PT_DYNAMIC: u32 = 2;
    let dynamic = (0..phnum)
        .map(|i| phoff + i * phentsize)
        .find(|&ph| u32_at(ph) == PT_DYNAMIC)
        .expect("a dynamic section (a position-independent executable)");
    let (offset, size) = (u64_at(dynamic + 8) as usize, u64_at(dynamic + 32) as usize);
    (offset..offset + size)
        .step_by(16)
        .map(|at| (u64_at(at), u64_at(at + 8)))
        .take_while(|&(tag, _)| tag != 0)
        .collect()
}

#[test]
fn the_binary_packs_its_relative_relocations() {
    if option_env!("SKILLGATE_LINK_RELR") == Some("0") {
        return; // built with the documented opt-out, for a glibc older than 2.36
    }
    let elf = std::fs::read(env!("CARGO_BIN_EXE_skillgate")).expect("read the binary");
    let entries = dynamic_entries(&elf);
    let value = |wanted: u64| entries.iter().find(|(tag, _)| *tag == wanted).map(|e| e.1);
    const DT_RELASZ: u64 = 8;
    const DT_RELRSZ: u64 = 35;
    let packed =
        value(DT_RELRSZ).expect("a DT_RELR table: -z pack-relative-relocs was not applied");
    // Unpacked, the relative relocations of the vtables and string tables alone are megabytes in
    // DT_RELA (24 bytes each); what is left there are the few that name a symbol.
    let unpacked = value(DT_RELASZ).unwrap_or(0);
    assert!(
        unpacked < 64 * 1024,
        "{unpacked} bytes of relocations left unpacked beside {packed} packed"
    );
}
