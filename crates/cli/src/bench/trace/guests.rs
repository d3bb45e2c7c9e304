//! What the two guests of `bench trace --platform qemu` share: the
//! machine they run on, and the figures each side's three loops give.

/// vCPUs of both guests, as `bench cpuhp --platform qemu` gives them.
pub const CPUS: u32 = 4;
/// Memory of both guests.
pub const MEMORY_MIB: u64 = 128;

/// Nanoseconds per call of each round's three loops.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loops {
    /// Untraced.
    pub floor_ns: Vec<f64>,
    /// Traced, tracing off.
    pub off_ns: Vec<f64>,
    /// Traced, tracing on.
    pub on_ns: Vec<f64>,
}
