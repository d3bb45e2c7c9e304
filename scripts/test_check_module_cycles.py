"""Tests of scripts/check-module-cycles on small crates written to a
temporary directory: planted cycles must be reported, acyclic trees must
pass.

    python3 -m unittest discover -s scripts -p 'test_check_module_cycles.py'
"""

import contextlib
import importlib.machinery
import io
import importlib.util
import os
import shutil
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
loader = importlib.machinery.SourceFileLoader(
    "check_module_cycles", os.path.join(HERE, "check-module-cycles"))
spec = importlib.util.spec_from_loader(loader.name, loader)
checker = importlib.util.module_from_spec(spec)
loader.exec_module(checker)


class ModuleCycles(unittest.TestCase):
    def crate(self, files):
        """A crate directory with `files` ({path under src/: text})."""
        directory = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, directory)
        for path, text in files.items():
            full = os.path.join(directory, "src", path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w", encoding="utf-8") as handle:
                handle.write(text)
        return directory

    def cycle_modules(self, files):
        return [sorted(checker.name(m) for m, _ in members)
                for members, _ in checker.cycles(self.crate(files))]

    def test_two_modules_that_use_each_other_are_a_cycle(self):
        found = self.cycle_modules({
            "main.rs": "mod a;\nmod b;\nfn main() {}\n",
            "a.rs": "use crate::b::Beta;\npub struct Alpha;\n",
            "b.rs": "pub struct Beta;\nfn f() -> crate::a::Alpha { crate::a::Alpha }\n",
        })
        self.assertEqual(found, [["crate::a", "crate::b"]])

    def test_the_cycle_is_printed_with_its_files_and_fails(self):
        directory = self.crate({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::Beta;\npub struct Alpha;\n",
            "b/mod.rs": "use super::a::Alpha;\npub struct Beta;\n",
        })
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            self.assertEqual(checker.main([directory]), 1)
            self.assertEqual(checker.main(["--report-only", directory]), 0)
        self.assertIn("cycle 1: crate::a, crate::b", printed.getvalue())
        self.assertIn(os.path.join(directory, "src", "b", "mod.rs"), printed.getvalue())

    def test_an_acyclic_tree_passes(self):
        directory = self.crate({
            "main.rs": "mod a;\nmod b;\nmod shared;\nfn main() { a::run(); b::run(); }\n",
            "a.rs": "use crate::shared::median;\npub fn run() { median(); }\n",
            "b.rs": "mod child;\npub fn run() { child::go(); crate::shared::median(); }\n",
            "b/child.rs": "pub fn go() { crate::shared::median(); }\n",
            "shared.rs": "pub fn median() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        })
        self.assertEqual(checker.cycles(directory), [])
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(checker.main([directory]), 0)

    def test_a_child_using_its_parent_is_no_cycle_until_the_parent_uses_the_child(self):
        files = {
            "main.rs": "mod bench;\nfn main() {}\n",
            "bench.rs": "mod physmem;\npub struct Options;\n",
            "bench/physmem.rs": "use super::Options;\npub fn run(_: &Options) {}\n",
        }
        self.assertEqual(self.cycle_modules(files), [])
        files["bench.rs"] = "mod physmem;\npub struct Options;\npub fn run() { physmem::run(&Options) }\n"
        self.assertEqual(self.cycle_modules(files), [["crate::bench", "crate::bench::physmem"]])

    def test_a_name_the_parent_reexports_is_followed_to_its_module(self):
        # physmem takes Report from bench, which only re-exports it from
        # bench::report: the use is of bench::report, so no cycle.
        found = self.cycle_modules({
            "main.rs": "mod bench;\nfn main() {}\n",
            "bench.rs": "mod physmem;\nmod report;\npub use report::Report;\n"
                        "pub fn run() -> Report { physmem::run() }\n",
            "bench/report.rs": "pub struct Report;\n",
            "bench/physmem.rs": "use super::Report;\npub fn run() -> Report { Report }\n",
        })
        self.assertEqual(found, [])

    def test_a_macro_given_a_path_is_a_use_of_its_module(self):
        found = self.cycle_modules({
            "main.rs": "mod console;\nmod serial;\nfn main() {}\n",
            "console.rs": (
                "macro_rules! println { () => {} }\n"
                "pub(crate) use println;\n"
                "pub fn init() { crate::serial::Uart::init(); }\n"
            ),
            "serial.rs": (
                "use crate::console::println;\n"
                "pub struct Uart;\n"
                "impl Uart { pub fn init() { println!(); } }\n"
            ),
        })
        self.assertEqual(found, [["crate::console", "crate::serial"]])

    def test_paths_in_comments_and_strings_are_not_uses(self):
        found = self.cycle_modules({
            "main.rs": "mod a;\nmod b;\nfn main() {}\n",
            "a.rs": "use crate::b::Beta;\n",
            "b.rs": "// crate::a::Alpha\n/* use crate::a; */\n"
                    "const S: &str = \"crate::a::x\";\nconst R: &str = r#\"super::a::y\"#;\n"
                    "fn f<'a>(c: char) -> bool { c == '\"' }\npub struct Beta;\n",
        })
        self.assertEqual(found, [])

    def test_a_three_module_ring_through_super_is_one_cycle(self):
        found = self.cycle_modules({
            "main.rs": "mod a;\nfn main() {}\n",
            "a.rs": "mod b;\nmod c;\npub fn f() { b::g() }\npub struct T;\n",
            "a/b.rs": "use super::c::h;\npub fn g() { h() }\n",
            "a/c.rs": "pub fn h() { let _ = super::T; }\n",
        })
        self.assertEqual(found, [["crate::a", "crate::a::b", "crate::a::c"]])


if __name__ == "__main__":
    unittest.main()
