//! Where an interrupt may strike inside the writer and the reader, and,
//! for unit tests, code armed for such a [`Window`] that runs, once, the next
//! time this thread's writer or reader reaches it — as a signal handler or
//! an interrupt landing exactly there would, or, for the reader's window,
//! a writer on another CPU. A real interrupt lands between any two
//! instructions, so a test cannot otherwise choose where.

use super::CpuBuffer;
#[cfg(all(test, feature = "std"))]
use alloc::boxed::Box;
#[cfg(all(test, feature = "std"))]
use core::cell::RefCell;

/// Windows inside the writer and the reader that only an interrupt (or
/// another CPU) landing exactly there exercises; unit tests run code there
/// through [`arm`], and other builds compile them to nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Window {
    /// `reserve_general`: `word` loaded, the reservation worked out, the
    /// exchange not yet made; a writer landing here makes it fail.
    Exchange,
    /// `finish_reserved`: the outermost writer found `word` still its own
    /// and has not yet published its end; a writer landing here nests.
    CommitCheck,
    /// `finish`: the writer published (or not) the position it read and
    /// has not yet left; a writer landing here nests.
    FinishRecheck,
    /// `advance`: the full tail page is sealed and the next one not yet
    /// claimed; a writer landing here must drop its event.
    Sealed,
    /// `read_page`: the reader loaded `tail` but not yet the slot of the
    /// page it will take; a writer on another CPU may overwrite that page.
    ReaderSlot,
    /// `peek_pages`: `commit` and `tail` loaded, no slot read yet; a writer
    /// on another CPU may reuse the pages to be copied for newer ones.
    PeekSlots,
}

impl CpuBuffer {
    /// A window where an interrupt (or another CPU) may strike: in unit
    /// tests, runs what the test armed for it; nothing otherwise.
    #[inline(always)]
    pub(super) fn window(&self, _at: Window) {
        #[cfg(all(test, feature = "std"))]
        reach(self, _at);
    }
}

#[cfg(all(test, feature = "std"))]
type Armed = (Window, Box<dyn FnOnce(&CpuBuffer)>);

#[cfg(all(test, feature = "std"))]
std::thread_local! {
    static ARMED: RefCell<Option<Armed>> = const { RefCell::new(None) };
}

/// Runs `then` on the buffer the next time this thread reaches `window`.
#[cfg(all(test, feature = "std"))]
pub(crate) fn arm(window: Window, then: impl FnOnce(&CpuBuffer) + 'static) {
    ARMED.with(|armed| *armed.borrow_mut() = Some((window, Box::new(then))));
}

/// Whether armed code is still waiting for its window (a test asserts it
/// is not, so that its window was reached).
#[cfg(all(test, feature = "std"))]
pub(crate) fn pending() -> bool {
    ARMED.with(|armed| armed.borrow().is_some())
}

/// Called at `window`: runs the code armed for it, disarming it first so
/// that the writers it runs pass the same window without stopping.
#[cfg(all(test, feature = "std"))]
fn reach(buffer: &CpuBuffer, window: Window) {
    let then = ARMED.with(|armed| {
        let mut armed = armed.borrow_mut();
        match armed.take() {
            Some((at, then)) if at == window => Some(then),
            other => {
                *armed = other;
                None
            }
        }
    });
    if let Some(then) = then {
        then(buffer);
    }
}
