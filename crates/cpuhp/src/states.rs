//! Where every step stands on every CPU: one flat array, so an operation
//! copies it with a single allocation.

use alloc::vec;
use alloc::vec::Vec;

use crate::cpu::CpuId;
use crate::step::StepId;

/// Where a step stands on one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StepStatus {
    /// Torn down (or never started).
    Down,
    /// Started.
    Up,
    /// Logically up: its startup waits on the deferred worker.
    PendingStartup,
    /// Logically down: its teardown waits on the deferred worker.
    PendingTeardown,
}

impl StepStatus {
    /// Whether the step counts as up once pending work is done.
    pub fn is_logically_up(self) -> bool {
        matches!(self, StepStatus::Up | StepStatus::PendingStartup)
    }
}

/// `StepStatus` per (CPU, step), for CPUs `0..rows`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct StateTable {
    steps: usize,
    cells: Vec<StepStatus>,
}

impl StateTable {
    pub(crate) fn new(rows: usize, steps: usize, initial: impl Fn(usize) -> StepStatus) -> Self {
        let mut cells = vec![StepStatus::Down; rows * steps];
        for row in 0..rows {
            let status = initial(row);
            cells[row * steps..(row + 1) * steps].fill(status);
        }
        StateTable { steps, cells }
    }

    pub(crate) fn rows(&self) -> usize {
        self.cells.len().checked_div(self.steps).unwrap_or(0)
    }

    pub(crate) fn get(&self, cpu: CpuId, step: StepId) -> Option<StepStatus> {
        if cpu.index() >= self.rows() || step.index() >= self.steps {
            return None;
        }
        Some(self.cells[cpu.index() * self.steps + step.index()])
    }

    /// Panics only on an engine bug: callers pass CPUs and steps they validated.
    pub(crate) fn at(&self, cpu: CpuId, step: StepId) -> StepStatus {
        self.cells[cpu.index() * self.steps + step.index()]
    }

    pub(crate) fn set(&mut self, cpu: CpuId, step: StepId, status: StepStatus) {
        self.cells[cpu.index() * self.steps + step.index()] = status;
    }

    /// Copies `cpu`'s row from `other`.
    pub(crate) fn copy_row(&mut self, cpu: CpuId, other: &StateTable) {
        let range = cpu.index() * self.steps..(cpu.index() + 1) * self.steps;
        self.cells[range.clone()].copy_from_slice(&other.cells[range]);
    }
}
