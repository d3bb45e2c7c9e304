"""Tests of scripts/check-report: a report page passes, and the same page
with a planted fault -- a console error, an uncaught exception, a request
for something outside the page, a figure whose SVG lacks a series its data
has -- fails. Each case opens Chromium (about a second).

    HOTKERN_REPORT=report.html python3 -m unittest discover -s scripts -p 'test_check_report.py'

HOTKERN_REPORT is a page `hotkern report` wrote.
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.environ.get("HOTKERN_REPORT")


@unittest.skipUnless(REPORT, "HOTKERN_REPORT names no page")
class CheckReport(unittest.TestCase):
    def check(self, html):
        """check-report's exit status and output on `html`."""
        with tempfile.TemporaryDirectory() as directory:
            page = os.path.join(directory, "report.html")
            with open(page, "w", encoding="utf-8") as f:
                f.write(html)
            run = subprocess.run(
                [sys.executable, os.path.join(HERE, "check-report"), page],
                capture_output=True, text=True, timeout=120)
        return run.returncode, run.stdout + run.stderr

    def page(self):
        with open(REPORT, encoding="utf-8") as f:
            return f.read()

    def planted(self, script):
        return self.page().replace("</body>", f"{script}\n</body>", 1)

    def test_the_page_passes(self):
        status, output = self.check(self.page())
        self.assertEqual(status, 0, output)

    def test_a_console_error_fails(self):
        status, output = self.check(self.planted("<script>console.error('planted')</script>"))
        self.assertEqual(status, 1, output)
        self.assertIn("console.error: planted", output)

    def test_an_uncaught_exception_fails(self):
        status, output = self.check(self.planted("<script>null.planted()</script>"))
        self.assertEqual(status, 1, output)
        self.assertIn("uncaught exception", output)

    def test_a_request_outside_the_page_fails(self):
        status, output = self.check(self.planted('<img src="http://127.0.0.1:9/planted.png">'))
        self.assertEqual(status, 1, output)
        self.assertIn("the page requested http://127.0.0.1:9/planted.png", output)

    def test_a_series_missing_from_a_figure_fails(self):
        html, count = re.subn(r'data-series="(\d+)"',
                              lambda m: f'data-series="{int(m.group(1)) + 1}"', self.page(), 1)
        self.assertEqual(count, 1, "the page has no drawn figure")
        status, output = self.check(html)
        self.assertEqual(status, 1, output)
        self.assertIn("did not render as its data says", output)

    def test_a_page_without_its_check_fails(self):
        html = re.sub(r"<script>\s*\(function \(\) \{.*?</script>", "", self.page(), flags=re.S)
        status, output = self.check(html)
        self.assertEqual(status, 1, output)
        self.assertIn("wrote no verdict", output)


if __name__ == "__main__":
    unittest.main()
