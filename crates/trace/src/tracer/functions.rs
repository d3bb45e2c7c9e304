//! The function tracers' controls (`current_tracer`, `set_ftrace_filter`,
//! `set_ftrace_notrace`, `set_ftrace_pid`, `max_graph_depth`,
//! `function_profile_enabled`, fork-following options) and their entry and
//! exit hooks.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::{TraceError, TraceOption, Tracer, PROBED, TRACED};
use crate::event::format;
use crate::function::dispatch::FunctionHandler;
use crate::function::filter::Selector;
use crate::function::{
    self, FunctionSite, PidList, ProfileEntry, ProfileTable, Selection, TracerKind, MAX_DEPTH,
};

/// ftrace's two function lists, under one lock so a function is always
/// judged against a pair written together.
#[derive(Debug, Default)]
pub(super) struct FunctionFilters {
    /// `set_ftrace_filter`: when not empty, only functions it selects are
    /// traced.
    filter: Selection,
    /// `set_ftrace_notrace`: functions it selects are never traced, even
    /// when `filter` selects them too.
    notrace: Selection,
}

impl FunctionFilters {
    fn selects(&self, site: &FunctionSite) -> bool {
        (self.filter.is_empty() || self.filter.selects(site.name(), site.module()))
            && !self.notrace.selects(site.name(), site.module())
    }
}

/// The flag bits of a frame's `ip`.
const FRAME_FLAGS: u64 = 3;

impl Tracer {
    /// `current_tracer`.
    #[inline]
    pub fn current_tracer(&self) -> TracerKind {
        TracerKind::from_code(self.kind.load(Ordering::Acquire))
    }

    /// Sets `current_tracer`. `hwlat` needs an installed tracer and `std`;
    /// leaving `hwlat` stops its thread.
    pub fn set_current_tracer(&self, kind: TracerKind) -> Result<(), TraceError> {
        let previous = self.current_tracer();
        if kind == TracerKind::Hwlat {
            #[cfg(feature = "std")]
            self.start_hwlat()?;
            #[cfg(not(feature = "std"))]
            return Err(TraceError::Unavailable("hwlat"));
        } else if previous == TracerKind::Hwlat {
            #[cfg(feature = "std")]
            self.stop_hwlat();
        }
        self.kind.store(kind.code(), Ordering::Release);
        self.refresh_function_masks()
    }

    /// Writes `set_ftrace_filter` (`append` = `>>`): the functions whose
    /// call sites are patched in while a function tracer runs. A selector
    /// that adds no function is refused, as ftrace refuses it (`EINVAL`).
    /// Errors change nothing.
    ///
    /// Probe commands (`glob:traceoff[:count]`..., [`crate::function::probe`])
    /// among the selectors install (or with `!` remove) probes; a write of
    /// probe commands alone leaves the filter as it was.
    pub fn set_ftrace_filter(&self, text: &str, append: bool) -> Result<(), TraceError> {
        let (selectors, probes) = self.split_probes(text)?;
        let parsed = if probes.is_empty() || !selectors.trim().is_empty() {
            Some(self.matching_selectors(&selectors)?)
        } else {
            None
        };
        if let Some(parsed) = parsed {
            self.function_filters.lock().filter.extend(parsed, append);
        }
        self.apply_probes(probes);
        self.refresh_function_masks()
    }

    /// Writes `set_ftrace_notrace`; refused as `set_ftrace_filter` is.
    pub fn set_ftrace_notrace(&self, text: &str, append: bool) -> Result<(), TraceError> {
        let parsed = self.matching_selectors(text)?;
        self.function_filters.lock().notrace.extend(parsed, append);
        self.refresh_function_masks()
    }

    /// The selectors of `text`, each that adds matching some function.
    /// Where there is no site table (functions register on their first
    /// call), a function may still come: nothing is refused there.
    fn matching_selectors(&self, text: &str) -> Result<Vec<Selector>, TraceError> {
        let parsed = Selection::parse(text)?;
        if crate::site::has_table() {
            // Listed before the filters' lock is taken: listing may
            // register sites, which asks every tracer's filters.
            let functions = self.available_functions();
            let unmatched = parsed.iter().find(|selector| {
                selector.adds()
                    && !functions
                        .iter()
                        .any(|f| selector.matches(f.name(), f.module()))
            });
            if let Some(selector) = unmatched {
                return Err(TraceError::NoMatch(selector.text().into()));
            }
        }
        Ok(parsed)
    }

    /// The selectors written to `set_ftrace_filter`, one per line.
    pub(crate) fn ftrace_filter_text(&self) -> String {
        self.function_filters.lock().filter.text()
    }

    /// The selectors written to `set_ftrace_notrace`, one per line.
    pub(crate) fn ftrace_notrace_text(&self) -> String {
        self.function_filters.lock().notrace.text()
    }

    /// Whether a function passes `set_ftrace_filter` and `set_ftrace_notrace`.
    pub(crate) fn function_selected(&self, site: &FunctionSite) -> bool {
        site.is_instrumented() && self.function_filters.lock().selects(site)
    }

    /// Instrumented functions, for `available_filter_functions`.
    pub(crate) fn available_functions(&self) -> Vec<&'static FunctionSite> {
        function::sites()
            .into_iter()
            .filter(|s| s.is_instrumented())
            .collect()
    }

    /// Functions the filters currently select (`enabled_functions`).
    pub(crate) fn selected_functions(&self) -> Vec<&'static FunctionSite> {
        self.available_functions()
            .into_iter()
            .filter(|s| self.function_selected(s))
            .collect()
    }

    /// `set_ftrace_pid`: when not empty, only these tasks are function-traced.
    pub(crate) fn ftrace_pids(&self) -> &PidList {
        &self.ftrace_pids
    }

    /// Sets one of the tracer's `options/<name>` switches.
    pub(crate) fn set_option(&self, option: TraceOption, on: bool) {
        if on {
            self.options.fetch_or(option.bit(), Ordering::AcqRel);
        } else {
            self.options.fetch_and(!option.bit(), Ordering::AcqRel);
        }
    }

    /// Whether one of the tracer's `options/<name>` switches is on.
    pub(crate) fn option(&self, option: TraceOption) -> bool {
        self.options.load(Ordering::Acquire) & option.bit() != 0
    }

    /// Tells the tracer that task `parent` created `child`: with
    /// `function-fork` / `event-fork`, a listed parent's child joins the list
    /// (the platform calls this; see [`crate::platform::spawn`]).
    pub fn on_fork(&self, parent: i32, child: i32) {
        if self.option(TraceOption::FunctionFork) && self.ftrace_pids.contains(parent) {
            let _ = self.ftrace_pids.add(&[i64::from(child)]);
        }
        if self.option(TraceOption::EventFork) && self.event_pids.contains(parent) {
            let _ = self.event_pids.add(&[i64::from(child)]);
        }
    }

    /// `max_graph_depth` (0 = unlimited).
    pub(crate) fn max_graph_depth(&self) -> u32 {
        self.max_depth.load(Ordering::Relaxed)
    }

    /// Sets `max_graph_depth` (0 = unlimited; at most [`MAX_DEPTH`]).
    pub(crate) fn set_max_graph_depth(&self, depth: u32) -> Result<(), TraceError> {
        if depth as usize > MAX_DEPTH {
            return Err(TraceError::BadDepth(depth));
        }
        self.max_depth.store(depth, Ordering::Release);
        Ok(())
    }

    /// `function_profile_enabled`. Enabling resets the counters.
    pub(crate) fn set_function_profile(&self, on: bool) -> Result<(), TraceError> {
        if on {
            // Serialises enables (borrowing the filters' lock): two racing
            // ones would both see no tables, and one allocation would leak.
            let _guard = self.function_filters.lock();
            let tables = self.profiles.load(Ordering::Acquire);
            if tables.is_null() {
                let fresh: Box<Vec<ProfileTable>> =
                    Box::new((0..self.cpus).map(|_| ProfileTable::new()).collect());
                self.profiles.store(Box::into_raw(fresh), Ordering::Release);
            } else {
                // SAFETY: profile tables live until the tracer drops.
                for table in unsafe { &*tables }.iter() {
                    table.reset();
                }
            }
        }
        self.profile_on.store(on, Ordering::Release);
        self.refresh_function_masks()
    }

    /// Whether the profiler runs.
    pub(crate) fn function_profile_enabled(&self) -> bool {
        self.profile_on.load(Ordering::Acquire)
    }

    /// `trace_stat/function<cpu>`: rows by total time, longest first.
    pub(crate) fn function_profile(&self, cpu: usize) -> Vec<ProfileEntry> {
        let tables = self.profiles.load(Ordering::Acquire);
        if tables.is_null() {
            return Vec::new();
        }
        // SAFETY: non-null, and profile tables live until the tracer drops.
        let tables = unsafe { &*tables };
        tables
            .get(cpu)
            .map_or_else(Vec::new, |t| t.entries(&function::sites()))
    }

    /// Whether this tracer wants `site`'s entry hook at all: its mode
    /// traces it, or a probe fires on it (kept as the site's flags).
    pub(crate) fn function_wants(&self, site: &FunctionSite) -> bool {
        let kind = self.current_tracer();
        let active = matches!(kind, TracerKind::Function | TracerKind::FunctionGraph)
            || self.function_profile_enabled();
        let traced = active && self.function_selected(site);
        let flags = if traced { TRACED } else { 0 }
            | if self.probes_function(site) {
                PROBED
            } else {
                0
            };
        self.set_site_flags(site, flags);
        flags != 0
    }

    /// Sets this tracer's bit in every function's enable word to whether
    /// it wants the function, then patches the call sites to match.
    pub(crate) fn refresh_function_masks(&self) -> Result<(), TraceError> {
        if let Some(slot) = self.slot() {
            for site in function::sites() {
                site.set_instance(slot, self.function_wants(site));
            }
        }
        function::dispatch::decide_all();
        crate::site::apply().map_err(TraceError::Text)
    }

    /// Entry hook: pushes the call; records `function` or `funcgraph_entry`.
    /// Returns whether the call was entered (then `function_exit` follows).
    /// Never enters once `uninstall` returned: the gate
    /// ([`function::dispatch`]).
    #[inline]
    pub(crate) fn function_entry(&self, site: &'static FunctionSite) -> bool {
        let flags = self.site_flags(site);
        if flags & PROBED != 0 {
            self.fire_probes(site);
            if flags & TRACED == 0 {
                return false;
            }
        }
        self.function_entry_as(site, self.current_tracer())
    }

    /// The entry of a direct call: `handler`'s mode, decided with the
    /// direct word, is not looked up again.
    #[inline]
    pub(crate) fn direct_function_entry(
        &self,
        site: &'static FunctionSite,
        handler: FunctionHandler,
    ) -> bool {
        if handler == FunctionHandler::Probe {
            // Probes act at the entry only: no exit follows.
            self.fire_probes(site);
            return false;
        }
        // One arm per mode, each the entry with its mode a constant.
        match handler.kind() {
            TracerKind::Function => self.function_entry_as(site, TracerKind::Function),
            TracerKind::FunctionGraph => self.function_entry_as(site, TracerKind::FunctionGraph),
            _ => self.function_entry_as(site, TracerKind::Nop),
        }
    }

    /// The exit of a direct call entered through `handler`: a `function`
    /// entry never wrote a graph entry, and the profiler is fed if the
    /// entry's mode had it (so a call is profiled whole or not at all).
    #[inline]
    pub(crate) fn direct_function_exit(
        &self,
        site: &'static FunctionSite,
        handler: FunctionHandler,
    ) {
        match handler {
            FunctionHandler::Function => self.function_exit_as(site, false, false),
            FunctionHandler::FunctionProfiled => self.function_exit_as(site, false, true),
            FunctionHandler::Graph => self.function_exit_as(site, true, false),
            FunctionHandler::GraphProfiled => self.function_exit_as(site, true, true),
            FunctionHandler::Profile => self.function_exit_as(site, false, true),
            // Never entered (`direct_function_entry`).
            FunctionHandler::Probe => {}
        }
    }

    /// The entry as tracer `kind`.
    #[inline(always)]
    fn function_entry_as(&self, site: &'static FunctionSite, kind: TracerKind) -> bool {
        // The clock first, as in `record_event`: the checks overlap it.
        let now = self.clock_now();
        let Some(current) = self.current() else {
            return false;
        };
        let calls = &self.calls[current.0];
        let Some(_passage) = self.gate.pass(&calls.doorway) else {
            return false;
        };
        if self.ftrace_pids.is_active() && !self.ftrace_pids.contains(current.1) {
            return false;
        }
        let depth = calls.depth.load() as usize;
        if depth >= MAX_DEPTH {
            return false;
        }
        // Claim the frame before filling it: a handler nesting on us from
        // here on uses the next one.
        calls.depth.add(1);
        let address = site.raw_address();
        let max = self.max_depth.load(Ordering::Relaxed) as usize;
        let record = self.tracing_on() && (max == 0 || depth < max);
        let graph = record && kind == TracerKind::FunctionGraph;
        // Site addresses are aligned to 8, so bits 0 and 1 carry
        // "recorded" and "recorded as a graph entry".
        let frame = &calls.frames[depth];
        frame
            .ip
            .store(address | u64::from(record) | u64::from(graph) << 1);
        frame.calltime.store(now);
        if record {
            match kind {
                TracerKind::Function => {
                    let parent = if depth > 0 {
                        calls.frames[depth - 1].ip.load() & !FRAME_FLAGS
                    } else {
                        0
                    };
                    self.write_at(current, now, format::FUNCTION_ID, 24, |p| {
                        p[8..16].copy_from_slice(&address.to_ne_bytes());
                        p[16..24].copy_from_slice(&parent.to_ne_bytes());
                    });
                }
                TracerKind::FunctionGraph => {
                    self.write_at(current, now, format::FUNCGRAPH_ENTRY_ID, 24, |p| {
                        p[8..16].copy_from_slice(&address.to_ne_bytes());
                        p[16..20].copy_from_slice(&(depth as i32).to_ne_bytes());
                        p[20..24].fill(0);
                    });
                }
                _ => {}
            }
        }
        true
    }

    /// Exit hook: pops the call; records `funcgraph_exit`; profiles.
    #[inline]
    pub(crate) fn function_exit(&self, site: &'static FunctionSite) {
        self.function_exit_as(site, true, self.profile_on.load(Ordering::Relaxed));
    }

    /// The exit; `graph`: the entry may have written a graph entry (its
    /// frame says whether it did); `profile`: feed the profiler.
    #[inline(always)]
    fn function_exit_as(&self, site: &'static FunctionSite, graph: bool, profile: bool) {
        let now = self.clock_now();
        let Some(current) = self.current() else {
            return;
        };
        let cpu = current.0;
        let calls = &self.calls[cpu];
        let depth = calls.depth.load() as usize;
        if depth == 0 {
            return;
        }
        let frame = &calls.frames[depth - 1];
        let calltime = frame.calltime.load();
        // The entry's mode, not the current one: a switch between them
        // must not leave an exit without its entry (or the reverse).
        if graph && frame.ip.load() & 2 != 0 {
            let address = site.raw_address();
            self.write_at(current, now, format::FUNCGRAPH_EXIT_ID, 40, |p| {
                p[8..16].copy_from_slice(&address.to_ne_bytes());
                p[16..20].copy_from_slice(&((depth - 1) as i32).to_ne_bytes());
                p[20..24].fill(0);
                p[24..32].copy_from_slice(&calltime.to_ne_bytes());
                p[32..40].copy_from_slice(&now.to_ne_bytes());
            });
        }
        if profile {
            let tables = self.profiles.load(Ordering::Acquire);
            if !tables.is_null() {
                // SAFETY: profile tables live until the tracer drops.
                if let Some(table) = unsafe { &*tables }.get(cpu) {
                    table.record(site.index(), now.saturating_sub(calltime));
                }
            }
        }
        calls.depth.sub(1);
    }

    /// Records a `trace_printk!` (`ftrace/bprint`) event.
    #[inline(always)]
    pub(crate) fn record_bprint(
        &self,
        ip: u64,
        format_address: u64,
        args_len: usize,
        encode: impl FnOnce(&mut [u8]),
    ) {
        if !self.tracing_on() {
            return;
        }
        let now = self.clock_now();
        let Some(current) = self.current() else {
            return;
        };
        self.write_at(current, now, format::BPRINT_ID, 24 + args_len, |p| {
            p[8..16].copy_from_slice(&ip.to_ne_bytes());
            p[16..24].copy_from_slice(&format_address.to_ne_bytes());
            encode(&mut p[24..]);
        });
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let tables = self.profiles.swap(core::ptr::null_mut(), Ordering::AcqRel);
        if !tables.is_null() {
            // SAFETY: allocated with Box in `set_function_profile`; the tracer
            // is being dropped, so no writer uses it.
            drop(unsafe { Box::from_raw(tables) });
        }
    }
}
