//! The bit layouts of a CPU buffer's `tail` word and ring slots, with their
//! encoders and decoders (what each word is for, and who writes it: the
//! design header of `cpu.rs`). All of them are on the hot path, so they
//! are `#[inline(always)]` shifts and masks.
//!
//! * `tail` = `seq:48 | page:16` — [`Tail`]: the sequence number of the page
//!   being written and the page frame holding it.
//! * slot = `free:1 | consumed:10 | page:14 | seq:39` — one per ring
//!   position: the page frame there, and either FREE (a spare, no data) or
//!   the sequence number of the data page it holds plus how many of its
//!   events a partial read already consumed.

/// Bits of a slot's sequence number (the low bits of the page's `seq`).
pub(super) const SEQ_BITS: u32 = 39;
/// Mask of a slot's sequence number.
pub(super) const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const PAGE_SHIFT: u32 = SEQ_BITS;
/// Bits of a page frame id in a slot.
pub(super) const PAGE_BITS: u32 = 14;
const PAGE_MASK: u64 = (1 << PAGE_BITS) - 1;
const CONSUMED_SHIFT: u32 = PAGE_SHIFT + PAGE_BITS;
/// Largest count of consumed events a slot records.
pub(super) const CONSUMED_MASK: u64 = (1 << 10) - 1;
/// A slot's FREE flag: its frame is a spare, holding no data.
pub(super) const FREE: u64 = 1 << 63;

/// A data slot: page `seq` in frame `page`, `consumed` of its events read.
#[inline(always)]
pub(super) fn slot_data(seq: u64, page: u64, consumed: u64) -> u64 {
    (consumed << CONSUMED_SHIFT) | (page << PAGE_SHIFT) | (seq & SEQ_MASK)
}
/// A FREE slot holding the spare frame `page`.
#[inline(always)]
pub(super) fn slot_free(page: u64) -> u64 {
    FREE | (page << PAGE_SHIFT)
}
/// The frame a slot holds.
#[inline(always)]
pub(super) fn slot_page(slot: u64) -> usize {
    ((slot >> PAGE_SHIFT) & PAGE_MASK) as usize
}
/// The (low bits of the) sequence number of a data slot's page.
#[inline(always)]
pub(super) fn slot_seq(slot: u64) -> u64 {
    slot & SEQ_MASK
}
/// Events of a data slot's page that partial reads already consumed.
#[inline(always)]
pub(super) fn slot_consumed(slot: u64) -> u64 {
    (slot >> CONSUMED_SHIFT) & CONSUMED_MASK
}

const TAIL_PAGE_BITS: u32 = 16;
const TAIL_PAGE_MASK: u64 = (1 << TAIL_PAGE_BITS) - 1;
// Every frame id a slot can hold fits the tail's page field.
const _: () = assert!(PAGE_BITS <= TAIL_PAGE_BITS);

/// The `tail` word, `seq:48 | page:16`: which page is being written.
///
/// * `seq` counts pages since the ring was made (slot `seq % pages` holds
///   the page; `commit` and the reader's position count in the same unit).
/// * `page` is the frame holding it: an index into the frames and their
///   event counts, only ever taken from a slot, never computed.
///
/// Both change together, in one store by the writer that sealed the
/// previous page, so a reader loading `tail` never pairs one page's number
/// with another page's frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Tail(u64);

impl Tail {
    /// Page `seq`, held by frame `page`.
    #[inline(always)]
    pub(super) fn new(seq: u64, page: usize) -> Self {
        debug_assert!(page as u64 <= TAIL_PAGE_MASK);
        Tail((seq << TAIL_PAGE_BITS) | page as u64)
    }

    /// The word as stored.
    #[inline(always)]
    pub(super) fn from_bits(bits: u64) -> Self {
        Tail(bits)
    }

    /// The word to store.
    #[inline(always)]
    pub(super) fn bits(self) -> u64 {
        self.0
    }

    /// The sequence number of the page being written.
    #[inline(always)]
    pub(super) fn seq(self) -> u64 {
        self.0 >> TAIL_PAGE_BITS
    }

    /// The frame holding it.
    #[inline(always)]
    pub(super) fn page(self) -> usize {
        (self.0 & TAIL_PAGE_MASK) as usize
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_seq_and_page_apart() {
        let tail = Tail::new((1 << 47) + 5, (1 << PAGE_BITS) - 1);
        assert_eq!(
            (tail.seq(), tail.page()),
            ((1 << 47) + 5, (1 << PAGE_BITS) - 1)
        );
        assert_eq!(Tail::from_bits(tail.bits()), tail);
        assert_eq!(Tail::from_bits(0), Tail::new(0, 0));
    }

    #[test]
    fn slots_keep_their_fields_apart() {
        let slot = slot_data(SEQ_MASK + 3, 7, 9);
        assert_eq!(
            (slot_seq(slot), slot_page(slot), slot_consumed(slot)),
            (2, 7, 9)
        );
        assert_eq!(slot & FREE, 0);
        let free = slot_free(7);
        assert_ne!(free & FREE, 0);
        assert_eq!(slot_page(free), 7);
    }
}
