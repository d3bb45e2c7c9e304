//! The tour's decision about the kernel step's requirements, on fake
//! machines: tool present or absent, allowed to install or not, a setup
//! that fails or that leaves something missing.

use std::cell::{Cell, RefCell};

use super::*;

/// A machine whose probes return `environments` in turn (the last one
/// again once they run out) and whose setup returns `setup`.
struct FakeHost {
    environments: RefCell<Vec<Environment>>,
    setup: Result<(), String>,
    setup_runs: Cell<usize>,
}

impl FakeHost {
    fn new(environments: Vec<Environment>, setup: Result<(), String>) -> FakeHost {
        FakeHost {
            environments: RefCell::new(environments),
            setup,
            setup_runs: Cell::new(0),
        }
    }
}

impl Host for FakeHost {
    fn probe(&self) -> Environment {
        let mut environments = self.environments.borrow_mut();
        if environments.len() > 1 {
            environments.remove(0)
        } else {
            environments[0].clone()
        }
    }

    fn run_setup(&self, script: &Path) -> Result<(), String> {
        assert_eq!(script, Path::new("/checkout/scripts/setup"));
        self.setup_runs.set(self.setup_runs.get() + 1);
        self.setup.clone()
    }
}

/// A fresh Debian machine run as root: nothing missing yet, everything
/// allowed.
fn allowed(missing: &[Requirement]) -> Environment {
    Environment {
        missing: missing.to_vec(),
        setup_disabled: false,
        setup_script: Some(PathBuf::from("/checkout/scripts/setup")),
        apt_get: true,
        privileged: true,
        rustup: true,
    }
}

const BOTH: [Requirement; 2] = [Requirement::Qemu, Requirement::KernelTarget];

/// A change to an allowed machine, what is missing on it, and the reason
/// the tour must give for not installing it.
type Refusal = (fn(&mut Environment), &'static [Requirement], &'static str);

#[test]
fn nothing_missing_means_no_setup() {
    let host = FakeHost::new(vec![allowed(&[])], Ok(()));
    let mut out = String::new();
    assert!(prepare(&host, &mut out));
    assert_eq!(host.setup_runs.get(), 0);
    assert_eq!(out, "");
}

#[test]
fn missing_tools_are_installed_when_the_tour_may() {
    let host = FakeHost::new(vec![allowed(&BOTH), allowed(&[])], Ok(()));
    let mut out = String::new();
    assert!(prepare(&host, &mut out), "{out}");
    assert_eq!(host.setup_runs.get(), 1);
    assert!(
        out.contains(
            "the kernel step needs qemu-system-x86_64 (Debian package qemu-system-x86) and \
             the Rust target x86_64-unknown-none, not installed here; running \
             /checkout/scripts/setup kernel"
        ),
        "{out}"
    );
    assert!(out.contains("HOTKERN_NO_SETUP=1 turns this off"), "{out}");
    assert!(out.ends_with("installed\n"), "{out}");
}

#[test]
fn each_reason_not_to_install_is_said_with_the_commands() {
    let cases: [Refusal; 5] = [
        (
            |e| e.setup_disabled = true,
            &BOTH,
            "HOTKERN_NO_SETUP is set",
        ),
        (
            |e| e.setup_script = None,
            &BOTH,
            "setup script is not there",
        ),
        (|e| e.apt_get = false, &BOTH, "apt-get is not on PATH"),
        (
            |e| e.privileged = false,
            &BOTH,
            "needs root or passwordless sudo",
        ),
        (
            |e| e.rustup = false,
            &[Requirement::KernelTarget],
            "rustup is not on PATH",
        ),
    ];
    for (change, missing, reason) in cases {
        let mut environment = allowed(missing);
        change(&mut environment);
        let host = FakeHost::new(vec![environment], Ok(()));
        let mut out = String::new();
        assert!(!prepare(&host, &mut out), "{reason}");
        assert_eq!(host.setup_runs.get(), 0, "{reason}");
        assert!(out.contains(reason), "{out}");
        if missing.contains(&Requirement::Qemu) {
            assert!(
                out.contains("    sudo apt-get install qemu-system-x86\n"),
                "{out}"
            );
        }
        assert!(
            out.contains("    rustup target add x86_64-unknown-none\n"),
            "{out}"
        );
        assert!(
            out.ends_with("the tour goes on without the kernel.\n"),
            "{out}"
        );
    }
}

#[test]
fn a_missing_target_alone_needs_rustup_not_root() {
    let mut environment = allowed(&[Requirement::KernelTarget]);
    environment.privileged = false;
    environment.apt_get = false;
    assert_eq!(
        decide(&environment),
        Decision::RunSetup(vec![Requirement::KernelTarget])
    );
    environment.missing = vec![Requirement::Qemu];
    environment.apt_get = true;
    assert!(matches!(decide(&environment), Decision::Explain { .. }));
}

#[test]
fn a_failing_setup_is_reported_and_the_tour_goes_on() {
    let host = FakeHost::new(
        vec![allowed(&[Requirement::Qemu])],
        Err("it exited with exit status: 100".to_owned()),
    );
    let mut out = String::new();
    assert!(!prepare(&host, &mut out));
    assert_eq!(host.setup_runs.get(), 1);
    assert!(
        out.contains("(/checkout/scripts/setup failed: it exited with exit status: 100)"),
        "{out}"
    );
    assert!(
        out.contains("    sudo apt-get install qemu-system-x86\n"),
        "{out}"
    );
}

#[test]
fn a_setup_that_leaves_something_missing_says_what() {
    let host = FakeHost::new(vec![allowed(&BOTH), allowed(&[Requirement::Qemu])], Ok(()));
    let mut out = String::new();
    assert!(!prepare(&host, &mut out));
    assert!(
        out.contains(
            "the kernel step needs qemu-system-x86_64 (Debian package qemu-system-x86) \
             (/checkout/scripts/setup ran, but it is still missing)"
        ),
        "{out}"
    );
    assert!(!out.contains("rustup target add"), "{out}");
}

#[test]
fn the_no_setup_variable_reads_zero_and_empty_as_unset() {
    assert!(set("1".into()));
    assert!(set("yes".into()));
    assert!(!set("0".into()));
    assert!(!set("".into()));
}
