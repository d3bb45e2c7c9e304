//! The FAT32 image both bcache runs read, in this process and in the
//! kernel under QEMU: one large file and a tree of small ones, from seeded
//! random bytes, with the SHA-256 each read must reproduce.

use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::FatType;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::bench::measure::input_rng;

/// The FAT32 cluster size.
pub(super) const CLUSTER: u32 = 4096;
/// The large file, where a boot loader finds the kernel.
pub(super) const FILE_PATH: &str = "boot/kernel/kernel";
/// The tree of small files, where a loader finds the kernel's modules.
pub(super) const TREE: &str = "/boot/modules";

/// The image and what reading it must give.
pub(super) struct Image {
    pub(super) bytes: Vec<u8>,
    pub(super) file_len: u64,
    pub(super) file_sha: [u8; 32],
    pub(super) tree_files: u64,
    pub(super) tree_bytes: u64,
    pub(super) tree_sha: [u8; 32],
}

/// A pseudo-random file (so no design can win by compression or zero pages).
fn contents(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0; len];
    input_rng(seed).fill_bytes(&mut out);
    out
}

pub(super) fn build_image(file_len: usize) -> Result<Image, String> {
    // FAT32 with 4 KiB clusters needs at least 65525 clusters (256 MiB).
    let volume = (file_len + (32 << 20))
        .max(272 << 20)
        .next_multiple_of(1 << 20);
    let mut image = ImageBuilder::with_cluster(volume, Some(FatType::Fat32), Some(CLUSTER))
        .map_err(|e| format!("formatting the image: {e}"))?;
    // The tree first, in directory order, as an installer would write it.
    let mut tree = Sha256::new();
    let (mut tree_files, mut tree_bytes) = (0, 0);
    for d in 0..6 {
        for e in 0..4 {
            for f in 0..12 {
                let len = 1000 + (d * 7919 + e * 104_729 + f * 1_299_709) % 30_000;
                let data = contents(len, (d * 1000 + e * 100 + f) as u64);
                let path = format!("{TREE}/set{d}/group{e}/module_{f:02}.ko");
                image
                    .add_file(&path, &data)
                    .map_err(|e| format!("writing {path}: {e}"))?;
                tree.update(&data);
                tree_files += 1;
                tree_bytes += len as u64;
            }
        }
    }
    let file = contents(file_len, 0x5eed);
    image
        .add_file(FILE_PATH, &file)
        .map_err(|e| format!("writing the large file: {e}"))?;
    Ok(Image {
        bytes: image.finish(),
        file_len: file_len as u64,
        file_sha: Sha256::digest(&file).into(),
        tree_files,
        tree_bytes,
        tree_sha: tree.finalize().into(),
    })
}
