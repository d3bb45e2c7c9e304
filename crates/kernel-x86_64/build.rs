//! Links the kernel with `linker.ld`, and refuses a build that would not
//! boot: the image is loaded at a fixed physical address by QEMU's PVH
//! loader, which applies no relocations.

use std::env;
use std::path::PathBuf;

fn main() {
    let dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let script = dir.join("linker.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");

    let target = env::var("TARGET").unwrap_or_default();
    if target != "x86_64-unknown-none" {
        panic!(
            "hotkern-kernel builds only for x86_64-unknown-none (not {target}); \
             run cargo inside crates/kernel-x86_64, whose .cargo/config.toml selects it"
        );
    }
    // A position-independent image would carry relocations nobody applies.
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if !flags
        .split('\x1f')
        .any(|flag| flag.ends_with("relocation-model=static"))
    {
        panic!(
            "hotkern-kernel needs -C relocation-model=static: run cargo inside \
             crates/kernel-x86_64 (its .cargo/config.toml sets it) with RUSTFLAGS unset"
        );
    }
    println!("cargo:rustc-link-arg-bins=-T{}", script.display());
    // The PVH loader reads program headers only; no build ID, no dynamic bits.
    println!("cargo:rustc-link-arg-bins=--build-id=none");
}
