//! The initramfs Linux unpacks at boot: a cpio archive in the "new ASCII"
//! (newc) format, as the kernel's Documentation/driver-api/early-userspace
//! describes it. Linux takes it uncompressed, so no compressor is needed.
//!
//! Every entry is a 110-byte header — the magic `070701` and thirteen
//! 8-digit hexadecimal fields — then the NUL-terminated name, padded to a
//! multiple of 4 bytes, then the data, padded likewise. `TRAILER!!!` ends
//! the archive.

/// The newc magic.
const MAGIC: &[u8; 6] = b"070701";
/// The name of the entry that ends an archive.
const TRAILER: &str = "TRAILER!!!";

/// File type bits of `st_mode`.
const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;
const S_IFLNK: u32 = 0o120_000;
const S_IFCHR: u32 = 0o020_000;

/// A cpio newc archive being written in memory.
pub struct Archive {
    bytes: Vec<u8>,
    next_inode: u32,
}

impl Archive {
    /// An empty archive.
    pub fn new() -> Self {
        Archive {
            bytes: Vec::new(),
            next_inode: 1,
        }
    }

    /// A directory (`path` without a leading `/`, as the kernel expects).
    pub fn directory(&mut self, path: &str) {
        self.entry(path, S_IFDIR | 0o755, 2, (0, 0), &[]);
    }

    /// A regular file with permission bits `mode`.
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, S_IFREG | (mode & 0o7777), 1, (0, 0), data);
    }

    /// A symbolic link to `target`; the target is the entry's data.
    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, S_IFLNK | 0o777, 1, (0, 0), target.as_bytes());
    }

    /// A character device node, e.g. `dev/console` (5, 1): without it the
    /// kernel starts init with no console to write to.
    pub fn char_device(&mut self, path: &str, major: u32, minor: u32) {
        self.entry(path, S_IFCHR | 0o600, 1, (major, minor), &[]);
    }

    /// Ends the archive and returns its bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.header(0, 0, 1, 0, (0, 0), TRAILER);
        pad(&mut self.bytes);
        self.bytes
    }

    fn entry(&mut self, path: &str, mode: u32, nlink: u32, rdev: (u32, u32), data: &[u8]) {
        let inode = self.next_inode;
        self.next_inode += 1;
        self.header(inode, mode, nlink, data.len(), rdev, path);
        self.bytes.extend_from_slice(data);
        pad(&mut self.bytes);
    }

    fn header(
        &mut self,
        inode: u32,
        mode: u32,
        nlink: u32,
        size: usize,
        (rdev_major, rdev_minor): (u32, u32),
        name: &str,
    ) {
        self.bytes.extend_from_slice(MAGIC);
        let name_size = name.len() + 1;
        // ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor,
        // rdevmajor, rdevminor, namesize, check (0: no checksum in newc).
        let fields = [
            inode,
            mode,
            0,
            0,
            nlink,
            0,
            size as u32,
            0,
            0,
            rdev_major,
            rdev_minor,
            name_size as u32,
            0,
        ];
        for field in fields {
            self.bytes
                .extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        pad(&mut self.bytes);
    }
}

/// Pads to a multiple of 4 bytes; headers start at a multiple of 4, so
/// padding the whole archive pads the name (after the 110-byte header)
/// and the data alike.
fn pad(bytes: &mut Vec<u8>) {
    while bytes.len() % 4 != 0 {
        bytes.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One entry read back by hand: (name, header fields, data).
    type Entry = (String, Vec<u32>, Vec<u8>);

    fn field(header: &[u8], index: usize) -> u32 {
        let start = 6 + index * 8;
        let text = std::str::from_utf8(&header[start..start + 8]).unwrap();
        u32::from_str_radix(text, 16).unwrap()
    }

    fn round_up(n: usize) -> usize {
        (n + 3) & !3
    }

    fn parse(bytes: &[u8]) -> Vec<Entry> {
        let mut entries = Vec::new();
        let mut at = 0;
        loop {
            let header = &bytes[at..at + 110];
            assert_eq!(&header[..6], MAGIC, "magic at offset {at}");
            let fields: Vec<u32> = (0..13).map(|i| field(header, i)).collect();
            let name_size = fields[11] as usize;
            let name_start = at + 110;
            let name = &bytes[name_start..name_start + name_size];
            assert_eq!(name.last(), Some(&0), "names end in NUL");
            let name = String::from_utf8(name[..name_size - 1].to_vec()).unwrap();
            let data_start = round_up(name_start + name_size);
            let size = fields[6] as usize;
            let data = bytes[data_start..data_start + size].to_vec();
            at = round_up(data_start + size);
            let done = name == TRAILER;
            entries.push((name, fields, data));
            if done {
                assert_eq!(at, bytes.len(), "nothing after the trailer");
                return entries;
            }
        }
    }

    #[test]
    fn entries_read_back_field_by_field() {
        let mut archive = Archive::new();
        archive.directory("bin");
        archive.file("bin/busybox", 0o755, b"\x7fELF-ish");
        archive.symlink("bin/sh", "busybox");
        archive.char_device("dev/console", 5, 1);
        archive.file("init", 0o755, b"#!/bin/sh\n");
        let bytes = archive.finish();
        assert_eq!(bytes.len() % 4, 0);

        let entries = parse(&bytes);
        let names: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "bin/busybox",
                "bin/sh",
                "dev/console",
                "init",
                TRAILER
            ]
        );
        let (_, dir, _) = &entries[0];
        assert_eq!((dir[0], dir[1], dir[4], dir[6]), (1, 0o040_755, 2, 0));
        let (_, busybox, data) = &entries[1];
        assert_eq!((busybox[0], busybox[1], busybox[6]), (2, 0o100_755, 8));
        assert_eq!(data, b"\x7fELF-ish");
        let (_, sh, target) = &entries[2];
        assert_eq!((sh[1], target.as_slice()), (0o120_777, &b"busybox"[..]));
        let (_, console, _) = &entries[3];
        assert_eq!((console[1], console[9], console[10]), (0o020_600, 5, 1));
        assert_eq!(&entries[4].2, b"#!/bin/sh\n");
        let (_, trailer, _) = &entries[5];
        assert_eq!((trailer[0], trailer[4], trailer[6]), (0, 1, 0));
        // Owner root, no checksum, name sizes count the NUL.
        for (name, fields, _) in &entries {
            assert_eq!((fields[2], fields[3], fields[12]), (0, 0, 0));
            assert_eq!(fields[11] as usize, name.len() + 1);
        }
    }
}
