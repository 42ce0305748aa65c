"""report.html of real runs in a real headless browser (issue 10's acceptance): a short quickstart and a
short incast with ECN, DCQCN and PFC (scenarios/quickstart.yaml and incast_both.yaml, shrunk) each write
report.html at the end of ``testbed run``; Debian's chromium, driven by Selenium through chromedriver,
opens each: every plot's <img> is loaded (naturalWidth > 0), displayed inside the viewport's width, or
replaced by its 'not recorded' line, the page fetched nothing, and the console has no error. A screenshot
of the whole page (saved in the test's tmp_path) is not blank, nor is the part of it under each plot; and
each plot's data is inside its axes: the limits and every artist's data extent each <img> carries in
``data-axes`` (read back from matplotlib after drawing, testbed.report.extent) agree, reference lines
(the busbw plot's link goodput, the queue thresholds) included. A jobs run's interference matrix is an HTML
table: every cell's text has WCAG contrast >= 4.5 against its cell in chromium's computed styles."""
import base64
import io
import json
import re
import shutil
from pathlib import Path

import numpy as np

import pytest
import yaml

from conftest import run_cli, run_scenario_file
from testbed.report.extent import outside

pytestmark = [pytest.mark.integration, pytest.mark.writes_report]

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
PLOTS = {"busbw", "latency_cdf", "queue_heatmap", "queue_busiest", "link_utilization", "congestion", "qp_rates"}


def _shrunk(name: str, **changes) -> str:
    data = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    for path, value in changes.items():
        node = data
        *parents, leaf = path.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return yaml.safe_dump(data)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (testbed run's stdout, run directory) of the two short runs (about 15 s each)."""
    tmp = tmp_path_factory.mktemp("report")
    out = {}
    for name, text in (
            ("quickstart", _shrunk("quickstart", **{"workload.sizes.max_bytes": "256KiB", "workload.iterations": 2})),
            ("incast_both", _shrunk("incast_both", **{"workload.pattern.size_bytes": "512KiB"}))):
        res, summary = run_scenario_file(tmp, text, timeout=240, expect_rc=None, name=name)
        out[name] = (res.stdout, Path(summary["run_dir"]))
    return out


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed (scripts/install adds them on Debian)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1200,900"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


_PLOTS_JS = """
return Array.from(document.querySelectorAll('section[id^="plot-"]')).map(s => {
  const img = s.querySelector('img.plot'), miss = s.querySelector('p.missing');
  const r = img ? img.getBoundingClientRect() : null;
  return {key: s.id.slice(5), complete: img ? img.complete : null, width: img ? img.naturalWidth : 0,
          height: img ? img.naturalHeight : 0, missing: miss ? miss.textContent : null,
          axes: img ? JSON.parse(img.dataset.axes) : null, viewport_width: window.innerWidth,
          box: r ? {left: r.left, right: r.right, top: r.top + window.scrollY, bottom: r.bottom + window.scrollY,
                    width: r.width, height: r.height} : null};
});"""


def _open(browser, run_dir: Path) -> dict:
    """Load report.html; return plot key -> its state, after checking the console and the fetches."""
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get((run_dir / "report.html").as_uri())
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(browser, 20).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && "
        "Array.from(document.images).every(i => i.complete)"))
    plots = {p["key"]: p for p in browser.execute_script(_PLOTS_JS)}
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors
    fetched = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert [u for u in fetched if not u.startswith("data:")] == [], fetched  # self-contained: nothing fetched
    assert set(plots) == PLOTS, plots
    return plots


def _drawn(plots: dict, key: str) -> None:
    p = plots[key]
    assert p["complete"] and p["width"] > 500 and p["height"] > 200 and p["missing"] is None, p
    box = p["box"]
    assert box["width"] > 300 and box["left"] >= 0 and box["right"] <= p["viewport_width"], (key, box)
    assert p["axes"] and all(s["y"] is not None for ax in p["axes"] for s in ax["series"]), (key, p["axes"])
    assert outside(p["axes"]) == [], (key, outside(p["axes"]))


def _screenshot(browser, path: Path) -> np.ndarray:
    """The whole page as pixels (rows x columns x RGB(A), 0..1), also saved as ``path`` (a PNG)."""
    from matplotlib.image import imread

    size = browser.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = browser.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}})
    png = base64.b64decode(shot["data"])
    path.write_bytes(png)
    return imread(io.BytesIO(png))


def _not_blank(pixels: np.ndarray) -> bool:
    """More than 1 % of the pixels differ from white and there are more than 20 distinct colours."""
    rgb = (pixels[..., :3] * 255).round().astype(np.uint8)
    inked = (rgb < 245).any(axis=-1).mean()
    return inked > 0.01 and len(np.unique(rgb.reshape(-1, 3), axis=0)) > 20


def _check_screenshot(browser, plots: dict, path: Path) -> None:
    pixels = _screenshot(browser, path)
    assert path.stat().st_size > 10_000 and _not_blank(pixels), path
    for key, p in plots.items():
        if p["box"] is not None:  # the part of the screenshot under each drawn plot holds a picture
            b = p["box"]
            crop = pixels[int(b["top"]):int(b["bottom"]), int(b["left"]):int(b["right"])]
            assert crop.shape[0] > 100 and _not_blank(crop), (key, b, crop.shape)


def test_every_run_writes_its_report_in_budget(runs):
    for name, (stdout, run_dir) in runs.items():
        m = re.search(r"^# report: (\S+) \(([\d.]+) s\)$", stdout, re.M)
        assert m and Path(m.group(1)) == run_dir / "report.html", stdout[-2000:]
        print(name, "report.html written in", m.group(2), "s")
        assert float(m.group(2)) < 30  # budget 3 s for the quickstart (measured: docs/results.md, Report); generous under load


def test_quickstart_report_loads_every_plot_in_chromium(runs, browser, tmp_path):
    plots = _open(browser, runs["quickstart"][1])
    for key in PLOTS - {"congestion"}:
        _drawn(plots, key)
    assert plots["congestion"]["missing"].startswith("not recorded in this run: no congestion handling")
    _check_screenshot(browser, plots, tmp_path / "quickstart-report.png")
    busbw = plots["busbw"]["axes"][0]
    ref = [s for s in busbw["series"] if s["ref"]]
    assert len(ref) == 1 and ref[0]["label"].startswith("link goodput"), busbw
    assert busbw["ylim"][1] > ref[0]["y"][1] * 1.02  # the goodput line inside the axes, with a margin


def test_incast_report_loads_every_plot_in_chromium(runs, browser, tmp_path):
    run_dir = runs["incast_both"][1]
    assert run_cli("report", run_dir).returncode == 0  # remade from the tables
    plots = _open(browser, run_dir)
    for key in PLOTS - {"busbw"}:
        _drawn(plots, key)
    assert plots["busbw"]["missing"].startswith("not recorded in this run: this run sends flows")
    _check_screenshot(browser, plots, tmp_path / "incast-report.png")
    refs = {s["label"] for ax in plots["queue_busiest"]["axes"] for s in ax["series"] if s["ref"]}
    assert {"kmin_bytes", "kmax_bytes", "xoff_bytes", "xon_bytes"} <= refs, refs  # thresholds inside the panels
    assert len(plots["queue_busiest"]["axes"]) >= 2  # one panel per busy port


_MATRIX_JS = """
return Array.from(document.querySelectorAll('#plot-jobs_interference table.matrix td')).map(td => {
  const s = getComputedStyle(td), r = td.getBoundingClientRect();
  return {text: td.textContent, color: s.color, background: s.backgroundColor, width: r.width, height: r.height};
});"""


def _rgb(css: str) -> tuple[float, ...]:
    """'rgb(r, g, b)' or 'rgba(r, g, b, a)' as (r, g, b) in 0..255; a transparent cell shows the page's white."""
    nums = [float(x) for x in re.findall(r"[\d.]+", css)]
    return (255.0, 255.0, 255.0) if len(nums) == 4 and nums[3] == 0 else tuple(nums[:3])


def _wcag_contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    def lum(rgb):
        c = np.asarray(rgb) / 255
        return float(np.where(c <= 0.03928, c / 12.92, ((c + 0.055) / 1.055) ** 2.4) @ [0.2126, 0.7152, 0.0722])
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_interference_matrix_text_contrast_in_chromium(runs, browser, tmp_path):
    """The quickstart's run directory given a jobs block with an interference matrix from 1.00 to 2.00
    (the summary ``testbed run --solo`` writes), its report remade: in chromium every matrix cell's text
    against its background, both from the computed styles, has WCAG contrast ratio >= 4.5 (AA)."""
    run_dir = tmp_path / "jobs-run"
    shutil.copytree(runs["quickstart"][1], run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    values = [[1.0, 1.99, 1.5], [1.25, 1.0, 2.0], [1.1, 1.75, 1.0]]
    summary["jobs"] = {"jobs": [{"name": n, "links": []} for n in "abc"], "shared_links": {},
                       "interference": {"jobs": list("abc"), "jct_slowdown": values, "method": "pair runs"}}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    assert run_cli("report", run_dir).returncode == 0
    browser.get((run_dir / "report.html").as_uri())
    from selenium.webdriver.support.ui import WebDriverWait
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return document.readyState === 'complete'"))
    cells = browser.execute_script(_MATRIX_JS)
    assert [c["text"] for c in cells] == [f"{v:.2f}" for row in values for v in row], cells
    ratios = {c["text"]: round(_wcag_contrast(_rgb(c["color"]), _rgb(c["background"])), 2) for c in cells}
    print("matrix cells' text contrast in chromium:", ratios)
    assert min(ratios.values()) >= 4.5, (ratios, cells)
    assert _rgb(cells[5]["background"]) != _rgb(cells[0]["background"])  # 2.00 and 1.00: coloured by value
    assert all(c["width"] > 20 and c["height"] > 10 for c in cells), cells  # laid out, not hidden
