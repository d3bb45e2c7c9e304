//! A striped set: data interleaved over several devices, like a
//! multi-disk pool, each member behind its own cache.

use alloc::vec::Vec;

use crate::cache::{BlockCache, Span};
use crate::error::{ConfigError, IoError};
use crate::stats::CacheStats;

/// Stripes of `stripe_blocks` blocks dealt round-robin over the members:
/// logical stripe `k` lives on member `k % n` at that member's stripe
/// `k / n`. Each member is a cache in front of its own device, so a
/// sequential read of the set is a sequential read of every member.
///
/// ```
/// use hotkern_bcache::{BlockCache, HotkernCache, MemoryDevice, StripedSet};
/// let members = (0..4)
///     .map(|_| HotkernCache::new(MemoryDevice::zeroed(64, 512).unwrap(), 16 << 10))
///     .collect();
/// let mut set = StripedSet::new(members, 8).unwrap();
/// assert_eq!(set.block_count(), 256);
/// set.write(7, 500, &[9u8; 40]).unwrap(); // crosses from member 0 to member 1
/// let mut back = [0u8; 40];
/// set.read(7, 500, &mut back).unwrap();
/// assert_eq!(back, [9u8; 40]);
/// ```
#[derive(Debug)]
pub struct StripedSet<C> {
    members: Vec<C>,
    stripe_blocks: u64,
    block_size: usize,
    block_count: u64,
    requests: u64,
}

impl<C: BlockCache> StripedSet<C> {
    /// Stripes over `members` (same block size and count), `stripe_blocks`
    /// blocks per stripe. Only whole stripes of each member are used.
    pub fn new(members: Vec<C>, stripe_blocks: u64) -> Result<Self, ConfigError> {
        let first = members.first().ok_or(ConfigError::NoMembers)?;
        if stripe_blocks == 0 {
            return Err(ConfigError::NoMembers);
        }
        let (block_size, member_blocks) = (first.block_size(), first.block_count());
        if members
            .iter()
            .any(|m| m.block_size() != block_size || m.block_count() != member_blocks)
        {
            return Err(ConfigError::MismatchedMembers);
        }
        let stripes = member_blocks / stripe_blocks;
        if stripes == 0 {
            return Err(ConfigError::Empty);
        }
        let block_count = stripes * stripe_blocks * members.len() as u64;
        Ok(StripedSet {
            members,
            stripe_blocks,
            block_size,
            block_count,
            requests: 0,
        })
    }

    /// The members, in stripe order.
    pub fn members(&self) -> &[C] {
        &self.members
    }

    fn locate(&self, block: u64) -> (usize, u64) {
        let n = self.members.len() as u64;
        let stripe = block / self.stripe_blocks;
        let within = block % self.stripe_blocks;
        (
            (stripe % n) as usize,
            (stripe / n) * self.stripe_blocks + within,
        )
    }

    /// The piece of a request that starts `offset` bytes into `block` and
    /// has `left` bytes to go.
    fn piece(&self, block: u64, offset: usize, left: usize) -> StripePiece {
        let left_in_stripe = self.stripe_blocks - block % self.stripe_blocks;
        let room = left_in_stripe as usize * self.block_size - offset;
        let (member, member_block) = self.locate(block);
        StripePiece {
            member,
            member_block,
            len: room.min(left),
            next: block + left_in_stripe,
        }
    }
}

/// The part of a request inside one stripe, from [`StripedSet::piece`].
struct StripePiece {
    /// The member holding the stripe.
    member: usize,
    /// Where the piece starts on the member.
    member_block: u64,
    /// Bytes of the request in this stripe.
    len: usize,
    /// First block of the next stripe.
    next: u64,
}

impl<C: BlockCache> BlockCache for StripedSet<C> {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        self.block_count
    }

    fn read(&mut self, block: u64, offset: usize, buf: &mut [u8]) -> Result<(), IoError> {
        let span = Span::new(block, offset, buf.len(), self.block_size, self.block_count)?;
        self.requests += 1;
        let (mut block, mut offset, mut done) = (span.first, span.offset, 0);
        while done < span.len {
            let piece = self.piece(block, offset, span.len - done);
            let to = &mut buf[done..done + piece.len];
            self.members[piece.member].read(piece.member_block, offset, to)?;
            (block, offset, done) = (piece.next, 0, done + piece.len);
        }
        Ok(())
    }

    fn write(&mut self, block: u64, offset: usize, data: &[u8]) -> Result<(), IoError> {
        let span = Span::new(block, offset, data.len(), self.block_size, self.block_count)?;
        self.requests += 1;
        let (mut block, mut offset, mut done) = (span.first, span.offset, 0);
        while done < span.len {
            let piece = self.piece(block, offset, span.len - done);
            let from = &data[done..done + piece.len];
            self.members[piece.member].write(piece.member_block, offset, from)?;
            (block, offset, done) = (piece.next, 0, done + piece.len);
        }
        Ok(())
    }

    /// The members' counters added up, with the set's own request count.
    fn stats(&self) -> CacheStats {
        let mut total = self
            .members
            .iter()
            .fold(CacheStats::default(), |sum, m| sum + m.stats());
        total.requests = self.requests;
        total
    }

    fn reset_stats(&mut self) {
        self.requests = 0;
        for member in &mut self.members {
            member.reset_stats();
        }
    }

    fn name(&self) -> &'static str {
        self.members.first().map_or("striped", |m| m.name())
    }
}
