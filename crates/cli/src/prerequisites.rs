//! What the tour's kernel step needs beyond a Rust toolchain, and getting
//! it: `cargo run --release` on a fresh clone should show the kernel under
//! QEMU, the headline, not a line saying QEMU is missing.
//!
//! The step needs QEMU (Debian's `qemu-system-x86`, which brings the qboot
//! firmware) and the `x86_64-unknown-none` target to build the kernel.
//! When either is missing the tour runs `scripts/setup kernel`, which
//! installs exactly those with apt-get and rustup, if it may: setup not
//! turned off with `HOTKERN_NO_SETUP=1`, the script there, and the
//! installers it needs present (apt-get with root or passwordless sudo for
//! QEMU, rustup for the target). Otherwise it says what to install and
//! with which command, and the tour goes on without the kernel.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::qemu::{self, QEMU, QEMU_PACKAGE};

/// Set to anything but `0` or empty, the tour never runs the setup script.
pub const NO_SETUP_VARIABLE: &str = "HOTKERN_NO_SETUP";
/// The setup script to run instead of the checkout's `scripts/setup`.
pub const SETUP_VARIABLE: &str = "HOTKERN_SETUP";
/// The checkout's setup script, where this binary was built from.
const SETUP_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/setup");
/// The target the kernel is built for.
const KERNEL_TARGET: &str = "x86_64-unknown-none";

/// One thing the kernel step needs that a Rust toolchain does not bring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// `qemu-system-x86_64`, from Debian's `qemu-system-x86`.
    Qemu,
    /// The Rust standard library for `x86_64-unknown-none`.
    KernelTarget,
}

impl Requirement {
    /// What is missing, as the user sees it.
    fn what(self) -> String {
        match self {
            Requirement::Qemu => format!("{QEMU} (Debian package {QEMU_PACKAGE})"),
            Requirement::KernelTarget => format!("the Rust target {KERNEL_TARGET}"),
        }
    }

    /// The command that installs it by hand.
    fn command(self) -> String {
        match self {
            Requirement::Qemu => format!("sudo apt-get install {QEMU_PACKAGE}"),
            Requirement::KernelTarget => format!("rustup target add {KERNEL_TARGET}"),
        }
    }
}

/// What the tour found on this machine (a fake one in the tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    /// What the kernel step needs and is not installed.
    pub missing: Vec<Requirement>,
    /// `HOTKERN_NO_SETUP` is set.
    pub setup_disabled: bool,
    /// The setup script, if it exists.
    pub setup_script: Option<PathBuf>,
    /// apt-get is on PATH.
    pub apt_get: bool,
    /// Running as root, or sudo works without a password.
    pub privileged: bool,
    /// rustup is on PATH.
    pub rustup: bool,
}

/// What the tour does about the kernel step's requirements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing is missing.
    Ready,
    /// Run the setup script for these.
    RunSetup(Vec<Requirement>),
    /// The tour may not install them: say why and how to, and go on.
    Explain {
        /// What is missing.
        missing: Vec<Requirement>,
        /// Why the tour does not install it itself.
        reason: String,
    },
}

/// Decides, from what was found, whether the setup script runs.
pub fn decide(environment: &Environment) -> Decision {
    let missing = environment.missing.clone();
    if missing.is_empty() {
        return Decision::Ready;
    }
    let reason = if environment.setup_disabled {
        Some(format!("{NO_SETUP_VARIABLE} is set"))
    } else if environment.setup_script.is_none() {
        Some("the setup script is not there (not a checkout?)".to_owned())
    } else if missing.contains(&Requirement::Qemu) && !environment.apt_get {
        Some("apt-get is not on PATH (not a Debian-like system?)".to_owned())
    } else if missing.contains(&Requirement::Qemu) && !environment.privileged {
        Some("installing packages needs root or passwordless sudo".to_owned())
    } else if missing.contains(&Requirement::KernelTarget) && !environment.rustup {
        Some("rustup is not on PATH".to_owned())
    } else {
        None
    };
    match reason {
        Some(reason) => Decision::Explain { missing, reason },
        None => Decision::RunSetup(missing),
    }
}

/// The machine the tour runs on: what it has, and running the setup.
pub trait Host {
    /// Looks at what is installed and allowed.
    fn probe(&self) -> Environment;
    /// Runs the setup script for the kernel's requirements.
    fn run_setup(&self, script: &Path) -> Result<(), String>;
}

/// Makes the kernel step possible where it may, appending what it does
/// and why to `out`. Returns whether the kernel step can run.
pub fn prepare(host: &dyn Host, out: &mut String) -> bool {
    let environment = host.probe();
    let missing = match decide(&environment) {
        Decision::Ready => return true,
        Decision::Explain { missing, reason } => {
            explain(&missing, &format!("not installing it: {reason}"), out);
            return false;
        }
        Decision::RunSetup(missing) => missing,
    };
    let Some(script) = environment.setup_script else {
        unreachable!("decide runs the setup only when the script is there")
    };
    let _ = writeln!(
        out,
        "the kernel step needs {}, not installed here; running {} kernel to install it \
         (apt-get and rustup; {NO_SETUP_VARIABLE}=1 turns this off)",
        list(&missing),
        script.display()
    );
    if let Err(error) = host.run_setup(&script) {
        explain(
            &missing,
            &format!("{} failed: {error}", script.display()),
            out,
        );
        return false;
    }
    let still = host.probe().missing;
    if !still.is_empty() {
        explain(
            &still,
            &format!("{} ran, but it is still missing", script.display()),
            out,
        );
        return false;
    }
    let _ = writeln!(out, "setup: {} installed", list(&missing));
    true
}

/// Says what is missing, why the tour does not install it, and the
/// commands that do.
fn explain(missing: &[Requirement], reason: &str, out: &mut String) {
    let _ = writeln!(
        out,
        "the kernel step needs {} ({reason}); to install it:",
        list(missing)
    );
    for requirement in missing {
        let _ = writeln!(out, "    {}", requirement.command());
    }
    let _ = writeln!(
        out,
        "or run scripts/setup; the tour goes on without the kernel."
    );
}

fn list(missing: &[Requirement]) -> String {
    let names: Vec<String> = missing
        .iter()
        .map(|requirement| requirement.what())
        .collect();
    names.join(" and ")
}

/// The machine this process runs on.
pub struct RealHost;

impl Host for RealHost {
    fn probe(&self) -> Environment {
        let path = std::env::var_os("PATH");
        let on_path = |program: &str| qemu::find_in_path(program, path.clone()).is_some();
        let mut missing = Vec::new();
        if !on_path(QEMU) {
            missing.push(Requirement::Qemu);
        }
        if !target_installed() {
            missing.push(Requirement::KernelTarget);
        }
        let script = std::env::var_os(SETUP_VARIABLE)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(SETUP_SCRIPT));
        Environment {
            missing,
            setup_disabled: std::env::var_os(NO_SETUP_VARIABLE).is_some_and(set),
            setup_script: script.is_file().then_some(script),
            apt_get: on_path("apt-get"),
            // SAFETY: geteuid has no preconditions and cannot fail.
            privileged: unsafe { libc::geteuid() } == 0 || sudo_without_password(),
            rustup: on_path("rustup"),
        }
    }

    fn run_setup(&self, script: &Path) -> Result<(), String> {
        // Its output goes to the terminal: the user sees apt-get work.
        let status = Command::new(script)
            .arg("kernel")
            .stdin(Stdio::null())
            .status()
            .map_err(|error| format!("cannot run it ({error})"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("it exited with {status}"))
        }
    }
}

/// Whether an environment variable's value means "yes".
fn set(value: OsString) -> bool {
    !value.is_empty() && value != "0"
}

/// Whether the toolchain that builds the kernel has the target's standard
/// library: its directory in the sysroot, as rustup installs it.
fn target_installed() -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(output) = Command::new(rustc).args(["--print", "sysroot"]).output() else {
        return false;
    };
    let sysroot = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    output.status.success()
        && Path::new(&sysroot)
            .join("lib/rustlib")
            .join(KERNEL_TARGET)
            .join("lib")
            .is_dir()
}

fn sudo_without_password() -> bool {
    Command::new("sudo")
        .args(["-n", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

#[cfg(test)]
#[path = "prerequisites_tests.rs"]
mod tests;
