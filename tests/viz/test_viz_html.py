"""The HTML dump is one self-contained page; headless Chromium renders the CNN training plan
with one element per node and per buffer, hover and click work, and nothing is logged as an
error. The screenshot is left in test-artifacts/ for people to look at."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from singa_graph import viz
from singa_graph.viz.extract import extract

from viz_plans import expected_buffers

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage",
         "--enable-logging=stderr", "--v=0"]

# Runs before the page's own script: collects errors and console.error calls.
WATCH = """<script>window.__errors = [];
window.addEventListener('error', e => window.__errors.push('error: ' + e.message));
const __ce = console.error;
console.error = (...a) => { window.__errors.push('console.error: ' + a.join(' ')); __ce(...a); };
</script>"""

# Runs after it: hovers over a buffer, clicks a node, and writes what it saw into the DOM.
PROBE = """<script>
const rects = document.querySelectorAll('svg.timeline rect.buf');
const nodes = document.querySelectorAll('svg.graph g.node');
const r = rects[0].getBoundingClientRect();
rects[0].dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.x + 1,
                                                    clientY: r.y + 1}));
const tip = document.getElementById('tip');
const hover = {shown: tip.style.display, text: tip.textContent};
nodes[0].dispatchEvent(new MouseEvent('click', {bubbles: true}));
const out = {nodes: nodes.length, buffers: rects.length, hover: hover,
             highlighted: document.querySelectorAll('rect.buf.hl').length,
             selected: Array.from(document.querySelectorAll('g.node.sel')).map(
               g => g.dataset.name),
             rows: document.querySelectorAll('#schedule tbody tr').length,
             ready: document.body.dataset.ready || '', errors: window.__errors};
const pre = document.createElement('pre'); pre.id = 'probe';
pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
</script>"""


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; "
                "`make test` installs it when it runs as root with apt-get)")


def _run(browser, url, *extra, timeout=120):
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        r = subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *extra, url],
                           capture_output=True, text=True, timeout=timeout)
    return r


def test_html_is_self_contained(cnn_plan, tmp_path):
    p = tmp_path / "cnn.html"
    assert viz.dump(cnn_plan, p) == "html"
    text = p.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "@import" not in text and "url(http" not in text
    data = re.search(r"<script type='application/json' id='viz-data'>(.*?)</script>", text,
                     re.S).group(1)
    assert len(json.loads(data.replace("<\\/", "</"))["buffers"]) == \
        expected_buffers(cnn_plan)


def test_html_profile_section(cnn_plan, tmp_path):
    import numpy as np

    feeds = [np.zeros(t.shape, t.dtype) for t in cnn_plan.inputs]
    prof = cnn_plan.profile(feeds, repeat=1)
    text = viz.to_html(extract(cnn_plan, profile=prof))
    assert "Time profile" in text and "id='profile'" in text
    assert text.count("<td class='num'>") > len(cnn_plan.nodes)


def test_chromium_renders_cnn_training_plan(cnn_plan, tmp_path, artifacts):
    browser = _browser()
    view = extract(cnn_plan)
    page = viz.to_html(view)
    path = tmp_path / "cnn_train.html"
    path.write_text(page)
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("<head>", "<head>" + WATCH, 1)
                     .replace("</body>", PROBE + "</body>", 1))
    r = _run(browser, probe.as_uri(), "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, f"the probe did not run; chromium said: {r.stderr[-2000:]}"
    seen = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))
    assert seen["errors"] == []
    assert seen["nodes"] == len(cnn_plan.graph.nodes)
    assert seen["buffers"] == len(view.buffers) == expected_buffers(cnn_plan)
    assert seen["rows"] == len(cnn_plan.nodes)
    assert seen["ready"] == f"{seen['nodes']} nodes, {seen['buffers']} buffers"
    b0 = view.buffers[0]
    assert seen["hover"]["shown"] == "block"
    for part in (b0.tensor, b0.producer, b0.last_reader, "x".join(map(str, b0.shape))):
        assert part in seen["hover"]["text"]
    first = cnn_plan.graph.nodes[0]
    assert seen["selected"] == [first.name]
    assert seen["highlighted"] == sum(1 for b in view.buffers if first.name in
                                      (b.producer, b.last_reader) or
                                      set(b.tensors) & {o.name for o in first.outputs})
    assert seen["highlighted"] >= 1
    console = [ln for ln in r.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == []
    shot = os.path.join(artifacts, "cnn_train_html.png")
    r = _run(browser, path.as_uri(), "--window-size=1600,1100", f"--screenshot={shot}")
    assert r.returncode == 0 and os.path.getsize(shot) > 10_000, r.stderr[-2000:]


def test_html_of_a_bare_graph(cnn_plan):
    from singa_graph.ir.graph import Graph

    text = viz.to_html(extract(Graph(cnn_plan.graph.outputs)))
    assert text.count("class=\"node\"") == len(cnn_plan.graph.nodes)
    assert "rect class=\"buf" not in text and "no plan" in text
