//! Trigger lines never panic; a refused line leaves the set as it was; an
//! accepted set fires and prints without panicking.
#![no_main]

use hotkern_trace::internals::filter::FieldSpec;
use hotkern_trace::internals::trigger::{TriggerActions, TriggerSet};
use libfuzzer_sys::fuzz_target;

#[derive(Default)]
struct Null {
    on: bool,
}

impl TriggerActions for Null {
    fn tracing_on(&self) -> bool {
        self.on
    }
    fn set_tracing_on(&mut self, on: bool) {
        self.on = on;
    }
    fn snapshot(&mut self) {}
    fn stacktrace(&mut self, _cpu: u32) {}
    fn event_enabled(&self, _: &str, _: &str) -> bool {
        self.on
    }
    fn set_event_enabled(&mut self, _: &str, _: &str, enabled: bool) {
        self.on = enabled;
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let fields = [
        FieldSpec::signed("common_pid", 4, 4),
        FieldSpec::unsigned("bytes", 8, 4),
        FieldSpec::signed("delta", 12, 4),
        FieldSpec::fixed_string("comm", 16, 8),
    ];
    let exists = |system: &str, event: &str| system == "sched" && event.starts_with("sched_");
    let mut set = TriggerSet::default();
    let _ = set.write("traceon:3", &fields, &exists);
    for line in text.split('\n') {
        let before = set.to_string();
        if set.write(line, &fields, &exists).is_err() {
            assert_eq!(set.to_string(), before, "{line:?}");
        }
    }
    let mut actions = Null::default();
    for payload in [&data[..data.len().min(24)], &[0u8; 24][..], &[]] {
        set.fire(payload, 1, &mut actions);
    }
    let _ = set.to_string();
    let _ = set.hist_text();
});
