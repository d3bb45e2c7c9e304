//! `hotkern boot`: boots the bare-metal kernel under QEMU ([`crate::kernel`])
//! and prints how the run ended, as a table or as JSON; with `--linux`,
//! Debian's Linux kernel then makes the same memory resizes beside it.

pub(crate) mod linux;

use crate::kernel::{self, BootArgs};
use crate::qemu::{self, QEMU};

/// Runs `hotkern boot`.
pub fn run(args: &BootArgs) -> Result<(), String> {
    // Missing packages are said before anything boots.
    let anchor = if args.linux {
        Some(linux::find("hotkern boot --linux")?)
    } else {
        None
    };
    let report = kernel::run_quietly(args)?;
    let linux = anchor.map(|(guest, modules)| {
        let sizes = args.resize.as_ref().map_or(&[][..], |r| &r.0[..]);
        let qemu = qemu::find_in_path(QEMU, std::env::var_os("PATH")).unwrap_or_default();
        eprintln!(
            "hotkern boot: booting {} for the same resizes",
            guest.kernel.display()
        );
        linux::run(
            &guest,
            &modules,
            &qemu,
            report.config.clone(),
            sizes,
            args.verbose,
        )
    });
    let linux = linux.transpose()?;
    if args.json {
        let mut json = report.to_json();
        if let Some(linux) = &linux {
            json["linux"] = linux.to_json();
        }
        println!("{json}");
    } else {
        print!("{}", report.to_table());
        if let Some(linux) = &linux {
            print!("{}", linux.rows(&report.to_json()["resizes"]));
        }
    }
    if !report.outcome.is_success() {
        return Err(report.failure_message());
    }
    if let Some(problem) = report.resize_failure() {
        return Err(problem);
    }
    match kernel::read_failure(&report) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}
