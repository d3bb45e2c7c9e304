//! What an architecture can do yet, so that the runs that need what it
//! lacks are skipped, and said to be skipped, instead of failing.

/// The optional pieces an architecture provides (`arch::CAPABILITIES`).
///
/// ```ignore
/// if !arch::CAPABILITIES.text_patching {
///     skipped.push("trace_patch");
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Rewriting the kernel's own call sites while every CPU runs
    /// (`arch::text`): the function tracer and the patching check.
    pub text_patching: bool,
    /// The virtio-mem device's configuration interrupt routed to a CPU:
    /// the memory hot-plug run.
    pub virtio_mem: bool,
    /// The virtio-blk disk through PCI I/O space: the load and walk runs.
    pub disk: bool,
}
