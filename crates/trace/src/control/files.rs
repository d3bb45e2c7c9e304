//! The top-level files: switches, tracer choice, buffers, function
//! filters, pid lists, options, statistics.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;

use super::error::ControlError;
use super::events::parse_bool;
use super::{view, Control};
use crate::function::{PidList, TracerKind};
use crate::output::{write_graph_duration, write_lines, write_trace, TextOptions};
use crate::ring::Mode;
use crate::TraceOption;

const READ_ONLY: &[&str] = &[
    "available_events",
    "available_filter_functions",
    "available_tracers",
    "buffer_total_size_kb",
    "printk_formats",
    "saved_cmdlines",
    "trace_pipe",
];

/// `options/*`, in `trace_options` order.
pub(crate) const OPTIONS: &[&str] = &[
    "overwrite",
    "function-fork",
    "event-fork",
    "irq-info",
    "print-parent",
    "funcgraph-cpu",
    "funcgraph-overhead",
    "funcgraph-duration",
    "funcgraph-proc",
    "funcgraph-abstime",
    "funcgraph-tail",
];

impl Control<'_> {
    pub(crate) fn read_file(&self, path: &str) -> Result<String, ControlError> {
        let t = self.tracer;
        let line = |value: &dyn core::fmt::Display| alloc::format!("{value}\n");
        let parts: Vec<&str> = path.split('/').collect();
        Ok(match parts.as_slice() {
            ["tracing_on"] => line(&u8::from(t.tracing_on())),
            ["current_tracer"] => line(&t.current_tracer().name()),
            ["available_tracers"] => {
                let names: Vec<&str> = TracerKind::ALL.iter().map(|k| k.name()).collect();
                line(&names.join(" "))
            }
            ["buffer_size_kb"] => line(&t.buffer_size_kb()),
            ["buffer_total_size_kb"] => line(&(t.buffer_size_kb() * t.cpus())),
            ["trace"] => {
                let mut out = String::new();
                let options = self.state.lock().text;
                write_trace(
                    &view::peek(t),
                    t.current_tracer().name(),
                    &options,
                    &mut out,
                );
                out
            }
            ["trace_pipe"] => self.trace_pipe(),
            ["snapshot"] => self.read_snapshot(),
            ["trace_marker"] => return Err(ControlError::WriteOnly(path.to_string())),
            ["set_ftrace_filter"] => {
                let mut text = if t.ftrace_filter_text().is_empty() {
                    String::from("#### all functions enabled ####\n")
                } else {
                    let mut names: Vec<&str> =
                        t.selected_functions().iter().map(|s| s.name()).collect();
                    names.sort_unstable();
                    names.iter().map(|n| alloc::format!("{n}\n")).collect()
                };
                // The probes after the functions, as ftrace lists them.
                text.push_str(&t.function_probes_text());
                text
            }
            ["set_ftrace_notrace"] => t.ftrace_notrace_text(),
            ["set_ftrace_pid"] => pid_text(t.ftrace_pids(), "no pid\n"),
            ["set_event_pid"] => pid_text(t.event_pids(), ""),
            ["max_graph_depth"] => line(&t.max_graph_depth()),
            ["function_profile_enabled"] => line(&u8::from(t.function_profile_enabled())),
            ["available_filter_functions"] => {
                let mut names: Vec<&str> =
                    t.available_functions().iter().map(|s| s.name()).collect();
                names.sort_unstable();
                names.iter().map(|n| alloc::format!("{n}\n")).collect()
            }
            ["available_events"] => self.available_events(),
            ["set_event"] => self.read_set_event(),
            ["options", name] => line(&u8::from(self.option(path, name)?)),
            ["trace_options"] => {
                let mut out = String::new();
                for name in OPTIONS {
                    let on = self.option(path, name)?;
                    let _ = writeln!(out, "{}{name}", if on { "" } else { "no" });
                }
                out
            }
            ["trace_clock"] => alloc::format!("[{}]\n", t.clock_name()),
            ["saved_cmdlines"] => view::peek(t).comms.to_saved_cmdlines(),
            ["printk_formats"] => {
                let mut out = String::new();
                for (address, format) in crate::printk::formats() {
                    let _ = writeln!(out, "0x{address:x} : \"{}\"", format.escape_debug());
                }
                out
            }
            ["error_log"] => self.state.lock().error_log.concat(),
            ["trace_stat", file] => self.function_stat(path, file)?,
            ["per_cpu", cpu, "stats"] => self.cpu_stats(path, cpu)?,
            ["per_cpu", cpu, "trace"] => {
                let cpu = self.cpu_number(path, cpu)?;
                let options = self.state.lock().text;
                let mut out = String::new();
                write_trace(
                    &view::peek_cpu(t, cpu),
                    t.current_tracer().name(),
                    &options,
                    &mut out,
                );
                out
            }
            ["per_cpu", cpu, "trace_pipe"] => {
                let cpu = self.cpu_number(path, cpu)?;
                self.pipe_text(view::consume_cpu(t, cpu))
            }
            ["events", rest @ ..] => return self.read_event_file(path, rest),
            _ => return Err(ControlError::NoSuchFile(path.to_string())),
        })
    }

    pub(crate) fn write_file(
        &self,
        path: &str,
        text: &str,
        append: bool,
    ) -> Result<(), ControlError> {
        let t = self.tracer;
        let parts: Vec<&str> = path.split('/').collect();
        let invalid = |reason: &str| ControlError::invalid(path, reason);
        match parts.as_slice() {
            ["tracing_on"] => t.set_tracing_on(parse_bool(path, text)?),
            ["current_tracer"] => {
                let kind =
                    TracerKind::from_name(text.trim()).ok_or_else(|| invalid("no such tracer"))?;
                t.set_current_tracer(kind).map_err(|e| ControlError::Busy {
                    file: path.to_string(),
                    reason: e.to_string(),
                })?;
            }
            ["buffer_size_kb"] => {
                let kb = text
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| invalid("expected a number"))?;
                t.set_buffer_size_kb(kb)
                    .map_err(|e| invalid(&e.to_string()))?;
            }
            ["trace"] => {
                if !append {
                    t.clear();
                }
            }
            ["snapshot"] => {
                let command = text
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| invalid("expected a number"))?;
                match command {
                    0 => t.snapshot_free(),
                    1 => t.snapshot_swap().map_err(|e| invalid(&e.to_string()))?,
                    _ => {
                        if t.snapshot_allocated() {
                            t.snapshot_clear().map_err(|e| invalid(&e.to_string()))?;
                        }
                    }
                }
            }
            ["trace_marker"] => {
                t.write_marker(text).map_err(|e| invalid(&e.to_string()))?;
            }
            ["set_ftrace_filter"] => t
                .set_ftrace_filter(text, append)
                .map_err(|e| invalid(&e.to_string()))?,
            ["set_ftrace_notrace"] => t
                .set_ftrace_notrace(text, append)
                .map_err(|e| invalid(&e.to_string()))?,
            ["set_ftrace_pid"] => write_pids(path, t.ftrace_pids(), text, append)?,
            ["set_event_pid"] => write_pids(path, t.event_pids(), text, append)?,
            ["max_graph_depth"] => {
                let depth = text
                    .trim()
                    .parse::<u32>()
                    .map_err(|_| invalid("expected a number"))?;
                t.set_max_graph_depth(depth)
                    .map_err(|e| invalid(&e.to_string()))?;
            }
            ["function_profile_enabled"] => t
                .set_function_profile(parse_bool(path, text)?)
                .map_err(|e| invalid(&e.to_string()))?,
            ["set_event"] => self.write_set_event(text, append)?,
            ["options", name] => {
                let on = parse_bool(path, text)?;
                self.set_option(path, name, on)?;
            }
            ["trace_options"] => {
                let word = text.trim();
                let (name, on) = match word.strip_prefix("no") {
                    Some(name) if OPTIONS.contains(&name) => (name, false),
                    _ => (word, true),
                };
                self.set_option(path, name, on)?;
            }
            ["trace_clock"] => {
                if text.trim() != t.clock_name() {
                    return Err(invalid("only the tracer's own clock is available"));
                }
            }
            ["error_log"] => {
                if !append {
                    self.state.lock().error_log.clear();
                }
            }
            ["events", rest @ ..] => return self.write_event_file(path, rest, text),
            ["per_cpu", cpu, "trace"] => {
                // Truncating a CPU's `trace` empties that CPU's buffer.
                let cpu = self.cpu_number(path, cpu)?;
                if !append {
                    t.drain_pages(cpu);
                }
            }
            ["trace_stat" | "per_cpu", ..] => return Err(ControlError::ReadOnly(path.to_string())),
            [file] if READ_ONLY.contains(file) => {
                return Err(ControlError::ReadOnly(path.to_string()))
            }
            _ => return Err(ControlError::NoSuchFile(path.to_string())),
        }
        Ok(())
    }

    fn option(&self, path: &str, name: &str) -> Result<bool, ControlError> {
        let text = self.state.lock().text;
        Ok(match name {
            "overwrite" => self.tracer.mode() == Mode::Overwrite,
            "function-fork" => self.tracer.option(TraceOption::FunctionFork),
            "event-fork" => self.tracer.option(TraceOption::EventFork),
            _ => *text_option(&mut text.clone(), name)
                .ok_or_else(|| ControlError::NoSuchFile(path.to_string()))?,
        })
    }

    fn set_option(&self, path: &str, name: &str, on: bool) -> Result<(), ControlError> {
        match name {
            "overwrite" => {
                let mode = if on {
                    Mode::Overwrite
                } else {
                    Mode::ProducerConsumer
                };
                self.tracer
                    .set_mode(mode)
                    .map_err(|e| ControlError::invalid(path, e.to_string()))
            }
            "function-fork" => {
                self.tracer.set_option(TraceOption::FunctionFork, on);
                Ok(())
            }
            "event-fork" => {
                self.tracer.set_option(TraceOption::EventFork, on);
                Ok(())
            }
            _ => {
                let mut state = self.state.lock();
                let slot = text_option(&mut state.text, name)
                    .ok_or_else(|| ControlError::invalid(path, "no such option"))?;
                *slot = on;
                Ok(())
            }
        }
    }

    /// `trace_pipe`: the lines of `trace` without its header, consumed.
    fn trace_pipe(&self) -> String {
        self.pipe_text(view::consume(self.tracer))
    }

    /// Consumed events as `trace_pipe` prints them: no header.
    fn pipe_text(&self, data: crate::output::TraceData) -> String {
        let options = self.state.lock().text;
        let mut out = String::new();
        if self.tracer.current_tracer() == TracerKind::FunctionGraph {
            let mut text = String::new();
            crate::output::write_graph_trace(&data, &options, &mut text);
            for line in text.lines().skip_while(|l| l.starts_with('#')) {
                out.push_str(line);
                out.push('\n');
            }
            return out;
        }
        write_lines(&data, &options, &mut out);
        out
    }

    /// `cpu<N>` in a `per_cpu` path.
    fn cpu_number(&self, path: &str, name: &str) -> Result<usize, ControlError> {
        name.strip_prefix("cpu")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n < self.tracer.cpus())
            .ok_or_else(|| ControlError::NoSuchFile(path.to_string()))
    }

    /// `snapshot`: the snapshot buffer as `trace` shows it, or, when it is
    /// empty or freed, ftrace's help text.
    fn read_snapshot(&self) -> String {
        let name = self.tracer.current_tracer().name();
        let state = match view::snapshot(self.tracer) {
            Some(data) if data.event_count() > 0 => {
                let options = self.state.lock().text;
                let mut out = String::new();
                write_trace(&data, name, &options, &mut out);
                return out;
            }
            Some(_) => "allocated",
            None => "freed",
        };
        alloc::format!(
            "# tracer: {name}\n#\n#\n# * Snapshot is {state} *\n#\n\
# Snapshot commands:\n\
# echo 0 > snapshot : Clears and frees snapshot buffer\n\
# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n\
#                      Takes a snapshot of the main buffer.\n\
# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n\
#                      (Doesn't have to be '2' works with any number that\n\
#                       is not a '0' or '1')\n"
        )
    }

    /// `trace_stat/function<N>`: ftrace's profiler table, by total time.
    fn function_stat(&self, path: &str, file: &str) -> Result<String, ControlError> {
        let cpu = file
            .strip_prefix("function")
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|&n| n < self.tracer.cpus())
            .ok_or_else(|| ControlError::NoSuchFile(path.to_string()))?;
        let mut rows = self.tracer.function_profile(cpu);
        rows.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.function.cmp(b.function)));
        let mut out = String::from(
            "  Function                               Hit    Time            Avg             s^2\n  \
--------                               ---    ----            ---             ---\n",
        );
        for row in rows.iter().filter(|r| r.hits > 0) {
            let name: String = row.function.chars().take(30).collect();
            let _ = write!(out, "  {name:<30}  {:>10}    ", row.hits);
            write_graph_duration(row.time_ns, &mut out);
            out.push_str("    ");
            write_graph_duration(row.avg_ns(), &mut out);
            out.push_str("    ");
            write_graph_duration(row.variance(), &mut out);
            out.push('\n');
        }
        Ok(out)
    }

    /// `per_cpu/cpu<N>/stats`, in ftrace's layout.
    fn cpu_stats(&self, path: &str, cpu: &str) -> Result<String, ControlError> {
        let cpu = self.cpu_number(path, cpu)?;
        let stats = self
            .tracer
            .stats(cpu)
            .map_err(|_| ControlError::NoSuchFile(path.to_string()))?;
        let entries = stats.written.saturating_sub(stats.read + stats.lost());
        let now = self.tracer.now_ns().saturating_add(500) / 1000;
        Ok(alloc::format!(
            "entries: {entries}\noverrun: {}\ncommit overrun: 0\nbytes: 0\nnow ts: {:5}.{:06}\ndropped events: {}\nread events: {}\n",
            stats.overrun,
            now / 1_000_000,
            now % 1_000_000,
            stats.dropped,
            stats.read
        ))
    }
}

/// The display option called `name`.
fn text_option<'o>(options: &'o mut TextOptions, name: &str) -> Option<&'o mut bool> {
    Some(match name {
        "irq-info" => &mut options.irq_info,
        "print-parent" => &mut options.print_parent,
        "funcgraph-cpu" => &mut options.graph_cpu,
        "funcgraph-overhead" => &mut options.graph_overhead,
        "funcgraph-duration" => &mut options.graph_duration,
        "funcgraph-proc" => &mut options.graph_proc,
        "funcgraph-abstime" => &mut options.graph_abstime,
        "funcgraph-tail" => &mut options.graph_tail,
        _ => return None,
    })
}

fn pid_text(list: &PidList, empty: &str) -> String {
    let pids = list.pids();
    if pids.is_empty() {
        return String::from(empty);
    }
    pids.iter().map(|p| alloc::format!("{p}\n")).collect()
}

/// Replaces (`>`) or extends (`>>`) a pid list; all ids are checked first.
fn write_pids(path: &str, list: &PidList, text: &str, append: bool) -> Result<(), ControlError> {
    let mut pids = Vec::new();
    for word in text.split_whitespace() {
        let pid = word
            .parse::<i64>()
            .map_err(|_| ControlError::invalid(path, ["not a pid: ", word].concat()))?;
        pids.push(pid);
    }
    let before: Vec<i64> = list.pids().into_iter().map(i64::from).collect();
    if !append {
        list.clear();
    }
    if let Err(error) = list.add(&pids) {
        // `add` validates before changing anything; only the clear above
        // needs undoing.
        list.clear();
        let _ = list.add(&before);
        return Err(ControlError::invalid(path, error.to_string()));
    }
    Ok(())
}
