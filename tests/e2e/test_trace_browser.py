"""The HTML report's way into the trace in a real browser (headless Chromium, as
test_report_browser.py): the timeline's lanes drawn, a hover showing an escaped hostile name, tables
sorted by a click, and the Perfetto button's message: a local page stands in for ui.perfetto.dev (it
answers PONG to PING, as Perfetto's documented handshake does, and records what it is posted); the
buffer must be the trace's bytes, fetched from beside the report (served over HTTP) or picked with
the file input (opened as a file).
"""

import base64
import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest
from perfsleuth.api import analyze_file
from perfsleuth.render.outputs import write_outputs
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from test_report_browser import chromium, visible
from tracebuilder_rules import RuleTraceBuilder

HOSTILE = '<img src=x onerror="document.title=1">&amp;'

STUB = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>stub perfetto</title></head>
<body><script>
window.received = null; window.pings = 0;
window.addEventListener("message", function (e) {
  if (e.data === "PING") { window.pings++; e.source.postMessage("PONG", "*"); return; }
  if (e.data && e.data.perfetto) {
    var p = e.data.perfetto, bytes = new Uint8Array(p.buffer), bin = "";
    for (var i = 0; i < bytes.length; i++) { bin += String.fromCharCode(bytes[i]); }
    window.received = {title: p.title, fileName: p.fileName, b64: btoa(bin),
                       opener: e.source === window.opener};
  }
});
</script></body></html>"""


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(folder):
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """site/t.json.gz and its report in site/out/; a stub Perfetto on another origin."""
    root = tmp_path_factory.mktemp("site")
    tb = RuleTraceBuilder()
    tb.step(1, 0, 400)
    tb.op("aten::mm", 2, 40)
    tb.typed_launch("aten::addmm", ["float"], "sgemm_kernel", host=(50, 20), device=(60, 100))
    tb.op(HOSTILE, 200, 60)
    trace = tb.write(root / "t.json.gz")
    report = analyze_file(trace).to_dict()
    write_outputs(report, out_dir=root / "out")
    stub_dir = tmp_path_factory.mktemp("stub")
    (stub_dir / "index.html").write_text(STUB)
    page_server, page_origin = serve(root)
    stub_server, stub_origin = serve(stub_dir)
    yield {
        "root": root,
        "trace": trace,
        "report": report,
        "page": f"{page_origin}/out/report.html",
        "stub": stub_origin,
    }
    page_server.shutdown()
    stub_server.shutdown()


def test_timeline_lanes_and_an_escaped_hover(site):
    driver = chromium()
    try:
        driver.get(site["page"])
        assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []
        svg = driver.find_element(By.ID, "timeline-svg")
        assert visible(svg)
        lanes = svg.find_elements(By.CSS_SELECTOR, "g.lane")
        assert [lane.get_attribute("class") for lane in lanes] == ["lane host", "lane device"]
        assert all(
            lane.find_element(By.CSS_SELECTOR, "rect.lane-bg").size["width"] > 500 for lane in lanes
        )
        rects = svg.find_elements(By.CSS_SELECTOR, "rect.ev")
        assert len(rects) == len(site["report"]["timeline"]["events"]) == 5
        hostile = next(
            r
            for r in rects
            if r.find_element(By.TAG_NAME, "title").get_attribute("textContent").startswith("<img")
        )
        ActionChains(driver).move_to_element(hostile).perform()
        tip = driver.find_element(By.CSS_SELECTOR, "section.timeline .tl-tip")
        WebDriverWait(driver, 5).until(lambda _: tip.is_displayed())
        assert tip.text.startswith(f"{HOSTILE} — 60 µs · Host")
        # the name stayed text: no element was made of it, its handler never ran
        assert driver.execute_script("return document.querySelectorAll('img').length") == 0
        assert tip.find_elements(By.XPATH, "./*") == []
        assert driver.title.startswith("perfsleuth: ")
        assert driver.execute_script("return document.scripts.length") == 1
    finally:
        driver.quit()


def test_a_click_on_a_column_name_sorts_the_table(site):
    driver = chromium()
    try:
        driver.get(site["page"])
        table = driver.find_element(By.CSS_SELECTOR, "#ops table")
        total = table.find_elements(By.CSS_SELECTOR, "thead th")[3]
        assert total.text.lower().startswith("total")

        def totals():
            return [
                float(td.get_attribute("data-v"))
                for td in table.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(4)")
            ]

        total.click()
        assert (
            totals() == sorted(totals(), reverse=True)
            and total.get_attribute("aria-sort") == "descending"
        )
        total.click()
        assert totals() == sorted(totals()) and total.get_attribute("aria-sort") == "ascending"
        assert len(set(totals())) == 3
        name = table.find_elements(By.CSS_SELECTOR, "thead th")[1]
        name.click()
        names = [td.text for td in table.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(2)")]
        assert names == sorted(names, key=str.lower)
    finally:
        driver.quit()


def received(driver, stub_origin: str) -> dict:
    """Switch to the stub Perfetto window and wait for the message it records."""
    WebDriverWait(driver, 10).until(lambda d: len(d.window_handles) == 2)
    driver.switch_to.window(driver.window_handles[1])
    WebDriverWait(driver, 10).until(
        lambda d: d.execute_script(
            "return window.received !== undefined && window.received !== null"
        )
    )
    assert driver.current_url.startswith(stub_origin)
    return driver.execute_script("return window.received")


def test_perfetto_button_posts_the_trace_fetched_from_beside_the_report(site):
    driver = chromium()
    try:
        driver.get(site["page"])
        button = driver.find_element(By.CSS_SELECTOR, "button.perfetto")
        assert (
            "needs the network" in button.text
            and button.get_attribute("data-trace") == "../t.json.gz"
        )
        assert button.get_attribute("data-origin") == "https://ui.perfetto.dev"
        driver.execute_script(
            "arguments[0].setAttribute('data-origin', arguments[1])", button, site["stub"]
        )
        button.click()
        got = received(driver, site["stub"])
        assert base64.b64decode(got["b64"]) == site["trace"].read_bytes()
        assert (got["title"], got["fileName"], got["opener"]) == ("t.json.gz", "t.json.gz", True)
        assert driver.execute_script("return window.pings") >= 1
    finally:
        driver.quit()


def test_perfetto_button_on_a_file_page_offers_the_file_picker(site):
    driver = chromium()
    try:
        driver.get((site["root"] / "out" / "report.html").as_uri())
        button = driver.find_element(By.CSS_SELECTOR, "button.perfetto")
        pick = driver.find_element(By.CSS_SELECTOR, ".perfetto-pick")
        assert not pick.is_displayed()
        driver.execute_script(
            "arguments[0].setAttribute('data-origin', arguments[1])", button, site["stub"]
        )
        button.click()
        WebDriverWait(driver, 5).until(lambda _: pick.is_displayed())
        driver.find_element(By.CSS_SELECTOR, "input.perfetto-file").send_keys(str(site["trace"]))
        got = received(driver, site["stub"])
        assert base64.b64decode(got["b64"]) == site["trace"].read_bytes()
        assert got["fileName"] == "t.json.gz"
    finally:
        driver.quit()
