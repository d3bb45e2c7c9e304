//! A small reader of the flattened device tree (the Devicetree
//! Specification v0.4, chapter 5, "Flattened Devicetree (DTB) Format"):
//! checks the header, then walks the structure block and hands each node,
//! with the few properties this kernel reads, to a visitor.
//!
//! It allocates nothing (the tree is read before there is a heap) and
//! trusts nothing: every offset and length is checked against the blob,
//! and a malformed tree is a [`FdtError`], never a read outside it.

use core::fmt;

/// The header's magic number, big-endian in the blob.
pub const MAGIC: u32 = 0xd00d_feed;
/// The oldest structure version whose layout this reader knows.
const LAST_COMPATIBLE_VERSION: u32 = 16;
/// Bytes of the header this reader uses (version 17's ten words).
const HEADER_BYTES: usize = 40;
/// The largest tree accepted: QEMU's are a few KiB.
const MAX_TOTAL_SIZE: u32 = 2 << 20;
/// Nodes deeper than this are refused (QEMU's tree is four deep).
pub const MAX_DEPTH: usize = 8;

const BEGIN_NODE: u32 = 1;
const END_NODE: u32 = 2;
const PROPERTY: u32 = 3;
const NOP: u32 = 4;
const END: u32 = 9;

/// Why a blob is not a device tree this kernel can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdtError {
    /// The first word is not [`MAGIC`].
    BadMagic(u32),
    /// The header's total size is smaller than a header or too large.
    BadSize(u32),
    /// Its `last_comp_version` is newer than this reader.
    Version(u32),
    /// A block, token or property runs past its end, at this offset.
    Truncated(usize),
    /// An unknown token at this offset of the structure block.
    BadToken(usize, u32),
    /// A name that is not NUL-terminated UTF-8, at this offset.
    BadName(usize),
    /// Nodes nest deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The structure ends without closing every node.
    Unbalanced,
}

impl fmt::Display for FdtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FdtError::BadMagic(magic) => write!(f, "magic {magic:#x}, not {MAGIC:#x}"),
            FdtError::BadSize(size) => write!(f, "total size {size} out of range"),
            FdtError::Version(version) => write!(f, "needs a version {version} reader"),
            FdtError::Truncated(offset) => write!(f, "truncated at offset {offset:#x}"),
            FdtError::BadToken(offset, token) => {
                write!(f, "token {token:#x} at offset {offset:#x}")
            }
            FdtError::BadName(offset) => write!(f, "bad name at offset {offset:#x}"),
            FdtError::TooDeep => write!(f, "nodes nest deeper than {MAX_DEPTH}"),
            FdtError::Unbalanced => f.write_str("the structure block ends inside a node"),
        }
    }
}

impl core::error::Error for FdtError {}

/// A checked device tree blob.
///
/// ```ignore
/// let tree = Fdt::parse(bytes)?;
/// tree.walk(|node| if node.device_type == Some("memory") { /* node.reg() */ })?;
/// ```
#[derive(Clone, Copy)]
pub struct Fdt<'a> {
    blob: &'a [u8],
    structure: &'a [u8],
    strings: &'a [u8],
}

/// One node as the visitor sees it: its name, depth, the cells its `reg`
/// is written in (its parent's `#address-cells` and `#size-cells`), and
/// the properties this kernel reads.
#[derive(Clone, Copy, Default)]
pub struct Node<'a> {
    /// The name with its unit address (`memory@40000000`); "" for the root.
    pub name: &'a str,
    /// The parent's name.
    pub parent: &'a str,
    /// Cells of an address in `reg` (the parent's `#address-cells`).
    pub address_cells: u32,
    /// Cells of a size in `reg` (the parent's `#size-cells`).
    pub size_cells: u32,
    /// Its own `#address-cells` and `#size-cells`, for its children.
    children_cells: (u32, u32),
    /// `reg`, raw.
    pub reg: &'a [u8],
    /// `compatible`: NUL-separated strings.
    pub compatible: &'a [u8],
    /// `device_type`.
    pub device_type: Option<&'a str>,
    /// `method` (PSCI's conduit).
    pub method: Option<&'a str>,
    /// `bootargs` (under `/chosen`).
    pub bootargs: Option<&'a str>,
    /// `status`: a node with `"disabled"` is not there.
    pub status: Option<&'a str>,
    /// `phandle`: how other nodes name it (an `interrupt-map`'s parent).
    pub phandle: Option<u32>,
    /// `ranges`, raw: a bus's windows into its parent's address space.
    pub ranges: &'a [u8],
    /// `interrupt-map`, raw: a bus's child interrupts to its parent
    /// controller's.
    pub interrupt_map: &'a [u8],
    /// `interrupt-map-mask`, raw: the child bits the map matches on.
    pub interrupt_map_mask: &'a [u8],
    /// Its own `#interrupt-cells` (0 when it has none).
    pub interrupt_cells: u32,
}

impl<'a> Node<'a> {
    /// Whether one of its `compatible` strings is `what`.
    pub fn is_compatible(&self, what: &str) -> bool {
        self.compatible
            .split(|&byte| byte == 0)
            .any(|name| name == what.as_bytes())
    }

    /// Its own `#address-cells` and `#size-cells` (what its children's
    /// `reg` and its own `ranges` child addresses are written in).
    pub fn cells_for_children(&self) -> (u32, u32) {
        self.children_cells
    }

    /// Whether the node is enabled (no `status`, or `"okay"`/`"ok"`).
    pub fn enabled(&self) -> bool {
        matches!(self.status, None | Some("okay") | Some("ok"))
    }

    /// Its `reg` as `(address, size)` pairs; a size of no cells is 0, an
    /// address or size wider than two cells is cut to its low 64 bits.
    pub fn reg(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let address_cells = self.address_cells as usize;
        let size_cells = self.size_cells as usize;
        let entry = 4 * (address_cells + size_cells);
        let cells = |bytes: &[u8]| {
            bytes
                .chunks_exact(4)
                .fold(0u64, |value, cell| (value << 32) | u64::from(be32(cell)))
        };
        let reg = if entry == 0 { &[][..] } else { self.reg };
        reg.chunks_exact(entry.max(1)).map(move |chunk| {
            let (address, size) = chunk.split_at(4 * address_cells);
            (cells(address), cells(size))
        })
    }
}

fn be32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

/// The big-endian word at `offset` of `bytes`, checked.
fn word(bytes: &[u8], offset: usize) -> Result<u32, FdtError> {
    bytes
        .get(offset..offset.saturating_add(4))
        .map(be32)
        .ok_or(FdtError::Truncated(offset))
}

/// The NUL-terminated UTF-8 string at `offset` of `bytes`.
fn string(bytes: &[u8], offset: usize) -> Result<&str, FdtError> {
    let rest = bytes.get(offset..).ok_or(FdtError::BadName(offset))?;
    let end = rest
        .iter()
        .position(|&byte| byte == 0)
        .ok_or(FdtError::BadName(offset))?;
    core::str::from_utf8(&rest[..end]).map_err(|_| FdtError::BadName(offset))
}

/// A property's value as a string (its last byte is the NUL).
fn value_string(value: &[u8]) -> Option<&str> {
    let text = value.strip_suffix(&[0])?;
    core::str::from_utf8(text).ok()
}

impl<'a> Fdt<'a> {
    /// Checks the header of `blob` and the bounds of its blocks.
    pub fn parse(blob: &'a [u8]) -> Result<Fdt<'a>, FdtError> {
        let magic = word(blob, 0)?;
        if magic != MAGIC {
            return Err(FdtError::BadMagic(magic));
        }
        let total = word(blob, 4)?;
        if (total as usize) < HEADER_BYTES || total > MAX_TOTAL_SIZE {
            return Err(FdtError::BadSize(total));
        }
        let blob = blob
            .get(..total as usize)
            .ok_or(FdtError::Truncated(blob.len()))?;
        let compatible = word(blob, 24)?;
        if compatible > LAST_COMPATIBLE_VERSION + 1 {
            return Err(FdtError::Version(compatible));
        }
        let block = |offset_at: usize, size_at: usize| -> Result<&'a [u8], FdtError> {
            let offset = word(blob, offset_at)? as usize;
            let size = word(blob, size_at)? as usize;
            blob.get(offset..offset.saturating_add(size))
                .ok_or(FdtError::Truncated(offset))
        };
        Ok(Fdt {
            blob,
            structure: block(8, 36)?,
            strings: block(12, 32)?,
        })
    }

    /// Reads the tree at physical address `address`.
    ///
    /// # Safety
    /// `address` is mapped and readable for as long as the tree is used,
    /// for at least the header's 40 bytes and then its `totalsize`.
    pub unsafe fn at(address: u64) -> Result<Fdt<'static>, FdtError> {
        // SAFETY: the caller promises the header is readable.
        let header = unsafe { core::slice::from_raw_parts(address as *const u8, HEADER_BYTES) };
        let magic = word(header, 0)?;
        if magic != MAGIC {
            return Err(FdtError::BadMagic(magic));
        }
        let total = word(header, 4)?.min(MAX_TOTAL_SIZE) as usize;
        // SAFETY: the caller promises `totalsize` bytes are readable.
        Fdt::parse(unsafe { core::slice::from_raw_parts(address as *const u8, total) })
    }

    /// Bytes of the whole blob.
    pub fn total_size(&self) -> usize {
        self.blob.len()
    }

    /// The memory reservation block's `(address, size)` entries.
    pub fn reservations(&self) -> impl Iterator<Item = (u64, u64)> + 'a {
        let start = word(self.blob, 16).unwrap_or(0) as usize;
        let blob = self.blob;
        (0..)
            .map(move |index| {
                let at = start + 16 * index;
                let pair = blob.get(at..at + 16)?;
                let high = |i: usize| u64::from(be32(&pair[i..]));
                Some(((high(0) << 32) | high(4), (high(8) << 32) | high(12)))
            })
            .take_while(|entry| entry.is_some_and(|(address, size)| address != 0 || size != 0))
            .flatten()
    }

    /// Calls `visit` with each node at its end, once every property it has
    /// is read whatever their order: children come before their parent.
    pub fn walk(&self, mut visit: impl FnMut(&Node<'a>)) -> Result<(), FdtError> {
        let structure = self.structure;
        let mut stack: [Node<'a>; MAX_DEPTH] = [Node::default(); MAX_DEPTH];
        let mut depth = 0usize;
        let mut offset = 0usize;
        loop {
            let token = word(structure, offset)?;
            let at = offset;
            offset += 4;
            match token {
                BEGIN_NODE => {
                    if depth == MAX_DEPTH {
                        return Err(FdtError::TooDeep);
                    }
                    let name = string(structure, offset)?;
                    offset = (offset + name.len() + 1).next_multiple_of(4);
                    // The specification's defaults: 2 address cells, 1 size cell.
                    let (address_cells, size_cells, parent) = match depth {
                        0 => (2, 1, ""),
                        _ => {
                            let up = &stack[depth - 1];
                            (up.children_cells.0, up.children_cells.1, up.name)
                        }
                    };
                    stack[depth] = Node {
                        name,
                        parent,
                        address_cells,
                        size_cells,
                        children_cells: (2, 1),
                        ..Node::default()
                    };
                    depth += 1;
                }
                END_NODE => {
                    depth = depth.checked_sub(1).ok_or(FdtError::BadToken(at, token))?;
                    visit(&stack[depth]);
                }
                PROPERTY => {
                    let length = word(structure, offset)? as usize;
                    let name_offset = word(structure, offset + 4)? as usize;
                    let start = offset + 8;
                    let value = structure
                        .get(start..start.saturating_add(length))
                        .ok_or(FdtError::Truncated(start))?;
                    offset = (start + length).next_multiple_of(4);
                    let name = string(self.strings, name_offset)?;
                    let node = depth
                        .checked_sub(1)
                        .map(|top| &mut stack[top])
                        .ok_or(FdtError::BadToken(at, token))?;
                    let cells = || value.get(..4).map(be32);
                    match name {
                        "reg" => node.reg = value,
                        "compatible" => node.compatible = value,
                        "device_type" => node.device_type = value_string(value),
                        "method" => node.method = value_string(value),
                        "bootargs" => node.bootargs = value_string(value),
                        "status" => node.status = value_string(value),
                        "phandle" => node.phandle = cells(),
                        "ranges" => node.ranges = value,
                        "interrupt-map" => node.interrupt_map = value,
                        "interrupt-map-mask" => node.interrupt_map_mask = value,
                        "#interrupt-cells" => node.interrupt_cells = cells().unwrap_or(0).min(4),
                        "#address-cells" => {
                            node.children_cells.0 = cells().unwrap_or(2).min(4);
                        }
                        "#size-cells" => node.children_cells.1 = cells().unwrap_or(1).min(4),
                        _ => {}
                    }
                }
                NOP => {}
                END => {
                    return if depth == 0 {
                        Ok(())
                    } else {
                        Err(FdtError::Unbalanced)
                    };
                }
                _ => return Err(FdtError::BadToken(at, token)),
            }
        }
    }
}

/// Whether [`Fdt::parse`] refuses each kind of bad blob with its own
/// error: the boot's check of the reader (on the target, where the tree
/// is read), from a small good tree made here and broken one way at a time.
pub fn refuses_bad_trees() -> bool {
    // A header (40 bytes), an empty reservation block (16), a structure
    // block with one root node and END (16), no strings.
    let mut good = [0u8; 72];
    let words: [(usize, u32); 10] = [
        (0, MAGIC),
        (4, 72),
        (8, 56),
        (12, 72),
        (16, 40),
        (20, 17),
        (24, 16),
        (28, 0),
        (32, 0),
        (36, 16),
    ];
    for (at, value) in words {
        good[at..at + 4].copy_from_slice(&value.to_be_bytes());
    }
    good[56..60].copy_from_slice(&BEGIN_NODE.to_be_bytes());
    good[64..68].copy_from_slice(&END_NODE.to_be_bytes());
    good[68..72].copy_from_slice(&END.to_be_bytes());
    let walks = |blob: &[u8]| Fdt::parse(blob).and_then(|tree| tree.walk(|_| {}));
    let broken = |at: usize, value: u32| {
        let mut blob = good;
        blob[at..at + 4].copy_from_slice(&value.to_be_bytes());
        walks(&blob)
    };
    walks(&good).is_ok()
        && broken(0, 0xfeed_d00d) == Err(FdtError::BadMagic(0xfeed_d00d))
        && broken(4, 8) == Err(FdtError::BadSize(8))
        && broken(24, 18) == Err(FdtError::Version(18))
        && broken(8, 70) == Err(FdtError::Truncated(70))
        && broken(64, 7) == Err(FdtError::BadToken(8, 7))
        && broken(64, END) == Err(FdtError::Unbalanced)
        && walks(&good[..60]) == Err(FdtError::Truncated(60))
}
