//! The process's own text as a [`TextPoke`]: how user space (the machine,
//! the tour, `bench trace`) patches its call sites while its threads run
//! through them.
//!
//! * **Writable**: `mprotect` the pages holding the batch's sites
//!   read-write-execute for the batch, then read-execute again. The text
//!   is a private file mapping, so the first store copies the page; a
//!   thread executing it meanwhile runs the old copy or the new one, both
//!   whole.
//! * **Sync**: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)`
//!   (Linux 4.16+): every thread of the process runs a core-serialising
//!   instruction before it next runs user code, which is what Linux's
//!   `text_poke_sync` asks of each CPU.
//! * **Breakpoints**: a `SIGTRAP` handler does what Linux's
//!   `poke_int3_handler` does for the kernel: a thread that hit a site's
//!   `int3` (the kernel reports `SI_KERNEL`, the instruction pointer just
//!   past it) continues where [`crate::site::trap`] says, by rewriting the
//!   instruction pointer in its signal frame. Any other `SIGTRAP` goes to
//!   the handler that was there before, or to the default action.
//!
//! Why breakpoints rather than stopping the threads (Linux's other way,
//! `stop_machine`): the tracer does not know the process's threads (any
//! thread may call an instrumented function, not only those of the
//! thread-per-CPU model), a stop would need a signal to each and a wait
//! for the slowest, and a thread blocked with signals masked would stall
//! every `set_ftrace_filter`. The breakpoint costs only the threads that
//! actually reach a site during the few microseconds of a batch.
//!
//! [`prepare`](TextPoke::prepare) checks all of it before the first site
//! is written; `HOTKERN_TRACE_PATCH=0` in the environment turns patching
//! off (the sites stay load-and-branch).

use core::ops::Range;
use std::sync::OnceLock;

use crate::platform::{TextError, TextPoke};
use crate::site::Trap;

/// The process's own text as a [`TextPoke`]: `mprotect` makes the pages
/// of a batch's sites writable, `membarrier`'s `SYNC_CORE` syncs the
/// threads, and a `SIGTRAP` handler sends a thread that meets a site's
/// `int3` where [`crate::site::trap`] says. Patching is refused
/// (`HOTKERN_TRACE_PATCH=0`, a W^X policy, no `membarrier`) with a typed
/// [`TextError`], and the sites stay load-and-branch.
#[derive(Debug, Clone, Copy, Default)]
pub struct UserText;

/// `membarrier` commands (`include/uapi/linux/membarrier.h`).
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_long = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_long = 1 << 6;

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn membarrier(command: libc::c_long) -> Result<(), i32> {
    // SAFETY: membarrier(2) takes two integers and touches no memory of
    // ours.
    match unsafe { libc::syscall(libc::SYS_membarrier, command, 0 as libc::c_long) } {
        0 => Ok(()),
        _ => Err(errno()),
    }
}

/// Whether `[range)` lies in executable, private mappings of this process
/// (`/proc/self/maps`, possibly several adjacent ones).
fn in_text(range: &Range<usize>) -> Result<(), TextError> {
    let not_text = TextError::NotText {
        address: range.start,
    };
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|_| not_text)?;
    let mut covered = range.start;
    let mut mappings: std::vec::Vec<(usize, usize)> = maps
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_ascii_whitespace();
            let (start, end) = fields.next()?.split_once('-')?;
            let perms = fields.next()?;
            (perms.starts_with("r-x") && perms.ends_with('p')).then_some((
                usize::from_str_radix(start, 16).ok()?,
                usize::from_str_radix(end, 16).ok()?,
            ))
        })
        .collect();
    mappings.sort_unstable();
    for (start, end) in mappings {
        if start <= covered && covered < end {
            covered = end;
        }
    }
    if covered >= range.end {
        Ok(())
    } else {
        Err(TextError::NotText { address: covered })
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf(3) reads a constant.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// `mprotect` on the pages of `range`.
///
/// # Safety
/// The pages hold only text the caller may change the protection of.
unsafe fn mprotect(range: Range<usize>, protection: libc::c_int) -> Result<(), TextError> {
    let page = page_size();
    let start = range.start & !(page - 1);
    let len = range.end.next_multiple_of(page) - start;
    // SAFETY: the caller's; mprotect itself only changes page tables.
    match unsafe { libc::mprotect(start as *mut libc::c_void, len, protection) } {
        0 => Ok(()),
        _ => Err(TextError::Protect { errno: errno() }),
    }
}

/// The `SIGTRAP` disposition found when ours was installed.
static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();

/// Installs [`on_trap`] once; its result for every later caller.
fn install_handler() -> Result<(), TextError> {
    static INSTALLED: OnceLock<Result<(), TextError>> = OnceLock::new();
    *INSTALLED.get_or_init(|| {
        // SAFETY: an all-zero `sigaction` is a valid value (no handler, no
        // flags, empty mask) that is filled in below.
        let mut action: libc::sigaction = unsafe { core::mem::zeroed() };
        action.sa_sigaction = on_trap as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO;
        // SAFETY: an all-zero `sigaction` to receive the old one.
        let mut previous: libc::sigaction = unsafe { core::mem::zeroed() };
        // SAFETY: `action` is initialised, its mask is emptied here, and
        // `on_trap` has the SA_SIGINFO signature.
        let installed = unsafe {
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGTRAP, &action, &mut previous)
        };
        if installed != 0 {
            return Err(TextError::TrapHandler { errno: errno() });
        }
        let _ = PREVIOUS.set(previous);
        Ok(())
    })
}

/// The `SIGTRAP` handler (async-signal-safe: atomics and a search of the
/// site table only, or the previous handler).
extern "C" fn on_trap(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo and ucontext to an
    // SA_SIGINFO handler, for the duration of the call.
    let (code, context) = unsafe { ((*info).si_code, &mut *context.cast::<libc::ucontext_t>()) };
    if code == libc::SI_KERNEL {
        let rip = &mut context.uc_mcontext.gregs[libc::REG_RIP as usize];
        match crate::site::trap((*rip as usize).wrapping_sub(1)) {
            Trap::Resume(at) | Trap::Retry(at) => {
                *rip = at as libc::greg_t;
                return;
            }
            Trap::NotOurs => {}
        }
    }
    chain(signal, info, context);
}

/// Hands a `SIGTRAP` that is not a site's to the disposition we replaced.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: &mut libc::ucontext_t) {
    let handler = PREVIOUS
        .get()
        .map_or(libc::SIG_DFL, |previous| previous.sa_sigaction);
    let with_info = PREVIOUS
        .get()
        .is_some_and(|previous| previous.sa_flags & libc::SA_SIGINFO != 0);
    match handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // SAFETY: signal(2) and raise(3) are async-signal-safe; the
            // raised SIGTRAP is blocked until this handler returns, then
            // takes the default action (the process dumps core, as it would
            // have without us).
            unsafe {
                libc::signal(libc::SIGTRAP, libc::SIG_DFL);
                libc::raise(libc::SIGTRAP);
            }
        }
        handler if with_info => {
            // SAFETY: the previous disposition was installed with
            // SA_SIGINFO, so it has this signature; it gets our arguments.
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { core::mem::transmute(handler) };
            handler(signal, info, (context as *mut libc::ucontext_t).cast());
        }
        handler => {
            // SAFETY: a handler installed without SA_SIGINFO takes the
            // signal number only.
            let handler: extern "C" fn(libc::c_int) = unsafe { core::mem::transmute(handler) };
            handler(signal);
        }
    }
}

// SAFETY: pokes are plain stores to the process's own pages, which the
// kernel makes visible to every CPU's instruction fetch (x86 snoops code
// stores); `sync_cores` is membarrier's SYNC_CORE, after which no thread
// runs instructions fetched before it; `prepare` installs the SIGTRAP
// handler that routes a site's `int3` to `crate::site::trap`.
unsafe impl TextPoke for UserText {
    fn prepare(&self, sites: Range<usize>) -> Result<(), TextError> {
        if std::env::var_os("HOTKERN_TRACE_PATCH").is_some_and(|v| v == "0") {
            return Err(TextError::Disabled);
        }
        in_text(&sites)?;
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE)
            .map_err(|errno| TextError::SyncCores { errno })?;
        install_handler()?;
        // Whether W+X is allowed at all (SELinux `execmod`, PaX refuse it):
        // one page of the sites, made writable and read-only again.
        let first = sites.start..sites.start + 1;
        // SAFETY: the page holds call sites, checked to be our text above;
        // nothing is written.
        unsafe {
            self.unprotect(first.clone())?;
            self.protect(first)
        }
    }

    unsafe fn unprotect(&self, range: Range<usize>) -> Result<(), TextError> {
        // SAFETY: the caller's contract: call sites in our text.
        unsafe { mprotect(range, libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) }
    }

    unsafe fn protect(&self, range: Range<usize>) -> Result<(), TextError> {
        // SAFETY: as above; the text was read-execute (`in_text`).
        unsafe { mprotect(range, libc::PROT_READ | libc::PROT_EXEC) }
    }

    fn sync_cores(&self) {
        // Registered in `prepare`, which the patcher ran first; the command
        // cannot fail once registered.
        let _ = membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_code_is_text_and_the_heap_is_not() {
        let code = in_text as *const () as usize;
        assert_eq!(in_text(&(code..code + 13)), Ok(()));
        let heap = std::boxed::Box::new([0u8; 64]);
        let address = heap.as_ptr() as usize;
        assert!(matches!(
            in_text(&(address..address + 13)),
            Err(TextError::NotText { .. })
        ));
    }
}
