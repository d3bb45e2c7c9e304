//! FAT images made by the real tools, read by hotkern: `mkfs.fat`
//! (dosfstools) formats FAT12, FAT16 and FAT32 volumes, `mtools` puts a
//! file with a long name in a directory with a long name, after deleting
//! a file in front of it so that the new file's cluster chain is in two
//! pieces (checked with `mshowfat`). The host's `hotkern load` and the
//! kernel under QEMU (`hotkern boot --disk --load`) must each return the
//! file's SHA-256. Skipped, saying so, where the tools are not installed.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};

const DIRECTORY: &str = "BootLoader.Files";
const FILE: &str = "kernel-image.long-name.bin";
const FILE_BYTES: usize = 300_000;

/// Whether a program answers at all (`--help` or `-V`, any status).
fn installed(program: &str, flag: &str) -> bool {
    Command::new(program).arg(flag).output().is_ok()
}

fn missing(tools: &[(&str, &str, &str)]) -> bool {
    let absent: Vec<&str> = tools
        .iter()
        .filter(|(program, flag, _)| !installed(program, flag))
        .map(|(_, _, package)| *package)
        .collect();
    if !absent.is_empty() {
        eprintln!(
            "skipped: apt-get install {} (scripts/setup does it)",
            absent.join(" ")
        );
    }
    !absent.is_empty()
}

fn run(program: &str, args: &[&str]) -> String {
    let output = Command::new(program)
        .args(args)
        .env("MTOOLS_SKIP_CHECK", "1")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A fresh directory for a test that makes images and boots them, or
/// `None` (said) where dosfstools, mtools or QEMU is missing.
fn booting_dir(name: &str) -> Option<PathBuf> {
    if missing(&[
        ("mkfs.fat", "--help", "dosfstools"),
        ("mcopy", "-V", "mtools"),
        ("qemu-system-x86_64", "--version", "qemu-system-x86"),
    ]) {
        return None;
    }
    let dir = std::env::temp_dir().join(format!("hotkern-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Some(dir)
}

/// Bytes no two images share by accident: xorshift from `seed`.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The FAT32 FSInfo sector's next-free hint set to "unknown", so that
/// mtools searches from the volume's start and fills the hole a delete
/// left, as it does on FAT12 and FAT16 (a valid volume: `fsck.fat` takes
/// it as is).
fn forget_next_free(image: &Path) {
    let mut data = std::fs::read(image).unwrap();
    let fsinfo = usize::from(u16::from_le_bytes([data[48], data[49]])) * 512;
    assert_eq!(&data[fsinfo..fsinfo + 4], b"RRaA", "an FSInfo sector");
    data[fsinfo + 492..fsinfo + 496].copy_from_slice(&u32::MAX.to_le_bytes());
    std::fs::write(image, data).unwrap();
}

/// A `bits`-bit FAT volume holding [`FILE`] in [`DIRECTORY`], its chain
/// in two pieces; returns the image, the file's SHA-256 and its chain's
/// pieces as `mshowfat` prints them (`<6-7> <12-156>`).
fn image(dir: &Path, bits: u32) -> (PathBuf, String, String) {
    let image = dir.join(format!("fat{bits}.img"));
    let _ = std::fs::remove_file(&image);
    let image_arg = image.to_str().unwrap();
    // FAT32 needs 65,525 clusters: 64 MiB of one-sector clusters.
    let (kib, cluster): (&str, &[&str]) = match bits {
        12 => ("4096", &[]),
        16 => ("32768", &[]),
        _ => ("65536", &["-s", "1"]),
    };
    let mut format = vec![
        "-F",
        if bits == 12 {
            "12"
        } else if bits == 16 {
            "16"
        } else {
            "32"
        },
    ];
    format.extend_from_slice(cluster);
    format.extend_from_slice(&["-C", image_arg, kib]);
    run("mkfs.fat", &format);
    let put = |name: &str, data: &[u8], to: &str| {
        let source = dir.join(name);
        std::fs::write(&source, data).unwrap();
        run("mcopy", &["-i", image_arg, source.to_str().unwrap(), to]);
    };
    run("mmd", &["-i", image_arg, &format!("::{DIRECTORY}")]);
    put("first", &bytes(5_000, 1), "::first.bin");
    put("victim", &bytes(9_000, 2), "::victim.bin");
    put("third", &bytes(7_000, 3), "::third.bin");
    run("mdel", &["-i", image_arg, "::victim.bin"]);
    if bits == 32 {
        forget_next_free(&image);
    }
    let file = bytes(FILE_BYTES, u64::from(bits) * 7919);
    put("file", &file, &format!("::{DIRECTORY}/{FILE}"));
    let chain = run(
        "mshowfat",
        &["-i", image_arg, &format!("::{DIRECTORY}/{FILE}")],
    );
    assert!(
        chain.matches('<').count() >= 2,
        "FAT{bits}: the file's chain is in one piece: {chain}"
    );
    (image, hex(&Sha256::digest(&file)), chain)
}

/// The first and last cluster of each piece of an `mshowfat` chain.
fn pieces(chain: &str) -> Vec<(u64, u64)> {
    chain
        .split('<')
        .skip(1)
        .map(|piece| {
            let range = piece.split('>').next().unwrap();
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            (first.trim().parse().unwrap(), last.trim().parse().unwrap())
        })
        .collect()
}

/// `hotkern boot --json` of the kernel loading `path` from `image`, with
/// `extra` options: whether it exited 0, and its JSON document.
fn boot(image: &Path, path: &str, extra: &[&str]) -> (bool, Value, String) {
    let mut options = vec!["--load", path];
    options.extend_from_slice(extra);
    boot_with(image, &options)
}

/// `hotkern boot --json` with `image` as its disk and `options`.
fn boot_with(image: &Path, options: &[&str]) -> (bool, Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hotkern"))
        .args(["boot", "--json", "--cpus", "1", "--no-hotplug"])
        .args(["--append", "engine=none", "--timeout", "120"])
        .args(["--disk", image.to_str().unwrap()])
        .args(options)
        .output()
        .expect("hotkern runs");
    let run: Value = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output.status.success(), run, stderr)
}

#[test]
fn files_on_real_fat12_16_32_images_load_with_their_sha256() {
    if missing(&[
        ("mkfs.fat", "--help", "dosfstools"),
        ("mcopy", "-V", "mtools"),
    ]) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("hotkern-real-fat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = format!("{DIRECTORY}/{FILE}");
    let qemu = !missing(&[("qemu-system-x86_64", "--version", "qemu-system-x86")]);
    for bits in [12, 16, 32] {
        let (image, sha, _) = image(&dir, bits);
        // The host: bcache's FAT reader over the image file.
        let host = run(
            env!("CARGO_BIN_EXE_hotkern"),
            &["load", image.to_str().unwrap(), &path],
        );
        assert!(host.contains(&sha), "FAT{bits}, hotkern load:\n{host}");
        if !qemu {
            continue;
        }
        // The kernel: virtio-blk, the hotkern cache, the same FAT reader.
        let (ok, run, stderr) = boot(&image, &path, &[]);
        assert!(ok, "FAT{bits}: {stderr}\n{run}");
        assert_eq!(
            run["load"]["sha256"],
            Value::from(sha.as_str()),
            "FAT{bits}"
        );
        assert_eq!(run["load"]["bytes"], Value::from(FILE_BYTES), "FAT{bits}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Long names with spaces and non-ASCII letters, written by mtools (from
/// UTF-8, hence the locale): the host and the kernel each find and read
/// them, the kernel's path coming percent-encoded on its command line.
#[test]
fn paths_with_spaces_and_accents_load_and_walk_on_the_kernel() {
    let Some(dir) = booting_dir("spaced-fat") else {
        return;
    };
    let image = dir.join("spaced.img");
    let _ = std::fs::remove_file(&image);
    let image_arg = image.to_str().unwrap();
    run("mkfs.fat", &["-F", "16", "-C", image_arg, "32768"]);
    let kernel = bytes(200_000, 41);
    let note = bytes(3_000, 43);
    let mtools = |program: &str, args: &[&str]| {
        let output = Command::new(program)
            .args(["-i", image_arg])
            .args(args)
            .env("MTOOLS_SKIP_CHECK", "1")
            .env("LC_ALL", "C.UTF-8")
            .output()
            .unwrap();
        assert!(output.status.success(), "{program} {args:?}: {output:?}");
    };
    for (name, data) in [("kernel", &kernel), ("note", &note)] {
        std::fs::write(dir.join(name), data).unwrap();
    }
    let source = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    mtools("mmd", &["::Boot Files"]);
    mtools(
        "mcopy",
        &[&source("kernel"), "::Boot Files/Kernel Image.elf"],
    );
    mtools("mmd", &["::Données"]);
    mtools("mcopy", &[&source("note"), "::Données/été.txt"]);

    let host = run(
        env!("CARGO_BIN_EXE_hotkern"),
        &["load", image_arg, "Boot Files/Kernel Image.elf"],
    );
    let kernel_sha = hex(&Sha256::digest(&kernel));
    assert!(host.contains(&kernel_sha), "hotkern load:\n{host}");

    let (ok, run, stderr) = boot(
        &image,
        "Boot Files/Kernel Image.elf",
        &["--walk", "Données"],
    );
    assert!(ok, "{stderr}\n{run}");
    assert_eq!(run["load"]["path"], "Boot Files/Kernel Image.elf", "{run}");
    assert_eq!(run["load"]["sha256"], Value::from(kernel_sha.as_str()));
    assert_eq!(run["load"]["sha256_ok"], true);
    assert_eq!(run["walk"]["path"], "Données", "{run}");
    assert_eq!(run["walk"]["files"], 1);
    assert_eq!(run["walk"]["sha256"], hex(&Sha256::digest(&note)).as_str());
    assert_eq!(run["walk"]["sha256_ok"], true);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file that is not there, an image whose boot sector is broken, a
/// chain that loops and a disk that fails a read in the file's second
/// piece: each a failure exit naming the problem, no hang, no wrong bytes.
#[test]
fn a_missing_file_a_corrupt_image_and_a_failing_disk_each_fail_clearly() {
    let Some(dir) = booting_dir("bad-fat") else {
        return;
    };
    let path = format!("{DIRECTORY}/{FILE}");
    let (image, _, chain) = image(&dir, 16);
    let data = std::fs::read(&image).unwrap();
    let field = |at: usize| u64::from(u16::from_le_bytes([data[at], data[at + 1]]));
    let (sector_bytes, cluster_sectors) = (field(11), u64::from(data[13]));
    let (reserved, fats, root_entries, fat_sectors) =
        (field(14), u64::from(data[16]), field(17), field(22));
    let data_start = reserved + fats * fat_sectors + (root_entries * 32).div_ceil(sector_bytes);
    let pieces = pieces(&chain);
    assert_eq!(pieces.len(), 2, "{chain}");

    let expect_failure = |image: &Path, path: &str, extra: &[&str], words: &str| {
        let (ok, run, stderr) = boot(image, path, extra);
        assert!(!ok, "{words}: the boot passed\n{run}");
        let error = run["load"]["error"].as_str().unwrap_or_default();
        assert!(error.contains(words), "{words}: {error}\n{stderr}");
        assert!(
            stderr.contains("the file named by load= came off the disk"),
            "{stderr}"
        );
        assert_eq!(run["outcome"], "checks-failed", "{run}");
    };
    expect_failure(
        &image,
        &format!("{DIRECTORY}/absent.bin"),
        &[],
        "no such file or directory",
    );

    let broken = dir.join("broken.img");
    let mut bytes = data.clone();
    bytes[11..13].copy_from_slice(&[0, 0]);
    std::fs::write(&broken, &bytes).unwrap();
    expect_failure(&broken, &path, &[], "not a FAT volume");

    // The file's first cluster names itself as the next: a loop.
    let looped = dir.join("looped.img");
    let mut bytes = data.clone();
    let (first, _) = pieces[0];
    for fat in 0..fats {
        let at = ((reserved + fat * fat_sectors) * sector_bytes + 2 * first) as usize;
        bytes[at..at + 2].copy_from_slice(&(first as u16).to_le_bytes());
    }
    std::fs::write(&looped, &bytes).unwrap();
    expect_failure(&looped, &path, &[], "loop");

    // Every read of the second piece's last sector fails (QEMU's blkdebug).
    let (_, last) = pieces[1];
    let sector = data_start + (last - 2) * cluster_sectors + cluster_sectors - 1;
    expect_failure(
        &image,
        &path,
        &["--disk-error-at", &sector.to_string()],
        "device error",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--walk`: every file under a directory of an mtools-made FAT32 image,
/// the directory's own files in the order they were written, then its
/// subdirectory's; the kernel's SHA-256 over them in that order must be
/// the one computed here from the bytes written.
#[test]
fn a_tree_walks_files_first_in_on_disk_order() {
    let Some(dir) = booting_dir("walk-fat") else {
        return;
    };
    let image = dir.join("tree.img");
    let image_arg = image.to_str().unwrap();
    run(
        "mkfs.fat",
        &["-F", "32", "-s", "1", "-C", image_arg, "65536"],
    );
    run(
        "mmd",
        &["-i", image_arg, "::modules", "::modules/net.drivers"],
    );
    let files = [
        ("modules/zfs-module.ko", bytes(40_000, 11)),
        ("modules/net.drivers/if_vtnet.ko", bytes(9_000, 12)),
        ("modules/acpi.ko", bytes(700, 13)),
    ];
    for (index, (path, data)) in files.iter().enumerate() {
        let source = dir.join(format!("f{index}"));
        std::fs::write(&source, data).unwrap();
        run(
            "mcopy",
            &[
                "-i",
                image_arg,
                source.to_str().unwrap(),
                &format!("::{path}"),
            ],
        );
    }
    let mut sha = Sha256::new();
    for index in [0, 2, 1] {
        sha.update(&files[index].1);
    }
    let sha = hex(&sha.finalize());
    let (ok, run, stderr) = boot_with(&image, &["--walk", "modules"]);
    assert!(ok, "{stderr}\n{run}");
    assert_eq!(run["walk"]["sha256"], Value::from(sha.as_str()));
    assert_eq!(run["walk"]["files"], 3);
    assert_eq!(run["walk"]["bytes"], 49_700);
    let (ok, run, _) = boot_with(&image, &["--walk", "modules/absent"]);
    assert!(!ok);
    assert!(
        run["walk"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("no such file or directory")),
        "{run}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
