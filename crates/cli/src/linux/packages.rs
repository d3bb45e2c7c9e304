//! Where each architecture's Linux guest comes from: Debian's kernel
//! package and a static busybox. On x86-64 both are installed on the host
//! (/boot and /bin/busybox); an arm64 kernel and busybox cannot be
//! installed on an x86-64 host, so `scripts/setup-linux-arm64` downloads
//! the two arm64 packages and unpacks only their kernel, config and
//! busybox into a cache directory of hotkern's own, which is laid out
//! like a root file system (`boot/`, `bin/busybox`).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::qemu::Architecture;

/// Where both busybox packages install it, below the guest's root.
const BUSYBOX: &str = "bin/busybox";
/// Where Debian installs its kernels (`vmlinuz-<release>`), below the
/// guest's root.
const BOOT_DIR: &str = "boot";
/// The script that fills the arm64 cache.
pub const SETUP_ARM64: &str = "scripts/setup-linux-arm64";

/// The directory a guest's kernel and busybox are found under: the host's
/// root on x86-64, `$XDG_CACHE_HOME/hotkern/linux-arm64` (or
/// `~/.cache/...`) on aarch64; `None` when neither variable names one.
pub fn root(arch: Architecture) -> Option<PathBuf> {
    match arch {
        Architecture::X86_64 => Some(PathBuf::from("/")),
        Architecture::Aarch64 => {
            cache_dir(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
                .map(|cache| cache.join(format!("hotkern/linux-{}", arch.debian_name())))
        }
    }
}

/// The user's cache directory by the XDG base directory rules: an
/// absolute `$XDG_CACHE_HOME`, else `$HOME/.cache`.
fn cache_dir(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let absolute = |value: Option<OsString>| value.map(PathBuf::from).filter(|p| p.is_absolute());
    absolute(xdg_cache_home).or_else(|| absolute(home).map(|home| home.join(".cache")))
}

/// The kernel and busybox found under a guest's root.
pub struct Found {
    pub kernel: PathBuf,
    pub busybox: Vec<u8>,
}

/// Finds the newest kernel under `root`'s boot/ and a static busybox for
/// `arch` at `root`'s bin/busybox, or names the packages that provide
/// what is missing.
pub fn find_in(arch: Architecture, root: &Path) -> Result<Found, MissingPackages> {
    let kernel = newest_kernel(&root.join(BOOT_DIR), arch);
    let busybox = std::fs::read(root.join(BUSYBOX))
        .ok()
        .filter(|bytes| is_static_elf(bytes, arch));
    match (kernel, busybox) {
        (Some(kernel), Some(busybox)) => Ok(Found { kernel, busybox }),
        (kernel, busybox) => Err(MissingPackages {
            arch,
            root: root.to_owned(),
            kernel: kernel.is_none(),
            busybox: busybox.is_none(),
        }),
    }
}

/// The guest's kernel or busybox is not there: which, and how to get it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPackages {
    /// The architecture the guest was wanted for.
    pub arch: Architecture,
    /// Where they were looked for.
    pub root: PathBuf,
    /// No kernel of that architecture under `root`'s boot/.
    pub kernel: bool,
    /// No static busybox of that architecture at `root`'s bin/busybox.
    pub busybox: bool,
}

impl MissingPackages {
    /// The Debian packages that provide what is missing, as apt-get
    /// names them on this host (`busybox-static:arm64`).
    ///
    /// ```ignore
    /// // An arm64 cache with a kernel but no busybox:
    /// assert_eq!(missing.packages(), ["busybox-static:arm64"]);
    /// ```
    pub fn packages(&self) -> Vec<String> {
        let foreign = match self.arch {
            Architecture::X86_64 => String::new(),
            other => format!(":{}", other.debian_name()),
        };
        let mut packages = Vec::new();
        if self.kernel {
            packages.push(format!("linux-image-{}", self.arch.debian_name()));
        }
        if self.busybox {
            packages.push(format!("busybox-static{foreign}"));
        }
        packages
    }
}

impl fmt::Display for MissingPackages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let packages = self.packages();
        let named = packages
            .iter()
            .map(|p| format!("package {p}"))
            .collect::<Vec<_>>()
            .join(" and ");
        match self.arch {
            Architecture::X86_64 => write!(
                f,
                "the comparison with Linux boots Debian's Linux kernel with a static busybox \
                 as its userspace, and this machine lacks {named}: apt-get install -y {} \
                 (scripts/setup leaves them out; they are only for this comparison)",
                packages.join(" ")
            ),
            arch => write!(
                f,
                "the comparison with Linux on {arch} boots Debian's {} kernel with a static \
                 busybox as its userspace, unpacked (not installed) into {}, which lacks \
                 {named}: {SETUP_ARM64} downloads and unpacks them there (about 60 MB; \
                 scripts/setup and CI leave them out)",
                arch.debian_name(),
                self.root.display()
            ),
        }
    }
}

impl std::error::Error for MissingPackages {}

/// The `vmlinuz-*` of the highest release in `dir` whose name ends in
/// `arch`'s Debian name (`vmlinuz-6.1.0-56-arm64`).
fn newest_kernel(dir: &Path, arch: Architecture) -> Option<PathBuf> {
    let suffix = format!("-{}", arch.debian_name());
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("vmlinuz-") && name.ends_with(&suffix))
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

/// Whether `bytes` is an ELF executable for `arch` with no program
/// interpreter: the dynamic busybox package installs the same path, and
/// would not start in an initramfs without its C library.
fn is_static_elf(bytes: &[u8], arch: Architecture) -> bool {
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
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01") || u16_at(0x12) != Some(arch.elf_machine()) {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An x86-64 ELF64 header with one program header of type `kind`.
    fn elf(kind: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x40 + 0x38];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[0x12..0x14].copy_from_slice(&62u16.to_le_bytes());
        bytes[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        bytes[0x40..0x44].copy_from_slice(&kind.to_le_bytes());
        bytes
    }

    #[test]
    fn only_a_static_elf_will_do_for_busybox() {
        let x86 = Architecture::X86_64;
        assert!(is_static_elf(&elf(1), x86));
        assert!(
            !is_static_elf(&elf(1), Architecture::Aarch64),
            "another machine"
        );
        assert!(
            !is_static_elf(&elf(3), x86),
            "PT_INTERP: dynamically linked"
        );
        assert!(!is_static_elf(b"#!/bin/sh\n", x86));
        assert!(!is_static_elf(&elf(1)[..0x50], x86), "truncated");
    }

    #[test]
    fn missing_packages_are_named_with_the_command_that_gets_them() {
        let both = MissingPackages {
            arch: Architecture::X86_64,
            root: "/".into(),
            kernel: true,
            busybox: true,
        };
        let text = both.to_string();
        assert!(
            text.contains("package linux-image-amd64 and package busybox-static"),
            "{text}"
        );
        assert!(text.contains("apt-get install -y linux-image-amd64 busybox-static"));
        let arm = MissingPackages {
            arch: Architecture::Aarch64,
            root: "/cache/hotkern/linux-arm64".into(),
            kernel: false,
            busybox: true,
        };
        assert_eq!(arm.packages(), ["busybox-static:arm64"]);
        let text = arm.to_string();
        assert!(
            text.contains("lacks package busybox-static:arm64:"),
            "{text}"
        );
        assert!(text.contains("into /cache/hotkern/linux-arm64"), "{text}");
        assert!(text.contains(SETUP_ARM64), "{text}");
        assert!(!text.contains("linux-image"), "{text}");
    }

    #[test]
    fn releases_sort_by_their_numbers() {
        let mut names = ["vmlinuz-6.9.0-1-amd64", "vmlinuz-6.10.0-1-amd64"];
        names.sort_by_key(|name| release_key(name));
        assert_eq!(names[1], "vmlinuz-6.10.0-1-amd64");
        assert_eq!(release_key("vmlinuz-6.1.0-56-amd64"), [6, 1, 0, 56, 64]);
    }

    #[test]
    fn the_cache_follows_the_xdg_rules() {
        let some = |s: &str| Some(OsString::from(s));
        assert_eq!(
            cache_dir(some("/xdg"), some("/home/me")),
            Some("/xdg".into())
        );
        assert_eq!(
            cache_dir(some("relative"), some("/home/me")),
            Some("/home/me/.cache".into()),
            "a relative XDG_CACHE_HOME is ignored"
        );
        assert_eq!(cache_dir(None, some("rel")), None);
        assert_eq!(root(Architecture::X86_64), Some("/".into()));
    }

    /// An ELF64 executable for `arch` with no program interpreter.
    fn busybox_for(arch: Architecture) -> Vec<u8> {
        let mut bytes = elf(1);
        bytes[0x12..0x14].copy_from_slice(&arch.elf_machine().to_le_bytes());
        bytes
    }

    #[test]
    fn a_guest_root_is_searched_for_that_architecture_only() {
        let root = std::env::temp_dir().join(format!("hotkern-packages-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("boot")).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        let arm = Architecture::Aarch64;
        let missing = find_in(arm, &root).err().unwrap();
        assert_eq!(
            missing.packages(),
            ["linux-image-arm64", "busybox-static:arm64"]
        );
        // An x86-64 kernel and busybox are no use to an arm64 guest.
        std::fs::write(root.join("boot/vmlinuz-6.1.0-56-amd64"), b"x86").unwrap();
        std::fs::write(root.join(BUSYBOX), busybox_for(Architecture::X86_64)).unwrap();
        let missing = find_in(arm, &root).err().unwrap();
        assert!(missing.kernel && missing.busybox);
        std::fs::write(root.join("boot/vmlinuz-6.1.0-56-arm64"), b"arm").unwrap();
        std::fs::write(root.join("boot/vmlinuz-6.1.0-9-arm64"), b"old").unwrap();
        std::fs::write(root.join(BUSYBOX), busybox_for(arm)).unwrap();
        let found = find_in(arm, &root);
        let _ = std::fs::remove_dir_all(&root);
        let found = found.unwrap();
        assert!(found.kernel.ends_with("boot/vmlinuz-6.1.0-56-arm64"));
        assert_eq!(found.busybox, busybox_for(arm));
    }
}
