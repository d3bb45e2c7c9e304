//! The Linux guest the benchmarks and `hotkern boot --linux` compare
//! hotkern with: Debian's own kernel booted under QEMU with an initramfs
//! ([`cpio`]) of a static busybox and a script as /init. What the script
//! does and what the host reads from the console is each caller's: CPU
//! hotplug for `bench cpuhp --linux`, virtio-mem resizes for `boot
//! --linux`.

pub mod cpio;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::qemu::console::Console;
use crate::qemu::QemuConfig;

/// What the guest's script starts its own console lines with.
pub const PREFIX: &str = "hotkern-linux:";
/// The Debian package of the kernel booted.
const LINUX_PACKAGE: &str = "linux-image-amd64";
/// The Debian package of the busybox in the initramfs: a static one, as
/// the initramfs has no C library.
const BUSYBOX_PACKAGE: &str = "busybox-static";
/// Where both busybox packages install it.
const BUSYBOX: &str = "/bin/busybox";
/// Where Debian installs its kernels (`vmlinuz-<release>`).
const BOOT_DIR: &str = "/boot";

/// What the guest is made of, found on this machine.
pub struct Guest {
    pub kernel: PathBuf,
    pub busybox: Vec<u8>,
}

impl Guest {
    /// Finds the kernel and a static busybox, or names the packages that
    /// would provide them.
    pub fn find() -> Result<Guest, String> {
        let kernel = newest_kernel(Path::new(BOOT_DIR));
        let busybox = std::fs::read(BUSYBOX)
            .ok()
            .filter(|bytes| is_static_elf(bytes));
        let mut missing = Vec::new();
        if kernel.is_none() {
            missing.push(LINUX_PACKAGE);
        }
        if busybox.is_none() {
            missing.push(BUSYBOX_PACKAGE);
        }
        match (kernel, busybox) {
            (Some(kernel), Some(busybox)) => Ok(Guest { kernel, busybox }),
            _ => Err(missing_message(&missing)),
        }
    }

    /// The initramfs: busybox, the applet `sh` for the script's `#!`, the
    /// mount points, the console, `modules` (name and bytes) under /lib,
    /// and `init` as /init.
    pub fn initramfs(&self, init: &str, modules: &[(String, Vec<u8>)]) -> Vec<u8> {
        self.initramfs_with_programs(init, modules, &[])
    }

    /// [`Guest::initramfs`] with `programs` (name and bytes: static
    /// executables, as the initramfs has no C library) under /bin.
    pub fn initramfs_with_programs(
        &self,
        init: &str,
        modules: &[(String, Vec<u8>)],
        programs: &[(String, Vec<u8>)],
    ) -> Vec<u8> {
        let mut archive = cpio::Archive::new();
        for dir in ["bin", "dev", "proc", "sys", "tmp", "lib"] {
            archive.directory(dir);
        }
        archive.file("bin/busybox", 0o755, &self.busybox);
        archive.symlink("bin/sh", "busybox");
        archive.char_device("dev/console", 5, 1);
        for (name, bytes) in modules {
            archive.file(&format!("lib/{name}"), 0o644, bytes);
        }
        for (name, bytes) in programs {
            archive.file(&format!("bin/{name}"), 0o755, bytes);
        }
        archive.file("init", 0o755, init.as_bytes());
        archive.finish()
    }

    /// Boots this guest's kernel under `qemu` with `config`'s vCPUs,
    /// memory and devices and with `initramfs`, and hands its console to
    /// `follow`; the initramfs is written to a directory of its own, removed
    /// when `follow` returns.
    pub fn boot<T>(
        &self,
        qemu: &Path,
        mut config: QemuConfig,
        initramfs: &[u8],
        follow: impl FnOnce(Console) -> Result<T, String>,
    ) -> Result<T, String> {
        let dir = std::env::temp_dir().join(format!("hotkern-linux-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let initrd = dir.join("initramfs.cpio");
        let followed = std::fs::write(&initrd, initramfs)
            .map_err(|error| format!("{}: {error}", initrd.display()))
            .and_then(|()| {
                config.kernel = self.kernel.clone();
                config.trace_file = None;
                config.disk = None;
                config.disk_profile = None;
                config.disk_error_at = None;
                let mut args = config.args();
                args.extend([OsString::from("-initrd"), initrd.clone().into()]);
                follow(Console::start(qemu, &args)?)
            });
        let _ = std::fs::remove_dir_all(&dir);
        followed
    }
}

/// What a guest's /init script has said so far, as a caller reads it.
pub trait Script {
    /// Takes one console line that arrived `at` after QEMU started;
    /// returns whether the script has said it is done.
    fn take(&mut self, line: &str, at: Duration) -> bool;
    /// Where the script got to and its last line, for an error.
    fn where_it_got(&self) -> String;
}

/// How long a guest may take to power off after its script said it was
/// done; a guest that prints everything but does not power off still
/// counts.
const POWER_OFF_GRACE: Duration = Duration::from_secs(5);

/// Hands the console's lines to `script` until it is done and the guest
/// powered off (or [`POWER_OFF_GRACE`] passed), or `timeout` from now;
/// an error says where the script got to when QEMU was killed or stopped
/// early.
pub(crate) fn follow_script(
    mut console: Console,
    timeout: Duration,
    script: &mut impl Script,
) -> Result<(), String> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut done_at: Option<Instant> = None;
    let timed_out = loop {
        let limit = done_at.map_or(deadline, |at| (at + POWER_OFF_GRACE).min(deadline));
        match console
            .lines
            .recv_timeout(limit.saturating_duration_since(Instant::now()))
        {
            Ok((_, line)) => {
                if script.take(&line, started.elapsed()) {
                    done_at.get_or_insert_with(Instant::now);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= limit => {
                let _ = console.child.kill();
                break done_at.is_none();
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    let (status, qemu_said) = console.finish();
    if timed_out {
        return Err(format!(
            "Linux did not finish within {} s and QEMU was killed; {}",
            timeout.as_secs(),
            script.where_it_got()
        ));
    }
    if done_at.is_none() {
        let status = status.map_or_else(|error| error.to_string(), |s| s.to_string());
        return Err(format!(
            "QEMU stopped ({status}) before the guest's script finished; {}; QEMU said: {}",
            script.where_it_got(),
            qemu_said.trim()
        ));
    }
    Ok(())
}

/// The message for missing packages, naming them and the command that
/// installs them.
fn missing_message(packages: &[&str]) -> String {
    let list = packages.join(" ");
    format!(
        "the comparison with Linux boots Debian's Linux kernel with a static busybox as \
         its userspace, and this machine lacks {}: apt-get install -y {list} \
         (scripts/setup leaves them out; they are only for this comparison)",
        packages
            .iter()
            .map(|p| format!("package {p}"))
            .collect::<Vec<_>>()
            .join(" and ")
    )
}

/// The `vmlinuz-*` of the highest release in `dir`.
fn newest_kernel(dir: &Path) -> Option<PathBuf> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("vmlinuz-"))
        .collect();
    let newest = names.into_iter().max_by_key(|name| release_key(name))?;
    Some(dir.join(newest))
}

/// The numbers of a release (`6.1.0-56-amd64` is 6, 1, 0, 56), so that
/// 6.10 sorts after 6.9.
fn release_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect()
}

/// Whether `bytes` is an x86-64 ELF executable with no program
/// interpreter: the dynamic busybox package installs the same path, and
/// would not start in an initramfs without its C library.
fn is_static_elf(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    // 64-bit, little-endian.
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(entry_size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    let entry_size = usize::from(entry_size);
    if entry_size < 4 {
        return false;
    }
    (0..usize::from(count)).all(|index| {
        let at = (phoff as usize).saturating_add(index * entry_size);
        // The whole entry must be there: a cut-off file is no executable.
        bytes.get(at..at.saturating_add(entry_size)).is_some()
            && u32_at(at).is_some_and(|kind| kind != PT_INTERP)
    })
}

/// How every guest script starts, as PID 1 from the initramfs: busybox's
/// applets on PATH, proc, sysfs and tracefs mounted (`$T` names tracefs),
/// the "up" line the host waits for, and the shell pinned to CPU 0.
const INIT_PREAMBLE: &str = r#"#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tracefs tracefs /sys/kernel/tracing
T=/sys/kernel/tracing
echo "hotkern-linux: up $(nproc) $(uname -r)"
taskset -p 1 $$ >/dev/null
"#;

/// A guest's /init: the shared preamble, then `body`.
pub fn init_script(body: &str) -> String {
    format!("{INIT_PREAMBLE}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_packages_are_named_with_the_command_that_installs_them() {
        let both = missing_message(&[LINUX_PACKAGE, BUSYBOX_PACKAGE]);
        assert!(
            both.contains("package linux-image-amd64 and package busybox-static"),
            "{both}"
        );
        assert!(both.contains("apt-get install -y linux-image-amd64 busybox-static"));
        let one = missing_message(&[BUSYBOX_PACKAGE]);
        assert!(one.contains("apt-get install -y busybox-static"), "{one}");
        assert!(!one.contains(LINUX_PACKAGE));
    }

    #[test]
    fn releases_sort_by_their_numbers() {
        let mut names = ["vmlinuz-6.9.0-1-amd64", "vmlinuz-6.10.0-1-amd64"];
        names.sort_by_key(|name| release_key(name));
        assert_eq!(names[1], "vmlinuz-6.10.0-1-amd64");
        assert_eq!(release_key("vmlinuz-6.1.0-56-amd64"), [6, 1, 0, 56, 64]);
    }

    /// An ELF64 header with one program header of type `kind`.
    fn elf(kind: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x40 + 0x38];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        bytes[0x40..0x44].copy_from_slice(&kind.to_le_bytes());
        bytes
    }

    #[test]
    fn only_a_static_elf_will_do_for_busybox() {
        assert!(is_static_elf(&elf(1)));
        assert!(!is_static_elf(&elf(3)), "PT_INTERP: dynamically linked");
        assert!(!is_static_elf(b"#!/bin/sh\n"));
        assert!(!is_static_elf(&elf(1)[..0x50]), "truncated");
    }

    #[test]
    fn the_initramfs_holds_busybox_the_modules_and_the_script() {
        let guest = Guest {
            kernel: PathBuf::from("/boot/vmlinuz-6.1.0-56-amd64"),
            busybox: b"busybox bytes".to_vec(),
        };
        let archive = guest.initramfs(
            "#!/bin/sh\necho hi\n",
            &[("virtio.ko".into(), b"ko".to_vec())],
        );
        let text = String::from_utf8_lossy(&archive);
        for name in [
            "bin/busybox",
            "bin/sh",
            "dev/console",
            "lib/virtio.ko",
            "init",
            "TRAILER!!!",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
        assert!(text.contains("busybox bytes") && text.contains("echo hi"));
    }
}
