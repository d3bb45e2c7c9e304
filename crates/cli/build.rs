//! Links the `hotkern` binary with `bench/trace/aligned.ld`: every function
//! `bench trace` compares across builds (instrumented, load-and-branch,
//! uninstrumented) starts on a 64-byte boundary, so the comparison measures
//! the call sites, not where the linker happened to put each copy.

fn main() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/bench/trace/aligned.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    // Only on Linux ELF targets, where the script's syntax is understood
    // (GNU ld and LLVM's lld both read it).
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        // The binary, and the unit tests that check the alignment.
        println!("cargo:rustc-link-arg=-Wl,-T,{}", script.display());
    }
}
