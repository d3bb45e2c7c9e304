//! The device side of the machine's memory device, modelled on virtio-mem
//! (virtio 1.2, section 5.15): the host sets a *requested size*; the
//! driver sends PLUG and UNPLUG requests for runs of blocks; the device
//! answers each on its own thread (the virtqueue), keeps the *plugged
//! size*, and may refuse (`VIRTIO_MEM_RESP_NACK`). Failure injection makes
//! it refuse the next requests or never answer.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hotkern_physmem::Pfn;
use parking_lot::{Condvar, Mutex};

/// A request on the device's queue: blocks `first..first + count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRequest {
    /// Plug the blocks (`VIRTIO_MEM_REQ_PLUG`).
    Plug {
        /// First block.
        first: usize,
        /// Blocks.
        count: usize,
    },
    /// Unplug the blocks (`VIRTIO_MEM_REQ_UNPLUG`): the driver confirms
    /// it no longer uses them.
    Unplug {
        /// First block.
        first: usize,
        /// Blocks.
        count: usize,
    },
}

/// The device's answer (virtio-mem's response types).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Done.
    Ack,
    /// Refused for now; nothing changed.
    Nack,
    /// A request the device cannot carry out (blocks outside the region,
    /// or not in the state the request assumes); nothing changed.
    Error,
}

struct Registers {
    requested: u64,
    /// Every requested size, by generation.
    sizes: Vec<u64>,
    /// Bumped each time the host sets a requested size.
    generation: u64,
    plugged: Vec<bool>,
    /// The request in flight and its tag.
    queued: Option<(u64, DeviceRequest)>,
    answer: Option<(u64, Answer)>,
    next_tag: u64,
    /// Requests still to refuse.
    refuse: u32,
    /// Requests are taken off the queue and never answered.
    silent: bool,
    stop: bool,
}

/// The machine's memory device as the host sees it: set the requested
/// size, read the plugged size, inject failures.
///
/// ```
/// use hotkern_machine::{Machine, MemoryDeviceConfig};
///
/// let machine = Machine::builder()
///     .memory_device(MemoryDeviceConfig { blocks: 8, block_frames: 32, ..Default::default() })
///     .build()?;
/// let device = machine.memory_device().unwrap();
/// assert_eq!((device.block_frames(), device.region_frames()), (32, 256));
/// let report = machine.resize_memory(96).unwrap();
/// assert_eq!((report.reached, device.plugged_size()), (96, 96));
/// device.refuse_next(1);
/// let report = machine.resize_memory(32).unwrap();
/// assert_eq!(report.reached, 96, "the device refused: nothing taken");
/// # Ok::<(), hotkern_machine::MachineError>(())
/// ```
pub struct MemoryDevice {
    first: Pfn,
    block_frames: u64,
    registers: Mutex<Registers>,
    /// Rung for the device thread: a request queued, or stop.
    device_bell: Condvar,
    /// Rung for the driver: an answer, or a new requested size (the
    /// configuration-change interrupt).
    driver_bell: Condvar,
}

impl MemoryDevice {
    pub(crate) fn new(first: Pfn, blocks: usize, block_frames: u64) -> Self {
        MemoryDevice {
            first,
            block_frames,
            registers: Mutex::new(Registers {
                requested: 0,
                sizes: vec![0],
                generation: 0,
                plugged: vec![false; blocks],
                queued: None,
                answer: None,
                next_tag: 0,
                refuse: 0,
                silent: false,
                stop: false,
            }),
            device_bell: Condvar::new(),
            driver_bell: Condvar::new(),
        }
    }

    /// The region's first frame.
    pub fn first(&self) -> Pfn {
        self.first
    }

    /// Frames in a block: every size is a multiple of it.
    pub fn block_frames(&self) -> u64 {
        self.block_frames
    }

    /// Frames in the whole region.
    pub fn region_frames(&self) -> u64 {
        self.registers.lock().plugged.len() as u64 * self.block_frames
    }

    /// Sets the requested size in frames and interrupts the driver;
    /// returns the request's generation (see
    /// [`Machine::wait_memory`](crate::Machine::wait_memory)). Any size
    /// may be asked for: the driver answers a bad one with a typed error.
    pub fn request_size(&self, frames: u64) -> u64 {
        let mut registers = self.registers.lock();
        registers.requested = frames;
        registers.generation += 1;
        registers.sizes.push(frames);
        self.driver_bell.notify_all();
        registers.generation
    }

    /// The requested size, in frames.
    pub fn requested_size(&self) -> u64 {
        self.registers.lock().requested
    }

    /// The plugged size, in frames: what the driver has confirmed.
    pub fn plugged_size(&self) -> u64 {
        let registers = self.registers.lock();
        registers.plugged.iter().filter(|&&on| on).count() as u64 * self.block_frames
    }

    /// Whether the device counts `block` as plugged.
    pub fn is_plugged(&self, block: usize) -> bool {
        self.registers
            .lock()
            .plugged
            .get(block)
            .copied()
            .unwrap_or(false)
    }

    /// Refuses (NACKs) the next `requests` requests.
    pub fn refuse_next(&self, requests: u32) {
        self.registers.lock().refuse = requests;
    }

    /// From now on (until called with `false`), takes requests off the
    /// queue and never answers them: a device that never confirms.
    pub fn set_silent(&self, silent: bool) {
        self.registers.lock().silent = silent;
    }

    /// The current request: `(generation, requested frames)`.
    pub(crate) fn request(&self) -> (u64, u64) {
        let registers = self.registers.lock();
        (registers.generation, registers.requested)
    }

    /// The size requested at `generation`.
    pub(crate) fn requested_at(&self, generation: u64) -> u64 {
        let registers = self.registers.lock();
        registers
            .sizes
            .get(generation as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Marks the lowest `blocks` blocks plugged, as a device does for the
    /// memory it starts with; false if they do not fit.
    pub(crate) fn boot_plug(&self, blocks: usize) -> bool {
        let mut registers = self.registers.lock();
        let Some(boot) = registers.plugged.get_mut(..blocks) else {
            return false;
        };
        boot.fill(true);
        registers.requested = blocks as u64 * self.block_frames;
        registers.sizes[0] = registers.requested;
        true
    }

    /// Waits until the generation passes `seen` or the device stops;
    /// returns false on stop.
    pub(crate) fn wait_request(&self, seen: u64) -> bool {
        let mut registers = self.registers.lock();
        while registers.generation == seen && !registers.stop {
            self.driver_bell.wait(&mut registers);
        }
        !registers.stop
    }

    /// Sends `request` and waits for the answer up to `bound`; `None` if
    /// none came (the request is withdrawn, so none comes later).
    pub(crate) fn send(&self, request: DeviceRequest, bound: Duration) -> Option<Answer> {
        let deadline = Instant::now() + bound;
        let mut registers = self.registers.lock();
        let tag = registers.next_tag;
        registers.next_tag += 1;
        registers.queued = Some((tag, request));
        self.device_bell.notify_all();
        loop {
            if let Some((answered, answer)) = registers.answer {
                if answered == tag {
                    registers.answer = None;
                    return Some(answer);
                }
            }
            if registers.stop
                || self
                    .driver_bell
                    .wait_until(&mut registers, deadline)
                    .timed_out()
            {
                if registers.queued.is_some_and(|(queued, _)| queued == tag) {
                    registers.queued = None;
                }
                return None;
            }
        }
    }

    /// Stops the device thread and wakes the driver.
    pub(crate) fn stop(&self) {
        self.registers.lock().stop = true;
        self.device_bell.notify_all();
        self.driver_bell.notify_all();
    }

    /// The device thread: answers each request in turn until stopped.
    pub(crate) fn spawn(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let device = Arc::clone(self);
        std::thread::Builder::new()
            .name("memdev/device".into())
            .spawn(move || device.run())
    }

    fn run(&self) {
        let mut registers = self.registers.lock();
        loop {
            if registers.stop {
                return;
            }
            let Some((tag, request)) = registers.queued.take() else {
                self.device_bell.wait(&mut registers);
                continue;
            };
            if registers.silent {
                continue;
            }
            let answer = if registers.refuse > 0 {
                registers.refuse -= 1;
                Answer::Nack
            } else {
                apply(&mut registers.plugged, request)
            };
            registers.answer = Some((tag, answer));
            self.driver_bell.notify_all();
        }
    }
}

/// Carries out a request on the plugged map; an error changes nothing.
fn apply(plugged: &mut [bool], request: DeviceRequest) -> Answer {
    let (first, count, plug) = match request {
        DeviceRequest::Plug { first, count } => (first, count, true),
        DeviceRequest::Unplug { first, count } => (first, count, false),
    };
    let Some(blocks) = first
        .checked_add(count)
        .and_then(|end| plugged.get_mut(first..end))
    else {
        return Answer::Error;
    };
    if count == 0 || blocks.contains(&plug) {
        return Answer::Error;
    }
    blocks.fill(plug);
    Answer::Ack
}
