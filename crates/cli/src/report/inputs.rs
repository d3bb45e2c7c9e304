//! The report's inputs: the JSON documents the benchmarks and the boot
//! command print, read from one directory by their file names, each kept
//! with why it could not be used when it could not.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde_json::Value;

/// One input file and the command that writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Source {
    /// Every benchmark on the user-mode machine.
    BenchAll,
    /// cpuhp on the kernel booted under QEMU.
    CpuhpQemu,
    /// cpuhp with Linux's own latency on the same QEMU.
    CpuhpLinux,
    /// bcache on the kernel booted under QEMU.
    BcacheQemu,
    /// A boot with virtio-mem resizes (and Linux's, with `--linux`).
    Boot,
}

impl Source {
    /// Every input, in the order the page lists them.
    pub const ALL: [Source; 5] = [
        Source::BenchAll,
        Source::CpuhpQemu,
        Source::CpuhpLinux,
        Source::BcacheQemu,
        Source::Boot,
    ];

    /// The file's name in the input directory.
    pub fn file(self) -> &'static str {
        match self {
            Source::BenchAll => "bench-all.json",
            Source::CpuhpQemu => "cpuhp-qemu.json",
            Source::CpuhpLinux => "cpuhp-linux.json",
            Source::BcacheQemu => "bcache-qemu.json",
            Source::Boot => "boot.json",
        }
    }

    /// The arguments of the `hotkern` command whose standard output the
    /// file is (the boot's `--linux` last, so that it can be left out).
    pub fn args(self) -> &'static [&'static str] {
        match self {
            Source::BenchAll => &["bench", "all", "--json"],
            Source::CpuhpQemu => &["bench", "cpuhp", "--platform", "qemu", "--json"],
            Source::CpuhpLinux => &["bench", "cpuhp", "--platform", "qemu", "--linux", "--json"],
            Source::BcacheQemu => &["bench", "bcache", "--platform", "qemu", "--json"],
            Source::Boot => &[
                "boot",
                "--hotplug",
                "1G",
                "--resize",
                "512M,1G,128M",
                "--json",
                "--linux",
            ],
        }
    }

    /// That command, as one types it.
    pub fn command(self) -> String {
        format!("hotkern {}", self.args().join(" "))
    }
}

/// Why an input cannot be used.
#[derive(Debug, Clone, PartialEq)]
pub enum Problem {
    /// The file is not in the directory.
    Missing(Source),
    /// The file could not be read (the error).
    Unreadable(Source, String),
    /// The file is not JSON (serde_json's message, with line and column).
    NotJson(Source, String),
    /// The file holds no document for this benchmark.
    NoBench(Source, String),
    /// The document lacks what a figure needs (what).
    Lacks(Source, String),
    /// What should have written the document (a benchmark, a command)
    /// did not run or failed, and why.
    Failed(Source, String, String),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing(source) => write!(
                f,
                "{} was not given (it is what `{}` prints)",
                source.file(),
                source.command()
            ),
            Problem::Unreadable(source, error) => {
                write!(f, "{} could not be read: {error}", source.file())
            }
            Problem::NotJson(source, error) => {
                write!(f, "{} is not JSON: {error}", source.file())
            }
            Problem::NoBench(source, bench) => write!(
                f,
                "{} has no \"{bench}\" document (did `{}` fail?)",
                source.file(),
                source.command()
            ),
            Problem::Lacks(source, what) => write!(f, "{} has no {what}", source.file()),
            Problem::Failed(source, what, why) => {
                write!(f, "{what} did not run ({}): {why}", source.file())
            }
        }
    }
}

/// Every input read from a directory.
#[derive(Debug, Clone)]
pub struct Inputs {
    documents: BTreeMap<Source, Result<Value, Problem>>,
}

impl Inputs {
    /// Reads each [`Source`]'s file from `dir`; a file that is absent or
    /// broken is remembered with its [`Problem`], never an error here.
    pub fn read(dir: &Path) -> Inputs {
        let documents = Source::ALL
            .iter()
            .map(|&source| {
                let path = dir.join(source.file());
                let document = match std::fs::read_to_string(&path) {
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        Err(Problem::Missing(source))
                    }
                    Err(error) => Err(Problem::Unreadable(source, error.to_string())),
                    Ok(text) => serde_json::from_str(&text)
                        .map_err(|error| Problem::NotJson(source, error.to_string())),
                };
                (source, document)
            })
            .collect();
        Inputs { documents }
    }

    /// Inputs from documents in memory (tests, and `report --run`).
    pub fn from_documents(documents: impl IntoIterator<Item = (Source, Value)>) -> Inputs {
        let mut all: BTreeMap<Source, Result<Value, Problem>> = Source::ALL
            .iter()
            .map(|&source| (source, Err(Problem::Missing(source))))
            .collect();
        for (source, value) in documents {
            all.insert(source, Ok(value));
        }
        Inputs { documents: all }
    }

    /// Sets `source`'s document, or why there is none.
    pub fn set(&mut self, source: Source, document: Result<Value, Problem>) {
        self.documents.insert(source, document);
    }

    /// The document of `source`, or why there is none.
    pub fn document(&self, source: Source) -> Result<&Value, Problem> {
        match self.documents.get(&source) {
            Some(Ok(value)) => Ok(value),
            Some(Err(problem)) => Err(problem.clone()),
            None => Err(Problem::Missing(source)),
        }
    }

    /// The document of benchmark `bench` in `source`, which holds one
    /// document or an array of them (`bench all`).
    pub fn bench(&self, source: Source, bench: &str) -> Result<Bench<'_>, Problem> {
        let document = self.document(source)?;
        let found = match document {
            Value::Array(documents) => documents.iter().find(|d| d["bench"] == bench),
            single => (single["bench"] == bench).then_some(single),
        };
        let value = found.ok_or_else(|| Problem::NoBench(source, bench.to_owned()))?;
        if let Some(error) = value["error"].as_str() {
            return Err(Problem::Failed(
                source,
                format!("bench {bench}"),
                error.to_owned(),
            ));
        }
        if !value["cases"].is_array() {
            return Err(Problem::Lacks(source, format!("\"cases\" in \"{bench}\"")));
        }
        Ok(Bench { source, value })
    }

    /// The `"notes"` of every benchmark document read, with their source.
    pub fn notes(&self) -> Vec<(Source, String)> {
        let mut notes = Vec::new();
        for (source, document) in &self.documents {
            let Ok(document) = document else { continue };
            let documents = match document {
                Value::Array(documents) => documents.iter().collect(),
                single => vec![single],
            };
            for document in documents {
                let bench = document["bench"].as_str().unwrap_or("boot");
                for note in document["notes"].as_array().into_iter().flatten() {
                    if let Some(note) = note.as_str() {
                        notes.push((*source, format!("{bench}: {note}")));
                    }
                }
            }
        }
        notes
    }
}

/// One benchmark's document: `{"bench", "cases": [{"name", "impl", ...}],
/// "ratios", "notes"}` as `hotkern bench --json` prints it.
#[derive(Debug, Clone, Copy)]
pub struct Bench<'a> {
    /// Where it came from.
    pub source: Source,
    value: &'a Value,
}

impl<'a> Bench<'a> {
    /// Every case.
    pub fn cases(&self) -> impl Iterator<Item = &'a Value> {
        self.value["cases"].as_array().into_iter().flatten()
    }

    /// The case `name` measured for `implementation`.
    pub fn case(&self, name: &str, implementation: &str) -> Option<&'a Value> {
        self.cases()
            .find(|case| case["name"] == name && case["impl"] == implementation)
    }

    /// Figure `key` of case (`name`, `implementation`) as a number.
    pub fn figure(&self, name: &str, implementation: &str, key: &str) -> Option<f64> {
        self.case(name, implementation)?[key].as_f64()
    }

    /// The names of the cases starting with `prefix`, in run order, once.
    pub fn names(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for case in self.cases() {
            if let Some(name) = case["name"].as_str() {
                if name.starts_with(prefix) && !names.iter().any(|n| n == name) {
                    names.push(name.to_owned());
                }
            }
        }
        names
    }

    /// The implementations measured in cases starting with `prefix`, in
    /// run order, once.
    pub fn implementations(&self, prefix: &str) -> Vec<String> {
        let mut found: Vec<String> = Vec::new();
        for case in self.cases() {
            let name = case["name"].as_str().unwrap_or("");
            if let Some(implementation) = case["impl"].as_str() {
                if name.starts_with(prefix) && !found.iter().any(|i| i == implementation) {
                    found.push(implementation.to_owned());
                }
            }
        }
        found
    }

    /// The first of this document's notes that states a target and
    /// mentions `topic`, without its leading "target"; a sentence saying
    /// none was found otherwise, so a caption never goes without it.
    pub fn target(&self, topic: &str) -> String {
        self.value["notes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|note| note.starts_with("target") && note.contains(topic))
            .map_or_else(
                || format!("({} states no target about {topic})", self.source.file()),
                |note| {
                    let rest = note.trim_start_matches("target").trim_start_matches(':');
                    format!(
                        "Target{}{}",
                        if rest.starts_with(' ') { "" } else { " " },
                        rest
                    )
                },
            )
    }

    /// A [`Problem::Lacks`] naming `what` in this document.
    pub fn lacks(&self, what: &str) -> Problem {
        Problem::Lacks(self.source, what.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_broken_file_is_a_problem_naming_it() {
        let dir = std::env::temp_dir().join(format!("hotkern-report-in-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("bench-all.json"), "[{\"bench\": ").unwrap();
        let inputs = Inputs::read(&dir);
        let broken = inputs.bench(Source::BenchAll, "physmem").unwrap_err();
        assert!(matches!(broken, Problem::NotJson(Source::BenchAll, _)));
        assert!(broken.to_string().starts_with("bench-all.json is not JSON"));
        let missing = inputs.document(Source::Boot).unwrap_err();
        assert_eq!(missing, Problem::Missing(Source::Boot));
        assert!(missing.to_string().contains("hotkern boot"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_input_names_the_command_that_writes_it() {
        // `report --run --qemu` boots without Linux by leaving out the last.
        assert_eq!(Source::Boot.args().last(), Some(&"--linux"));
        assert_eq!(
            Source::CpuhpQemu.command(),
            "hotkern bench cpuhp --platform qemu --json"
        );
        let failed = Problem::Failed(Source::CpuhpLinux, "x".into(), "no kernel".into());
        assert_eq!(
            failed.to_string(),
            "x did not run (cpuhp-linux.json): no kernel"
        );
    }

    #[test]
    fn bench_finds_its_document_in_an_array_or_alone() {
        let physmem = serde_json::json!({"bench": "physmem", "cases": [
            {"name": "a", "impl": "x", "ns_per_op": 2.0},
            {"name": "a", "impl": "y"}, {"name": "b", "impl": "x"}]});
        let inputs = Inputs::from_documents([
            (Source::BenchAll, Value::Array(vec![physmem.clone()])),
            (Source::CpuhpQemu, physmem),
        ]);
        let bench = inputs.bench(Source::BenchAll, "physmem").unwrap();
        assert_eq!(bench.figure("a", "x", "ns_per_op"), Some(2.0));
        assert_eq!(bench.names(""), ["a", "b"]);
        assert_eq!(bench.implementations("a"), ["x", "y"]);
        assert!(inputs.bench(Source::CpuhpQemu, "physmem").is_ok());
        assert!(bench.target("x").contains("states no target about x"));
        assert_eq!(
            inputs.bench(Source::BenchAll, "trace").unwrap_err(),
            Problem::NoBench(Source::BenchAll, "trace".into())
        );
    }
}
