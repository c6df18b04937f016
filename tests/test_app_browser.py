"""The Voila app in a real browser: Debian's headless Chromium, driven by selenium through chromedriver.

The server runs on 127.0.0.1 on a free port; nothing is downloaded (selenium is given both binaries, so it
never looks for a driver of its own). Skipped where Chromium, chromedriver or the voila module are missing, except
under `CI=true`, where `.ci/run` has installed them and a missing one fails every test. Marked slow: each test
starts a server and a browser.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from utils.contract import DRAFT_MODEL
from voila_settings import readme_voila_options
from utils.evaluation.character_error_rate import character_error_rate
from utils.pages.reading_pages import sample_pages
from utils.models import REPO_ROOT, default_ir_pair

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
APP = REPO_ROOT / "app" / "speculative-ocr.ipynb"
PAGE = "letter"
MAX_NEW_TOKENS = 512  # the app's default budget (the command line's too)
START_TIMEOUT, RUN_TIMEOUT = 120, 120  # seconds
CULL_IDLE_TIMEOUT, CULL_INTERVAL = 4, 1  # seconds: the README's culling, shortened to wait for it

pytestmark = pytest.mark.slow


def missing_browser_parts() -> list[str]:
    """What the browser tests need and this machine lacks (voila is run as a module of this interpreter)."""
    parts = {"chromium": CHROMIUM, "chromedriver": CHROMEDRIVER, "the voila module": importlib.util.find_spec("voila")}
    return [name for name, found in parts.items() if not found]


def skip_or_fail_without(missing: list[str], ci: bool) -> None:
    """Skips a browser test on a developer's machine that lacks a part; fails it in CI, which installs them all."""
    if not missing:
        return
    message = f"needs {', '.join(missing)} (Debian's chromium and chromium-driver, and requirements-test.txt)"
    if ci:
        pytest.fail(f"{message}: .ci/run installs them, so under CI=true a missing one is an error")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"voila exited with code {process.returncode}")
        with socket.socket() as client:
            if client.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"voila did not listen on port {port} within {timeout} s")


@contextlib.contextmanager
def _voila(log_folder: Path, environ: dict[str, str] | None = None, options: list[str] | None = None):
    """Voila serving the app with the README's options (or `options`); stops it and every process it started
    (kernels included) afterwards."""
    import psutil

    port = _free_port()
    log_path = log_folder / "voila.log"
    log = log_path.open("w")
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "voila", str(APP), f"--port={port}", "--no-browser",
                                "--Voila.ip=127.0.0.1", *(readme_voila_options() if options is None else options)],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               env=os.environ | (environ or {}))
    try:
        _wait_for_port(port, process, START_TIMEOUT)
        yield {"url": f"http://127.0.0.1:{port}/", "started": started, "log": log_path, "pid": process.pid}
    finally:
        children = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        _, alive = psutil.wait_procs(children, timeout=20)
        for leftover in alive:
            leftover.kill()
        log.close()
        assert not alive, f"processes left behind by voila: {alive}"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    skip_or_fail_without(missing_browser_parts(), ci=os.environ.get("CI") == "true")
    default_ir_pair()  # export once, here, so the app and the command line read the same folders
    with _voila(tmp_path_factory.mktemp("voila")) as started:
        yield started


@pytest.fixture(scope="module")
def broken_draft_server(tmp_path_factory):
    """The app on the tiny target and a copy of its draft whose graph is cut short: it cannot be read."""
    skip_or_fail_without(missing_browser_parts(), ci=os.environ.get("CI") == "true")
    target, draft = default_ir_pair()
    broken = tmp_path_factory.mktemp("broken") / "draft"
    shutil.copytree(draft, broken)
    graph = broken / DRAFT_MODEL
    graph.write_bytes(graph.read_bytes()[:len(graph.read_bytes()) // 2])
    with _voila(tmp_path_factory.mktemp("voila-broken"),
                {"DSPARK_OCR_TARGET": str(target), "DSPARK_OCR_DRAFT": str(broken)}) as started:
        yield started


def _chromium():
    """A headless Chromium driven through Debian's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1800"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture
def browser(server):
    driver = _chromium()
    try:
        yield driver
    finally:
        driver.quit()


def _open_app(driver, url: str):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    return WebDriverWait(driver, START_TIMEOUT).until(lambda d: d.find_element(By.CSS_SELECTOR, ".dspark-run"))


_SOURCE_CONTROLS = {"sample page": ".dspark-page select", "typed text": ".dspark-typed textarea",
                    "upload": "button.dspark-upload"}  # each input's control, enabled only when it is chosen


def _choose(driver, source: str) -> None:
    """Clicks the "Read:" toggle's button for `source` (a key of `_SOURCE_CONTROLS`) and waits until the kernel
    has enabled that input's control and disabled the others'."""
    from selenium.webdriver.common.by import By

    next(button for button in driver.find_elements(By.CSS_SELECTOR, ".dspark-source button")
         if button.text == source).click()
    _wait(driver, lambda d: all(d.find_element(By.CSS_SELECTOR, css).get_property("disabled") == (name != source)
                                for name, css in _SOURCE_CONTROLS.items()))


def _result_text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, ".dspark-result").text


def _wait(driver, condition, timeout: float = RUN_TIMEOUT):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def _speculative_text_when_read(driver) -> str:
    """The speculative text once the read has finished (the button enabled again), found afresh: the panel
    re-renders its output area with each part it adds, so an element found mid-read can go stale."""
    from selenium.webdriver.common.by import By

    _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "pre.dspark-speculative")
          and not d.find_element(By.CSS_SELECTOR, ".dspark-run").get_property("disabled"))
    return driver.find_element(By.CSS_SELECTOR, "pre.dspark-speculative").get_attribute("textContent")


def _command_line(image: Path) -> dict:
    completed = subprocess.run([sys.executable, "-m", "utils.ocr", str(image), "--json", "--precision", "f32",
                                "--device", "CPU", "--max-new-tokens", str(MAX_NEW_TOKENS)],
                               capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    return json.loads(completed.stdout)


def test_app_reads_a_sample_page_exactly_like_the_command_line(server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    run = _open_app(browser, server["url"])
    Select(browser.find_element(By.CSS_SELECTOR, ".dspark-page select")).select_by_visible_text(PAGE)
    run.click()
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "pre.dspark-speculative"))
    first_text = time.monotonic() - server["started"]
    speculative = _speculative_text_when_read(browser)
    browser.save_screenshot(str(tmp_path / "app.png"))

    image = tmp_path / f"{PAGE}.png"
    page = next(page for page in sample_pages() if page.name == PAGE)
    page.image.save(image)
    expected = _command_line(image)
    assert speculative == expected["text"]
    assert character_error_rate([(expected["text"], page.text)]) <= 0.05  # the shipped pair reads the page
    assert "identical" in browser.find_element(By.CSS_SELECTOR, ".dspark-verdict").text
    step_rows = browser.find_elements(By.CSS_SELECTOR, "table.dspark-steps tr")[1:]  # after the header
    assert len(step_rows) == expected["metrics"]["num_steps"]
    assert (tmp_path / "app.png").stat().st_size > 10_000
    natural_width, natural_height, width, height = browser.execute_script(
        "const p = document.querySelector('img.dspark-preview'); "
        "return [p.naturalWidth, p.naturalHeight, p.clientWidth, p.clientHeight];")
    assert width > 0 and abs(width / height - natural_width / natural_height) < 0.02 * natural_width / natural_height
    # the compared texts are monospace: "iiii" as wide as "WWWW", where Il1 and O0 cannot pass for each other
    narrow, wide = browser.execute_script(
        "const pre = document.querySelector('pre.dspark-speculative'); const widths = [];"
        "for (const text of ['iiii', 'WWWW']) { const span = document.createElement('span'); span.textContent = text;"
        "  pre.appendChild(span); widths.push(span.getBoundingClientRect().width); span.remove(); }"
        "return widths;")
    assert narrow == pytest.approx(wide, rel=0.01) and narrow > 0
    # what preparing the models showed is gone: no "preparing" line, no progress bar above the app
    assert not any(line.is_displayed() for line in browser.find_elements(By.CSS_SELECTOR, ".dspark-preparing"))
    assert "export target" not in browser.find_element(By.TAG_NAME, "body").text
    print(f"\nfrom server start to first text: {first_text:.1f} s; screenshot: {tmp_path / 'app.png'}")


def test_a_typed_page_is_drawn_read_and_scored_like_the_command_line_reads_it(server, browser, tmp_path):
    """A learner types text: the panel draws it as the tiny pair's page, reads it as the command line reads that
    image, and shows the text typed beside the reading with its CER against that text; the line above the controls
    says what the tiny pair reads, and the Page dropdown is disabled while typed text is what is read."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from utils.pages.typewriter import joined_reading, render_typewriter_page, typed_lines

    typed_text = "def add(a, b):\n    return a + b"
    run = _open_app(browser, server["url"])
    assert "reads typewriter pages" in browser.find_element(By.CSS_SELECTOR, ".dspark-reach").text
    assert browser.find_element(By.CSS_SELECTOR, ".dspark-typed textarea").get_property("disabled")  # not chosen
    _choose(browser, "typed text")  # which disables the Page dropdown
    box = browser.find_element(By.CSS_SELECTOR, ".dspark-typed textarea")
    box.send_keys(typed_text.replace("\n", Keys.ENTER))
    box.send_keys(Keys.TAB)  # the box sends its value when it loses the focus
    lines = typed_lines(typed_text)
    width = render_typewriter_page(lines).width
    _wait(browser, lambda d: d.execute_script("return document.querySelector('img.dspark-preview').naturalWidth")
          == width and d.execute_script("return document.querySelector('img.dspark-preview').src.length") > 0)
    run.click()
    speculative = _speculative_text_when_read(browser)
    image = tmp_path / "typed.png"
    render_typewriter_page(lines).save(image)
    expected = _command_line(image)
    assert speculative == expected["text"]
    page_text_shown = browser.find_element(By.CSS_SELECTOR, "pre.dspark-page-text")
    assert page_text_shown.get_attribute("textContent") == typed_text  # the text typed, not the padded grid
    cer = character_error_rate([(joined_reading([expected["text"]]), typed_text)])
    assert browser.find_element(By.CSS_SELECTOR, ".dspark-cer").text == f"{cer:.1%}"


def test_a_paragraph_of_20_lines_is_read_as_4_pages_joined_as_the_command_line_reads_them(server, browser,
                                                                                         tmp_path, paragraph):
    """A learner pastes a text longer than a page: the app reads its 4 pages one after another and joins the
    readings (`joined_reading`); the command line, reading the same pages saved as PNG files, joins to the same."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from utils.pages.typewriter import joined_reading, save_typed_pages
    from utils.notebook.archive import read_records

    run = _open_app(browser, server["url"])
    _choose(browser, "typed text")
    box = browser.find_element(By.CSS_SELECTOR, ".dspark-typed textarea")
    box.send_keys(paragraph.replace("\n", Keys.ENTER))
    box.send_keys(Keys.TAB)  # the box sends its value when it loses the focus
    _wait(browser, lambda d: d.execute_script("return document.querySelector('img.dspark-preview').src.length") > 0)
    run.click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, ".dspark-joined pre.dspark-read")
          and not d.find_element(By.CSS_SELECTOR, ".dspark-run").get_property("disabled"))
    joined = browser.find_element(By.CSS_SELECTOR, ".dspark-joined")
    assert "read as 4 pages and joined" in joined.find_element(By.CSS_SELECTOR, "h4").text
    shown = joined.find_element(By.CSS_SELECTOR, "pre.dspark-read").get_attribute("textContent")
    assert joined.find_element(By.CSS_SELECTOR, "pre.dspark-page-text").get_attribute("textContent") == paragraph
    assert len(browser.find_elements(By.CSS_SELECTOR, "pre.dspark-speculative")) == 4

    pages = save_typed_pages(paragraph, tmp_path / "pages")
    results = tmp_path / "results.jsonl"
    subprocess.run([sys.executable, "-m", "utils.ocr", str(tmp_path / "pages"), "--out", str(results), "--quiet",
                    "--precision", "f32", "--device", "CPU", "--max-new-tokens", str(MAX_NEW_TOKENS)],
                   capture_output=True, text=True, cwd=REPO_ROOT, check=True)
    records = sorted(read_records(results), key=lambda record: record["file"])
    assert [record["file"] for record in records] == [page.name for page in pages]
    expected = joined_reading([record["text"] for record in records])
    assert shown == expected
    cer = character_error_rate([(expected, paragraph)])
    assert joined.find_element(By.CSS_SELECTOR, ".dspark-cer").text == f"{cer:.1%}"
    print(f"\nthe paragraph's 4 pages, joined, read with a CER of {cer:.1%}")


def test_bad_input_gets_a_message_and_the_app_keeps_working(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    run = _open_app(browser, server["url"])
    # The upload button opens the system file dialog through a detached <input type=file>; attach it to the
    # page instead, so that the browser can "choose" a file as a person would in that dialog.
    browser.execute_script("""
        const click = HTMLInputElement.prototype.click;
        HTMLInputElement.prototype.click = function () {
          if (this.type !== 'file') { return click.call(this); }
          this.classList.add('dspark-file-chooser');
          document.body.appendChild(this);
        };""")
    not_an_image = tmp_path / "page.png"
    not_an_image.write_bytes(b"this is not an image")
    _choose(browser, "upload")
    browser.find_element(By.CSS_SELECTOR, ".dspark-upload").click()
    _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "input.dspark-file-chooser")).send_keys(str(not_an_image))
    _wait(browser, lambda d: "not an image" in _result_text(d))
    run.click()
    _wait(browser, lambda d: not d.find_element(By.CSS_SELECTOR, ".dspark-run").get_property("disabled")
          and "error:" in _result_text(d))
    browser.find_element(By.CSS_SELECTOR, ".dspark-clear").click()
    _wait(browser, lambda d: "error:" not in _result_text(d))  # the upload is gone, and its error line with it

    prompt = browser.find_element(By.CSS_SELECTOR, ".dspark-prompt input")
    prompt.clear()
    prompt.send_keys(" ")
    run.click()
    _wait(browser, lambda d: "prompt is empty" in _result_text(d))
    tracebacks = browser.find_elements(By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.stderr']")
    assert not tracebacks, [element.text for element in tracebacks]

    prompt.clear()
    prompt.send_keys("Text Recognition:")
    run.click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "pre.dspark-speculative"))
    assert "error:" not in _result_text(browser)  # messages start so; the page's CER heading names the error rate


def test_a_draft_whose_ir_cannot_be_read_is_one_line_at_startup(broken_draft_server, browser):
    """The draft folder is read once, when the app starts: a broken IR is one line naming the file, not a panel
    that fails at the first read (the panel's own errors are tests/test_widgets.py's)."""
    from selenium.webdriver.common.by import By

    browser.get(broken_draft_server["url"])
    message = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, ".dspark-startup-error"), START_TIMEOUT).text
    assert message.startswith("error: ") and f"{DRAFT_MODEL}: OpenVINO cannot read this IR" in message
    assert message.count("\n") == 0  # one line
    assert not browser.find_elements(By.CSS_SELECTOR, ".dspark-run")
    tracebacks = browser.find_elements(By.CSS_SELECTOR, "[data-mime-type='application/vnd.jupyter.stderr']")
    assert not tracebacks, [element.text for element in tracebacks]
    assert "Traceback" in broken_draft_server["log"].read_text()


def _kernels(voila_pid: int) -> list:
    """The kernel processes Voila has started and not stopped (a stopped one can be a zombie until it is reaped,
    or gone between the listing and the look: neither is alive)."""
    import psutil

    alive = []
    for child in psutil.Process(voila_pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "ipykernel" in " ".join(child.cmdline()):
                alive.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            pass
    return alive


def test_the_kernels_of_closed_pages_are_culled(tmp_path):
    """Every page load started a kernel that never stopped (4 loads: 4 kernels, each holding its models). With the
    README's options, the cull timeout shortened, the kernels of 3 loaded and closed pages are all stopped."""
    from selenium.webdriver.common.by import By

    skip_or_fail_without(missing_browser_parts(), ci=os.environ.get("CI") == "true")
    options = [option for option in readme_voila_options() if "cull_idle_timeout" not in option
               and "cull_interval" not in option]
    assert len(options) == len(readme_voila_options()) - 2, "the README's voila command culls no kernel"
    options += [f"--MappingKernelManager.cull_idle_timeout={CULL_IDLE_TIMEOUT}",
                f"--MappingKernelManager.cull_interval={CULL_INTERVAL}"]
    default_ir_pair()
    with _voila(tmp_path, options=options) as started:
        for _ in range(3):
            driver = _chromium()
            try:
                _open_app(driver, started["url"])
                assert _kernels(started["pid"]), "a loaded page has a kernel"
                assert not driver.find_elements(By.CSS_SELECTOR, ".dspark-startup-error")
            finally:
                driver.quit()
        deadline = time.monotonic() + 3 * (CULL_IDLE_TIMEOUT + CULL_INTERVAL) + 20
        while _kernels(started["pid"]) and time.monotonic() < deadline:
            time.sleep(CULL_INTERVAL)
        assert not _kernels(started["pid"]), "kernels of closed pages are still running"
        assert "Culling 'idle' kernel" in started["log"].read_text()


@pytest.mark.parametrize("ci", [False, True])
def test_a_missing_browser_part_skips_on_a_laptop_and_fails_in_ci(ci):
    outcome = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(outcome, match="chromedriver"):
        skip_or_fail_without(["chromedriver"], ci=ci)
    skip_or_fail_without([], ci=ci)  # nothing missing: neither
