//! Writes a FAT32 image to try `hotkern load` on:
//!
//! ```text
//! cargo run --release -p hotkern-bcache --example make_image -- disk.img 64
//! hotkern load disk.img boot/kernel/kernel --device usb-stick --cache hotkern
//! ```
//!
//! The image holds `boot/kernel/kernel` (the given size in MiB, default 64,
//! pseudo-random bytes) and a few small files under `boot/modules`.

use std::process::ExitCode;

use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::FatType;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(out) = args.next() else {
        eprintln!("usage: make_image OUT.img [FILE_MIB]");
        return ExitCode::FAILURE;
    };
    let mib: usize = match args.next().map(|a| a.parse()) {
        None => 64,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("make_image: file size: {e}");
            return ExitCode::FAILURE;
        }
    };
    let file_len = mib << 20;
    let volume = (file_len + (32 << 20)).max(272 << 20);
    // Seeded, so the same size gives the same image on every host.
    let mut file = vec![0; file_len];
    StdRng::seed_from_u64(0x2545_f491_4f6c_dd1d).fill_bytes(&mut file);
    let result = ImageBuilder::with_cluster(volume, Some(FatType::Fat32), Some(4096)).and_then(
        |mut image| {
            for i in 0..16 {
                image.add_file(
                    &format!("boot/modules/module{i:02}.ko"),
                    &file[..1000 * (i + 1)],
                )?;
            }
            image.add_file("boot/kernel/kernel", &file)?;
            std::fs::write(&out, image.finish())
        },
    );
    match result {
        Ok(()) => {
            println!(
                "{out}: FAT32, {} MiB volume, boot/kernel/kernel of {mib} MiB",
                volume >> 20
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("make_image: {e}");
            ExitCode::FAILURE
        }
    }
}
