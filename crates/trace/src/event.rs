//! Typed trace events.
//!
//! [`define_event!`](crate::define_event) declares an event (system, name,
//! fields, print format) as a module with a `trace(...)` function. While no
//! installed tracer wants the event, a call costs a NOP where the call
//! sites are patched ([`crate::site`]), else one load of the event's mask
//! and a branch that is not taken; the recording code is out of line.
//!
//! ```
//! hotkern_trace::define_event! {
//!     /// A block was read.
//!     pub block_read in demo {
//!         device: u32,
//!         block: u64,
//!         bytes: u32,
//!     }
//!     print "dev=%u block=%llu bytes=%u", device, block, bytes
//! }
//!
//! block_read::trace(1, 4096, 512); // nothing is listening: a NOP, or a load and a branch
//! let format = block_read::EVENT.format();
//! assert_eq!(format.system(), "demo");
//! // The u64 is aligned after the u32 at 8.
//! assert!(format.to_format_file().contains(" block;\toffset:16;\tsize:8;"));
//! ```

pub(crate) mod direct;
pub(crate) mod format;

use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU16, AtomicU32, Ordering};

pub(crate) use format::Field;
pub use format::{
    EventFormat, BPRINT_ID, COMMON_HEADER_SIZE, FLAG_HARDIRQ, FLAG_IRQS_OFF, FLAG_NMI,
    FLAG_SOFTIRQ, FUNCGRAPH_ENTRY_ID, FUNCGRAPH_EXIT_ID, FUNCTION_ID, HWLAT_ID, KERNEL_STACK_ID,
    PRINT_ID,
};

/// Mask bit set until the event has registered (and got its id).
pub(crate) const UNREGISTERED: u32 = 1 << 31;

/// Most installed tracers at once (one mask bit each).
pub const MAX_INSTANCES: usize = 31;

/// Most events (ids are below this).
pub const MAX_EVENT_IDS: usize = 4096;

/// A type that can be a field of an event.
pub trait FieldType: Copy {
    /// Bytes in the payload.
    const SIZE: usize;
    /// Alignment in the payload (C struct rules).
    const ALIGN: usize;
    /// Whether the value is a signed integer (the format file's `signed:`,
    /// which tells readers how to sign-extend it).
    const SIGNED: bool;
    /// The C type name in the format file.
    const C_TYPE: &'static str;
    /// Elements if this is a fixed array (`char comm[16]`), else 0.
    const ARRAY: usize = 0;
    /// Writes the value at the start of `out` (little-endian, as the CPU).
    fn encode(self, out: &mut [u8]);
}

macro_rules! integer_field {
    ($($t:ty => $c:literal, $signed:literal;)*) => {$(
        impl FieldType for $t {
            const SIZE: usize = core::mem::size_of::<$t>();
            const ALIGN: usize = core::mem::size_of::<$t>();
            const SIGNED: bool = $signed;
            const C_TYPE: &'static str = $c;
            #[inline(always)]
            fn encode(self, out: &mut [u8]) {
                out[..core::mem::size_of::<$t>()].copy_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}

integer_field! {
    i8 => "s8", true;
    u8 => "u8", false;
    i16 => "s16", true;
    u16 => "u16", false;
    i32 => "int", true;
    u32 => "unsigned int", false;
    i64 => "s64", true;
    u64 => "u64", false;
    isize => "long", true;
    usize => "unsigned long", false;
}

impl FieldType for bool {
    const SIZE: usize = 1;
    const ALIGN: usize = 1;
    const SIGNED: bool = false;
    const C_TYPE: &'static str = "bool";
    #[inline(always)]
    fn encode(self, out: &mut [u8]) {
        out[0] = u8::from(self);
    }
}

impl<const N: usize> FieldType for [u8; N] {
    const SIZE: usize = N;
    const ALIGN: usize = 1;
    const SIGNED: bool = true;
    const C_TYPE: &'static str = "char";
    const ARRAY: usize = N;
    #[inline(always)]
    fn encode(self, out: &mut [u8]) {
        out[..N].copy_from_slice(&self);
    }
}

/// A field as declared (before layout); what [`define_event!`] expands to.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct FieldDecl {
    /// The field's name in the format file and in filters (`next_pid`).
    name: &'static str,
    /// The C type the format file declares it with (`pid_t`, `char`).
    c_type: &'static str,
    /// Bytes it takes in the payload (the whole array for arrays).
    size: usize,
    /// Its alignment in the payload, as a C compiler would place it.
    align: usize,
    /// Whether readers sign-extend it (the format file's `signed:`).
    signed: bool,
    /// Array length (0 = scalar).
    array: usize,
}

impl FieldDecl {
    /// The declaration of a field of type `T`.
    pub const fn of<T: FieldType>(name: &'static str) -> Self {
        FieldDecl {
            name,
            c_type: T::C_TYPE,
            size: T::SIZE,
            align: T::ALIGN,
            signed: T::SIGNED,
            array: T::ARRAY,
        }
    }
}

/// A field with its offset (see [`layout`]); what [`define_event!`]
/// expands to.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct FieldDef {
    /// Name, type and size as declared.
    decl: FieldDecl,
    /// Byte offset in the payload.
    offset: usize,
}

impl FieldDef {
    /// Byte offset in the payload, where the event's `trace` writes it.
    pub const fn offset(&self) -> usize {
        self.offset
    }
}

/// Lays fields out like a C struct after the 8-byte common header.
#[doc(hidden)]
pub const fn layout<const N: usize>(decls: [FieldDecl; N]) -> [FieldDef; N] {
    let mut out = [FieldDef {
        decl: FieldDecl {
            name: "",
            c_type: "",
            size: 0,
            align: 1,
            signed: false,
            array: 0,
        },
        offset: 0,
    }; N];
    let mut at = COMMON_HEADER_SIZE;
    let mut i = 0;
    while i < N {
        let align = decls[i].align;
        at = at.div_ceil(align) * align;
        out[i] = FieldDef {
            decl: decls[i],
            offset: at,
        };
        at += decls[i].size;
        i += 1;
    }
    out
}

/// Payload size of laid-out fields (rounded to the largest alignment, as C).
#[doc(hidden)]
pub const fn payload_size(fields: &[FieldDef]) -> usize {
    let mut end = COMMON_HEADER_SIZE;
    let mut align = 4;
    let mut i = 0;
    while i < fields.len() {
        let field_end = fields[i].offset + fields[i].decl.size;
        if field_end > end {
            end = field_end;
        }
        if fields[i].decl.align > align {
            align = fields[i].decl.align;
        }
        i += 1;
    }
    end.div_ceil(align) * align
}

/// A statically defined event: its identity and the mask that call sites
/// test (`repr(C)`, the mask first: see [`crate::site`]).
#[derive(Debug)]
#[repr(C)]
pub struct Event {
    mask: AtomicU32,
    /// The one consumer of the event, called without walking the mask or
    /// testing the tracer's state of it; null when none or several
    /// (`event::direct`).
    direct: AtomicPtr<crate::Tracer>,
    id: AtomicU16,
    system: &'static str,
    name: &'static str,
    fields: &'static [FieldDef],
    print_fmt: &'static str,
    size: usize,
}

impl Event {
    /// Used by [`define_event!`](crate::define_event).
    #[doc(hidden)]
    pub const fn new(
        system: &'static str,
        name: &'static str,
        fields: &'static [FieldDef],
        print_fmt: &'static str,
        size: usize,
    ) -> Self {
        Event {
            mask: AtomicU32::new(UNREGISTERED),
            direct: AtomicPtr::new(ptr::null_mut()),
            id: AtomicU16::new(0),
            system,
            name,
            fields,
            print_fmt,
            size,
        }
    }

    /// True if some tracer wants this event (or it has not registered yet).
    /// This is the call site's only cost while tracing is off.
    #[doc(hidden)]
    #[inline(always)]
    pub fn is_hot(&self) -> bool {
        self.mask.load(Ordering::Relaxed) != 0
    }

    /// The enable word the call sites test.
    pub(crate) fn enable_word(&self) -> &AtomicU32 {
        &self.mask
    }

    /// The direct word: the event's only consumer, or null
    /// (`event::direct` decides it).
    pub(crate) fn direct_word(&self) -> &AtomicPtr<crate::Tracer> {
        &self.direct
    }

    /// The event's id, registering it first if needed.
    pub fn id(&'static self) -> u16 {
        let id = self.id.load(Ordering::Acquire);
        if id != 0 {
            return id;
        }
        register(self)
    }

    /// The subsystem the event is grouped under (`events/<system>/`).
    pub fn system(&self) -> &'static str {
        self.system
    }

    /// The event's name within its system (`events/<system>/<name>`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Payload size in bytes, common header included.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The event's format (registering it to get its id).
    pub fn format(&'static self) -> EventFormat {
        let fields = self
            .fields
            .iter()
            .map(|f| {
                if f.decl.array > 0 {
                    Field::array(
                        f.decl.name,
                        f.decl.c_type,
                        f.decl.array,
                        f.offset,
                        f.decl.size,
                    )
                } else {
                    Field::scalar(
                        f.decl.name,
                        f.decl.c_type,
                        f.offset,
                        f.decl.size,
                        f.decl.signed,
                    )
                }
            })
            .collect();
        EventFormat {
            id: self.id(),
            system: self.system.into(),
            name: self.name.into(),
            fields,
            print_fmt: self.print_fmt.into(),
        }
    }

    pub(crate) fn set_instance(&self, slot: usize, on: bool) {
        if on {
            self.mask.fetch_or(1 << slot, Ordering::AcqRel);
        } else {
            self.mask.fetch_and(!(1 << slot), Ordering::AcqRel);
        }
    }

    /// Records the event in every installed tracer that wants it; `fill`
    /// writes the fields into the payload (whose first 8 bytes are the
    /// common header, already filled). The payload size comes as a
    /// compile-time constant (what [`define_event!`](crate::define_event)
    /// passes), so that the whole recording path is inlined into the
    /// event's out-of-line `emit` and the field writes need no bounds
    /// checks. `size` must be [`Event::size`].
    #[doc(hidden)]
    #[inline(always)]
    pub fn emit_sized(&'static self, size: usize, fill: impl Fn(&mut [u8])) {
        debug_assert_eq!(size, self.size);
        let mut mask = self.mask.load(Ordering::Acquire);
        if mask & UNREGISTERED != 0 {
            register(self);
            mask = self.mask.load(Ordering::Acquire);
        }
        let id = self.id.load(Ordering::Acquire);
        // One consumer (the common case) gets a straight call to its
        // handler (`event::direct`). Recording inside a loop over tracers
        // kept the loop's state in saved registers and cost ~2 ns per
        // event.
        match direct::decode(self.direct.load(Ordering::Acquire)) {
            Some((tracer, direct::EventHandler::Record)) => {
                tracer.record_event_direct(id, size, fill);
            }
            Some((tracer, direct::EventHandler::Hook)) => tracer.hook_event_direct(id, size, &fill),
            None => {
                let bits = mask & !UNREGISTERED;
                if bits & bits.wrapping_sub(1) != 0 {
                    emit_each(bits, id, size, &fill);
                } else if let Some(tracer) = crate::tracer::instance(bits.trailing_zeros() as usize)
                {
                    // One tracer with two consumers (enabled and hooked),
                    // or direct calls off: its state says what to do. Not
                    // through `emit_each`, so a hook finds the same frames
                    // above it (a `stacktrace` trigger cuts the tracer's
                    // own frames from the trace by where its payload is).
                    tracer.record_event(id, size, &fill);
                }
            }
        }
    }
}

const _: () = assert!(core::mem::offset_of!(Event, mask) == 0);

/// Records an event for every tracer in `bits`, each testing its state
/// of it: the list, for events with several consumers.
#[cold]
#[inline(never)]
fn emit_each(mut bits: u32, id: u16, size: usize, fill: &dyn Fn(&mut [u8])) {
    while bits != 0 {
        let slot = bits.trailing_zeros() as usize;
        bits &= bits - 1;
        if let Some(tracer) = crate::tracer::instance(slot) {
            tracer.record_event(id, size, fill);
        }
    }
}

struct Registry {
    events: Vec<&'static Event>,
    next_id: u16,
}

static REGISTRY: spin::Mutex<Registry> = spin::Mutex::new(Registry {
    events: Vec::new(),
    next_id: format::FIRST_DYNAMIC_ID,
});

/// Registers `event` (idempotent) and returns its id; installed tracers
/// see it from then on. Events register themselves on
/// their first hot call; registering up front lets a tracer enable them by
/// name before they fire.
pub fn register(event: &'static Event) -> u16 {
    let mut registry = REGISTRY.lock();
    let id = event.id.load(Ordering::Acquire);
    if id != 0 {
        return id;
    }
    let id = registry.next_id;
    if usize::from(id) >= MAX_EVENT_IDS {
        // Out of ids: the event stays unregistered and silent.
        event.mask.store(0, Ordering::Release);
        return 0;
    }
    registry.next_id += 1;
    registry.events.push(event);
    event.id.store(id, Ordering::Release);
    event.mask.fetch_and(!UNREGISTERED, Ordering::AcqRel);
    id
}

/// Every registered event, in id order: every event of the site table,
/// and those registered by their first call or by [`register`].
pub(crate) fn registered() -> Vec<&'static Event> {
    crate::site::ensure_registered();
    REGISTRY.lock().events.clone()
}

/// The registered event with this id.
pub(crate) fn by_id(id: u16) -> Option<&'static Event> {
    crate::site::ensure_registered();
    REGISTRY
        .lock()
        .events
        .iter()
        .copied()
        .find(|e| e.id.load(Ordering::Relaxed) == id)
}

/// Formats of the built-in events and every registered event.
pub(crate) fn all_formats() -> Vec<EventFormat> {
    let mut formats = format::builtin_formats();
    formats.extend(registered().into_iter().map(Event::format));
    formats
}

/// Defines a typed trace event as a module with a `trace(...)` function and
/// its `EVENT` static. See the [module documentation](crate::event).
#[macro_export]
macro_rules! define_event {
    (
        $(#[$meta:meta])*
        $vis:vis $name:ident in $system:ident {
            $($field:ident : $ty:ty),* $(,)?
        }
        print $fmt:literal $(, $arg:ident)* $(,)?
    ) => {
        $(#[$meta])*
        #[allow(non_snake_case, dead_code)]
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            const DECLS: &[$crate::event::FieldDecl] =
                &[$($crate::event::FieldDecl::of::<$ty>(stringify!($field))),*];
            const COUNT: usize = DECLS.len();
            const FIELDS: [$crate::event::FieldDef; COUNT] = {
                let mut decls = [$crate::event::FieldDecl::of::<u8>(""); COUNT];
                let mut i = 0;
                while i < COUNT {
                    decls[i] = DECLS[i];
                    i += 1;
                }
                $crate::event::layout(decls)
            };
            const SIZE: usize = $crate::event::payload_size(&FIELDS);
            const PRINT_FMT: &str = concat!("\"", $fmt, "\"" $(, ", REC->", stringify!($arg))*);

            /// The event's static: identity, format and the enable mask.
            pub static EVENT: $crate::event::Event = $crate::event::Event::new(
                stringify!($system),
                stringify!($name),
                &FIELDS,
                PRINT_FMT,
                SIZE,
            );

            /// Records the event if any tracer wants it: a NOP while none
            /// does, where call sites are patched ([`site`]($crate::site)).
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            pub fn trace($($field: $ty),*) {
                $crate::__event_site!(EVENT, {
                    emit($($field),*);
                });
            }

            /// [`trace`] through the portable call site: one load of the
            /// enable word and a branch, never patched (`bench trace`'s
            /// `hotkern-branch`).
            #[doc(hidden)]
            #[inline(always)]
            #[allow(clippy::too_many_arguments)]
            pub fn trace_branch($($field: $ty),*) {
                if EVENT.is_hot() {
                    emit($($field),*);
                }
            }

            #[cold]
            #[inline(never)]
            #[allow(clippy::too_many_arguments)]
            fn emit($($field: $ty),*) {
                // `move`: the fields travel in registers, not by reference.
                EVENT.emit_sized(SIZE, move |payload: &mut [u8]| {
                    let mut _index = 0;
                    $(
                        $crate::event::FieldType::encode($field, &mut payload[FIELDS[_index].offset()..]);
                        _index += 1;
                    )*
                });
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::{by_id, format, register, Event};

    crate::define_event! {
        /// Test event.
        pub sample_event in testsys {
            small: u8,
            big: u64,
            signed: i32,
            name: [u8; 6],
            flag: bool,
        }
        print "small=%u big=%llu signed=%d name=%s", small, big, signed, name
    }

    #[test]
    fn layout_follows_c_struct_rules() {
        let format = sample_event::EVENT.format();
        let offsets: alloc::vec::Vec<(alloc::string::String, usize, usize)> = format
            .fields
            .iter()
            .map(|f| (f.name.clone(), f.offset, f.size))
            .collect();
        assert_eq!(
            offsets,
            alloc::vec![
                ("small".into(), 8, 1),
                ("big".into(), 16, 8),
                ("signed".into(), 24, 4),
                ("name".into(), 28, 6),
                ("flag".into(), 34, 1),
            ]
        );
        assert_eq!(sample_event::EVENT.size(), 40);
        assert_eq!(
            format.print_fmt,
            "\"small=%u big=%llu signed=%d name=%s\", REC->small, REC->big, REC->signed, REC->name"
        );
        assert!(format
            .to_format_file()
            .contains("\tfield:char name[6];\toffset:28;\tsize:6;\tsigned:1;\n"));
        assert!(format.id >= format::FIRST_DYNAMIC_ID);
        assert_eq!(by_id(format.id).map(Event::name), Some("sample_event"));
        // Registering twice keeps the id.
        assert_eq!(register(&sample_event::EVENT), format.id);
        assert!(!sample_event::EVENT.is_hot());
        sample_event::trace(1, 2, 3, *b"abcdef", true);
    }
}
