"""Open every page of a built site that has equations in headless Chromium, with no network,
and check that MathJax typeset them all, in its own fonts.

Run it on a build (``make docs-noplot`` is enough: the equations are in the pages, not in
the examples' output)::

    python doc/check_maths_offline.py [doc/_build/html]

It needs Chromium (Debian: ``apt-get install chromium``), which the test suite does not:
``tests/test_docs.py`` checks the same promise on the HTML alone (every page with maths loads
the MathJax of the build; no page loads anything from another site).

Each page is copied, with the build, into a temporary folder and given one more script at the
end of its body.  When MathJax has finished and the fonts have loaded, that script writes into
the page how many equations were typeset, how many are errors, and which MathJax fonts loaded
or failed; Chromium prints the final page (``--dump-dom``).  Every host name resolves to
nothing (``--host-resolver-rules``), so a page that needed the network would show raw TeX.
Exit status 0 when every page passes, 1 otherwise.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# an element that sphinx.ext.mathjax wrote as TeX, for MathJax to typeset
MATHS = re.compile(r'<(?:span|div) class="math notranslate nohighlight">')
PROBE = """
<script>
window.addEventListener("load", function () {
  var report = document.createElement("pre");
  report.id = "maths-offline-report";
  function write(text) { report.textContent = text; document.body.appendChild(report); }
  if (!window.MathJax || !MathJax.startup) { write("mathjax=absent"); return; }
  MathJax.startup.promise.then(function () { return document.fonts.ready; }).then(function () {
    var fonts = Array.from(document.fonts).filter(function (f) {
      return f.family.indexOf("MJX") === 0 && f.status !== "unloaded";
    });
    write(["mathjax=" + MathJax.version,
           "typeset=" + document.querySelectorAll("mjx-container").length,
           "errors=" + document.querySelectorAll("mjx-merror").length,
           "fonts_loaded=" + fonts.filter(function (f) { return f.status === "loaded"; }).length,
           "fonts_failed=" + fonts.filter(function (f) { return f.status === "error"; }).length
           ].join(" "));
  });
});
</script>
"""


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    sys.exit(f"no Chromium found (looked for {', '.join(BROWSERS)}): "
             "install one, e.g. `apt-get install chromium` on Debian")


def _render(browser, page, timeout):
    command = [browser, "--headless", "--disable-gpu", "--no-first-run",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--virtual-time-budget=20000",
               "--dump-dom", page.as_uri()]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.insert(1, "--no-sandbox")   # Chromium's sandbox refuses to run as root
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    return result.stdout


def _report(dom):
    match = re.search(r'<pre id="maths-offline-report"[^>]*>([^<]*)</pre>', dom)
    if match is None:
        return {}
    fields = dict(item.split("=", 1) for item in match.group(1).split())
    return {key: value if key == "mathjax" else int(value) for key, value in fields.items()}


def check(build, timeout=120):
    """Check every page of ``build`` with maths; return the list of failures."""
    browser = _browser()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "html"
        shutil.copytree(build, site)
        pages = [path for path in sorted(site.rglob("*.html"))
                 if not path.relative_to(site).parts[0] == "_static"
                 and MATHS.search(path.read_text(encoding="utf-8"))]
        if not pages:
            return [f"{build}: no page with equations"]
        for page in pages:
            text = page.read_text(encoding="utf-8")
            expected = len(MATHS.findall(text))
            page.write_text(text.replace("</body>", PROBE + "</body>"), encoding="utf-8")
            report = _report(_render(browser, page, timeout))
            name = page.relative_to(site).as_posix()
            print(f"{name}: {expected} equations; "
                  + (" ".join(f"{k}={v}" for k, v in report.items()) or "no report"))
            if (report.get("typeset") != expected or report.get("errors") != 0
                    or report.get("fonts_failed") != 0 or not report.get("fonts_loaded")):
                failures.append(name)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parent / "_build" / "html"
    parser.add_argument("build", nargs="?", type=Path, default=default,
                        help=f"the HTML of a build (default: {default})")
    build = parser.parse_args().build
    if not (build / "index.html").is_file():
        sys.exit(f"{build} has no index.html: build the documentation first (make docs-noplot)")
    failures = check(build)
    print("all pages typeset offline" if not failures
          else f"{len(failures)} pages not typeset offline: {', '.join(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
