//! sysfs-like per-CPU nodes under `devices/system/cpu/cpuN/`: topology and
//! cache attributes created when a CPU comes up and removed when it goes.
//! Opening a node checks that its CPU is online, so nodes an engine keeps
//! for an offline CPU are never visible (Bolt's check at `open`).

use core::fmt;
use std::collections::BTreeMap;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::cpuset::cpu_id;
use parking_lot::RwLock;

/// Why a sysfs read failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SysfsError {
    /// No such node, or its CPU is offline.
    NotFound(String),
}

impl fmt::Display for SysfsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SysfsError::NotFound(path) => write!(f, "no such sysfs node: {path}"),
        }
    }
}

impl core::error::Error for SysfsError {}

enum Value {
    Text(String),
    /// `online`: read from the mask at open.
    Online,
}

struct Node {
    cpu: CpuId,
    value: Value,
}

/// Cache levels described under `cache/indexN`: (level, type, size).
const CACHES: [(u32, &str, &str); 4] = [
    (1, "Data", "32K"),
    (1, "Instruction", "32K"),
    (2, "Unified", "1024K"),
    (3, "Unified", "32768K"),
];

pub(crate) struct Sysfs {
    nodes: RwLock<BTreeMap<String, Node>>,
    cpus: usize,
}

fn prefix(cpu: CpuId) -> String {
    format!("devices/system/cpu/cpu{}/", cpu.0)
}

impl Sysfs {
    pub(crate) fn new(cpus: usize) -> Self {
        Sysfs {
            nodes: RwLock::new(BTreeMap::new()),
            cpus,
        }
    }

    fn nodes_of(&self, cpu: CpuId) -> Vec<(String, Node)> {
        let base = prefix(cpu);
        let index = cpu.index();
        // Two threads per core, one package: siblings are cpu^1.
        let sibling = index ^ 1;
        let siblings: CpuSet = [index, sibling]
            .into_iter()
            .filter(|c| *c < self.cpus)
            .map(cpu_id)
            .collect();
        let package = CpuSet::range(0, self.cpus as u32);
        let mut nodes = vec![
            (format!("{base}online"), Value::Online),
            (
                format!("{base}topology/core_id"),
                Value::Text((index / 2).to_string()),
            ),
            (
                format!("{base}topology/physical_package_id"),
                Value::Text("0".into()),
            ),
            (
                format!("{base}topology/thread_siblings_list"),
                Value::Text(siblings.to_string()),
            ),
            (
                format!("{base}topology/core_siblings_list"),
                Value::Text(package.to_string()),
            ),
        ];
        for (index, (level, kind, size)) in CACHES.iter().enumerate() {
            let dir = format!("{base}cache/index{index}/");
            let shared = if *level < 3 { siblings } else { package };
            nodes.push((format!("{dir}level"), Value::Text(level.to_string())));
            nodes.push((format!("{dir}type"), Value::Text((*kind).into())));
            nodes.push((format!("{dir}size"), Value::Text((*size).into())));
            nodes.push((
                format!("{dir}shared_cpu_list"),
                Value::Text(shared.to_string()),
            ));
        }
        nodes
            .into_iter()
            .map(|(path, value)| (path, Node { cpu, value }))
            .collect()
    }

    /// Creates the nodes of every CPU in `cpus` that lacks them; returns
    /// the CPUs whose nodes were created.
    pub(crate) fn create(&self, cpus: CpuSet) -> CpuSet {
        // Nodes kept for a returning CPU are reused: build only missing ones,
        // outside the write lock, so readers wait only for the insert.
        let missing: CpuSet = {
            let tree = self.nodes.read();
            cpus.iter()
                .filter(|cpu| !tree.contains_key(&format!("{}online", prefix(*cpu))))
                .collect()
        };
        let built: Vec<(CpuId, Vec<(String, Node)>)> = missing
            .iter()
            .map(|cpu| (cpu, self.nodes_of(cpu)))
            .collect();
        let mut tree = self.nodes.write();
        let mut created = CpuSet::EMPTY;
        for (cpu, nodes) in built {
            if tree.contains_key(&format!("{}online", prefix(cpu))) {
                continue;
            }
            tree.extend(nodes);
            created.insert(cpu);
        }
        created
    }

    /// Removes the nodes of every CPU in `cpus`; returns the CPUs that had nodes.
    pub(crate) fn remove(&self, cpus: CpuSet) -> CpuSet {
        let mut tree = self.nodes.write();
        let before = tree.len();
        let mut removed = CpuSet::EMPTY;
        tree.retain(|_, node| {
            let gone = cpus.contains(node.cpu);
            if gone {
                removed.insert(node.cpu);
            }
            !gone
        });
        debug_assert!(tree.len() <= before);
        removed
    }

    /// Whether `cpu` has nodes.
    #[cfg(test)]
    pub(crate) fn has(&self, cpu: usize) -> bool {
        self.nodes
            .read()
            .contains_key(&format!("{}online", prefix(cpu_id(cpu))))
    }

    /// Reads a node; nodes of CPUs outside `online` are not found.
    pub(crate) fn read(&self, path: &str, online: CpuSet) -> Result<String, SysfsError> {
        let tree = self.nodes.read();
        let node = tree
            .get(path)
            .filter(|node| online.contains(node.cpu))
            .ok_or_else(|| SysfsError::NotFound(path.to_owned()))?;
        Ok(match &node.value {
            Value::Text(text) => text.clone(),
            Value::Online => "1".into(),
        })
    }

    /// Paths visible now, given the online mask.
    pub(crate) fn list(&self, online: CpuSet) -> Vec<String> {
        self.nodes
            .read()
            .iter()
            .filter(|(_, node)| online.contains(node.cpu))
            .map(|(path, _)| path.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_node_names_its_path() {
        let error: &dyn core::error::Error =
            &SysfsError::NotFound("devices/system/cpu/cpu9/online".into());
        assert_eq!(
            error.to_string(),
            "no such sysfs node: devices/system/cpu/cpu9/online"
        );
    }

    #[test]
    fn nodes_appear_and_go_per_cpu_and_hide_when_offline() {
        let sysfs = Sysfs::new(4);
        let online = CpuSet::range(0, 2);
        let first = CpuSet::single(CpuId(0));
        assert_eq!(sysfs.create(online), online);
        assert_eq!(sysfs.create(online), CpuSet::EMPTY);
        assert_eq!(
            sysfs
                .read(
                    "devices/system/cpu/cpu1/topology/thread_siblings_list",
                    online
                )
                .unwrap(),
            "0-1"
        );
        assert_eq!(
            sysfs.read("devices/system/cpu/cpu1/online", first),
            Err(SysfsError::NotFound(
                "devices/system/cpu/cpu1/online".into()
            ))
        );
        let per_cpu = sysfs.list(first).len();
        assert_eq!(per_cpu, 21);
        assert_eq!(sysfs.remove(CpuSet::range(1, 3)), CpuSet::single(CpuId(1)));
        assert!(!sysfs.has(1) && sysfs.has(0));
        assert_eq!(sysfs.list(online).len(), per_cpu);
    }
}
