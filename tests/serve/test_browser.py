"""The planner page in a real browser (headless Chromium): it loads, follows an input change
from 8 to 1,024 GPUs to the CLI's own answer, puts a bad input's error line next to its field,
and its screenshot has drawn plots and no horizontal overflow.

TRAINBUDGET_SCREENSHOT=path keeps the 1,024-GPU screenshot (docs/img/serve.png is made so)."""

import json
import os
from pathlib import Path

import browser
import pytest
from png import decode

import trainbudget.api as tb
from clirun import cli, cli_json
from trainbudget.core.errors import SpecError

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))

WAIT_SECONDS = 60
"""Longest wait for the page to show an answer: loaded machines run CI's browser slowly."""
QUESTION = ("--model", "llama-3-8b", "--tokens", "1T")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser.start(tmp_path_factory.mktemp("chromium-profile"))
    driver.wait = lambda check: WebDriverWait(driver, WAIT_SECONDS).until(lambda d: check())
    yield driver
    driver.quit()


def text(page, css: str) -> str:
    return page.execute_script(f"return document.querySelector({css!r}).textContent")


def type_into(page, name: str, value: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    field = page.find_element(By.NAME, name)
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(value)


def shows(page, expected: dict) -> bool:
    """The page's headline is `expected`'s answer, and the page is idle."""
    ready = page.execute_script("return document.body.dataset.state") == "ready"
    return ready and text(page, "#plan") == expected["plan"]["description"]


def test_gpus_from_8_to_1024_shows_the_cli_estimate(page, base_url, capsys):
    with capsys.disabled():  # CI's log then shows that the browser tests ran, and in what
        print(f"\nbrowser tests: headless Chromium {page.capabilities['browserVersion']}")
    page.get(f"{base_url}/?model=llama-3-8b&tokens=1T&gpus=8")
    eight = cli_json("estimate", *QUESTION, "--gpus", "8")
    page.wait(lambda: shows(page, eight))
    assert text(page, "#days") == f"{eight['time_days']:,.2f} days"

    type_into(page, "gpus", "1024")
    big = cli_json("estimate", *QUESTION, "--gpus", "1024")
    page.wait(lambda: shows(page, big))
    assert text(page, "#days") == f"{big['time_days']:,.2f} days"
    days = page.execute_script("return document.getElementById('days').dataset.value")
    assert float(days) == big["time_days"]  # the JSON number itself, not a rounding of it
    assert text(page, "#gpu-hours") == f"{big['gpu_hours']:,.0f}"
    rows = page.execute_script(
        "return [...document.querySelectorAll('#plans tbody tr td:nth-child(2)')]"
        ".map(td => td.firstChild.textContent)"
    )
    assert rows == [p["plan"]["description"] for p in big["plans"]]
    assert "gpus=1024" in page.current_url  # the question is in the address, to share


def test_a_bad_input_shows_the_one_line_error_next_to_its_field(page, base_url):
    page.get(f"{base_url}/?model=llama-3-8b&tokens=1T&gpus=8")
    page.wait(lambda: page.execute_script("return document.body.dataset.state") == "ready")
    type_into(page, "gpus", "0")
    with pytest.raises(SpecError) as err:
        tb.estimate("llama-3-8b", tokens="1T", gpus="0")
    page.wait(lambda: text(page, '.error[data-for="gpus"]') == str(err.value))
    assert page.execute_script(
        "return document.querySelector('[name=gpus]').getAttribute('aria-invalid')"
    ) == "true"  # fmt: skip
    assert text(page, "#top-error") == ""  # next to its field, not at the top

    type_into(page, "gpus", "8")  # the server kept serving: a good input answers again
    page.wait(lambda: shows(page, cli_json("estimate", *QUESTION, "--gpus", "8")))
    assert text(page, '.error[data-for="gpus"]') == ""


def plot_is_drawn(page, element_id: str) -> None:
    """The plot's region of a screenshot holds real drawing: many non-white pixels and several
    colours (the stacked parts), not a blank or flat box."""
    from selenium.webdriver.common.by import By

    plot = page.find_element(By.ID, element_id)
    page.execute_script("arguments[0].scrollIntoView()", plot)
    shot = decode(plot.screenshot_as_png)  # the element's region of a page screenshot
    assert shot.width > 200 and shot.height > 50, (element_id, shot.width, shot.height)
    pixels = [shot.rgb(x, y) for y in range(0, shot.height, 2) for x in range(0, shot.width, 2)]
    drawn = [p for p in pixels if p != (255, 255, 255)]
    assert len(drawn) > 0.05 * len(pixels), element_id
    assert len(set(drawn)) >= 4, element_id


@pytest.mark.parametrize("width", [1280, 700])
def test_the_screenshot_has_drawn_plots_and_no_horizontal_overflow(page, base_url, width):
    page.set_window_size(width, 1600)  # tall enough that the plots are on the first screen
    page.get(f"{base_url}/?model=llama-3-70b&tokens=15T&gpus=1024&price_per_gpu_hour=2.5")
    big = cli_json("estimate", "--model", "llama-3-70b", "--tokens", "15T", "--gpus", "1024")
    page.wait(lambda: shows(page, big))
    wide, window = page.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert wide <= window, f"the page is {wide} px wide in a {window} px window"
    keep = os.environ.get("TRAINBUDGET_SCREENSHOT")
    if keep and width == 1280:
        Path(keep).write_bytes(page.get_screenshot_as_png())
    shot = decode(page.get_screenshot_as_png())
    # the screenshot is the viewport: the page's width plus the vertical scroll bar's
    assert shot.width == round(page.execute_script("return innerWidth * devicePixelRatio"))
    for plot in ("memory-plot", "step-plot"):
        plot_is_drawn(page, plot)


def test_a_pasted_config_json_is_the_model(page, base_url):
    config = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
              "num_hidden_layers": 8, "num_attention_heads": 16, "vocab_size": 32000,
              "max_position_embeddings": 2048}  # fmt: skip
    page.get(f"{base_url}/?model=llama-3-8b&tokens=10B&gpus=4")
    page.wait(lambda: page.execute_script("return document.body.dataset.state") == "ready")
    type_into(page, "config", json.dumps(config))
    expected = tb.estimate(config, tokens="10B", gpus="4").to_json()
    page.wait(lambda: shows(page, expected))
    assert text(page, "#days") == f"{expected['time_days']:,.2f} days"
    assert text(page, '.error[data-for="config"]') == ""


def test_an_engine_that_cannot_carry_the_plan_says_why_on_the_page(page, base_url):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    # at 16K tokens a sequence the best plan on 8 GPUs uses context parallelism (dp4 cp2)
    page.get(f"{base_url}/?model=llama-3-8b&tokens=1T&gpus=8&seq_len=16384")
    long_question = (*QUESTION, "--gpus", "8", "--seq-len", "16384")
    page.wait(lambda: shows(page, cli_json("estimate", *long_question)))
    row = page.find_element(By.CSS_SELECTOR, '#plans tr[data-rank="0"]')
    Select(row.find_element(By.CSS_SELECTOR, "select.engine")).select_by_value("deepspeed")
    row.find_element(By.CSS_SELECTOR, "button.emit").click()
    code, _, err = cli("plan", *long_question, "--emit", "deepspeed")
    assert code == 2  # the best plan uses context parallelism, which DeepSpeed has not
    page.wait(lambda: "trainbudget plan: error: " + text(page, "#top-error") == err.strip())
    assert page.execute_script("return document.body.dataset.state") == "ready"  # not stale


def test_copy_as_cli_command_copies_the_plans_command(page, base_url):
    from selenium.webdriver.common.by import By

    page.get(f"{base_url}/?model=llama-3-8b&tokens=1T&gpus=8")
    page.wait(lambda: shows(page, cli_json("estimate", *QUESTION, "--gpus", "8")))
    page.execute_cdp_cmd(  # let the page write the clipboard and this test read it back
        "Browser.grantPermissions",
        {"origin": base_url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
    )
    row = page.find_element(By.CSS_SELECTOR, '#plans tr[data-rank="1"]')
    button = row.find_element(By.CSS_SELECTOR, "button.copy")
    button.click()
    page.wait(lambda: button.text == "copied")
    copied = page.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], e => arguments[0]('failed: ' + e))"
    )
    assert copied == row.find_element(By.CSS_SELECTOR, "code.cmd").text
    assert copied.startswith("trainbudget estimate --model llama-3-8b --gpus 8 --tokens 1T --dp")
