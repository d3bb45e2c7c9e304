//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod fat;

use std::cell::RefCell;
use std::rc::Rc;

use hotkern_bcache::{check_transfer, BlockDevice, IoError};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// A memory device whose bytes the test can read while a cache owns it.
#[derive(Clone)]
pub struct SharedDisk {
    pub bytes: Rc<RefCell<Vec<u8>>>,
    pub block_size: usize,
    pub max_transfer: u32,
}

impl SharedDisk {
    pub fn new(blocks: usize, block_size: usize, max_transfer: u32, seed: u64) -> Self {
        SharedDisk {
            bytes: Rc::new(RefCell::new(pattern(blocks * block_size, seed))),
            block_size,
            max_transfer,
        }
    }

    /// A disk holding `bytes` (a whole number of blocks).
    pub fn from_bytes(bytes: Vec<u8>, block_size: usize, max_transfer: u32) -> Self {
        assert_eq!(bytes.len() % block_size, 0);
        SharedDisk {
            bytes: Rc::new(RefCell::new(bytes)),
            block_size,
            max_transfer,
        }
    }

    pub fn snapshot(&self) -> Vec<u8> {
        self.bytes.borrow().clone()
    }
}

impl BlockDevice for SharedDisk {
    fn block_size(&self) -> usize {
        self.block_size
    }
    fn block_count(&self) -> u64 {
        (self.bytes.borrow().len() / self.block_size) as u64
    }
    fn max_transfer_blocks(&self) -> u32 {
        self.max_transfer
    }
    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        check_transfer(self, first, buf.len())?;
        let at = first as usize * self.block_size;
        buf.copy_from_slice(&self.bytes.borrow()[at..at + buf.len()]);
        Ok(())
    }
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        check_transfer(self, first, data.len())?;
        let at = first as usize * self.block_size;
        self.bytes.borrow_mut()[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
}

/// Deterministic bytes that differ from block to block.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0; len];
    rng(seed).fill_bytes(&mut out);
    out
}

/// The tests' seeded generator. `StdRng` is ChaCha12 on every platform in
/// rand 0.9 (`SmallRng` changes algorithm with the pointer width), so a
/// seed that fails here fails on every host.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}
