"""The console in a real browser against a real gateway (Redis-backed, prefix router over two fake replicas): log
in, create a tenant and a key in the browser, drive that key over its rpm limit with the official openai client,
then find the refusal on the refusals page and the usage chart moved.

With SLUICEGATE_CONSOLE_SCREENSHOTS=<folder> (docs/img for the docs), each page is saved as console-<page>.png."""

from __future__ import annotations

import os
import pathlib

import openai
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.gateway.admin_console.browser import chromium
from tests.gateway.conftest import ADMIN_TOKEN, REDIS_URL, Admin, gateway_config, serve_gateway
from tests.gateway.fake_upstream import FakeUpstream
from tests.gateway.servers import ThreadServer

TENANT_RPM = 3
WAIT_S = 30.0  # only detects a hang: every wait polls for a state


@pytest.fixture
def gateway(fake, tokenizer_dir, clean_redis):
    second = FakeUpstream()
    with ThreadServer(second.app) as second_server:
        config = gateway_config([], tokenizer_dir, REDIS_URL, router="gateway.routing.factory:build_router")
        config["models"]["tiny"]["replicas"] = [
            {"name": "replica-a", "url": fake.url, "kv_events": False},
            {"name": "replica-b", "url": second_server.url, "kv_events": False},
        ]
        config["models"]["tiny"]["health"] = {"interval_s": 0.2}
        with serve_gateway(config) as gw:
            yield gw


def _screenshot(driver, name: str) -> None:
    folder = os.environ.get("SLUICEGATE_CONSOLE_SCREENSHOTS")
    if not folder:
        return
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, max(700, min(int(height) + 40, 2400)))
    pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(pathlib.Path(folder) / f"console-{name}.png"))
    driver.set_window_size(1400, 1000)


def _fill(driver, field_id: str, value: str) -> None:
    element = driver.find_element(By.ID, field_id)
    element.clear()
    element.send_keys(value)


def _latest(driver, chart_id: str) -> float:
    return float(driver.find_element(By.ID, chart_id).get_attribute("data-latest"))


def _peak(driver, chart_id: str) -> float:
    return float(driver.find_element(By.ID, chart_id).get_attribute("data-peak"))


def test_operator_creates_a_tenant_and_key_and_sees_its_refusals_and_usage(gateway):
    admin = Admin(gateway.url)
    for other in ("acme-prod", "acme-staging", "beta-labs"):  # a list worth a screenshot
        admin.tenant(other, rpm=600, input_tpm=200_000, output_tpm=50_000, daily_tokens=5_000_000)
    with chromium() as driver:
        wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.2)
        driver.get(gateway.url + "/admin/")
        assert "/admin/login" in driver.current_url
        _screenshot(driver, "login")

        _fill(driver, "token", "not-the-token")
        driver.find_element(By.ID, "login").click()
        # a click starts a navigation: wait for the new page's element rather than reading the old page
        error = wait.until(lambda d: d.find_elements(By.ID, "login-error"))[0]
        assert error.text == "That admin token is not valid."

        _fill(driver, "token", ADMIN_TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(lambda d: d.current_url.endswith("/admin/tenants"))

        _fill(driver, "f-id", "browser-co")
        _fill(driver, "f-rpm", str(TENANT_RPM))
        _fill(driver, "f-daily_tokens", "20000")
        _fill(driver, "f-monthly_tokens", "400000")
        driver.find_element(By.ID, "create").click()
        wait.until(lambda d: d.current_url.endswith("/admin/tenants/browser-co?done=created"))
        assert wait.until(lambda d: d.find_elements(By.ID, "tenant-id"))[0].text == "browser-co"
        assert _latest(driver, "chart-rate-1") == 0.0  # the first sample: nothing yet
        assert admin.http.get("/tenants/browser-co").json()["rpm"] == TENANT_RPM

        _fill(driver, "k-name", "load-test")
        driver.find_element(By.ID, "issue-key").click()
        secret = wait.until(lambda d: d.find_element(By.ID, "secret")).text
        assert secret.startswith("sk-sg-")
        _screenshot(driver, "key")

        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0, timeout=20)
        answered, refused = 0, None
        for _ in range(TENANT_RPM + 2):
            try:
                client.chat.completions.create(
                    model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hello from the browser test"}]
                )
                answered += 1
            except openai.RateLimitError as exc:
                refused = exc
        assert answered == TENANT_RPM and refused is not None and refused.code == "rate_limit_exceeded"

        driver.find_element(By.ID, "nav-refusals").click()
        rows = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#refusals tbody tr"))
        mine = [row.text for row in rows if "browser-co" in row.text]
        assert len(mine) == 2  # the store's refusal and the local pre-check's, both named
        assert all("429" in text and "rate_limit_exceeded" in text and "load-test" in text for text in mine)
        assert "requests per minute (rpm)" in mine[0]
        _screenshot(driver, "refusals")

        driver.get(gateway.url + "/admin/tenants/browser-co")

        def usage_moved(d) -> bool:
            d.refresh()  # a new sample: the rate since the one before, once the answers are settled
            settled = d.find_element(By.ID, "today-requests").text == str(TENANT_RPM)
            return settled and _peak(d, "chart-rate-1") > 0 and _peak(d, "chart-rate-2") > 0

        wait.until(usage_moved)
        assert _peak(driver, "chart-rate-1") <= TENANT_RPM  # use in a minute: never scaled up past what was sent
        assert _latest(driver, "chart-budget-daily") < 20000  # the daily budget burned down
        _screenshot(driver, "tenant")

        driver.find_element(By.ID, "nav-tenants").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#tenants tbody tr"))
        assert "browser-co" in driver.find_element(By.ID, "tenants").text
        _screenshot(driver, "tenants")

        driver.find_element(By.ID, "nav-replicas").click()
        wait.until(lambda d: d.find_elements(By.ID, "replica-replica-b"))
        assert "replica-a" in driver.find_element(By.ID, "replica-replica-a").text
        _screenshot(driver, "replicas")

        driver.find_element(By.ID, "logout").click()
        wait.until(lambda d: "/admin/login" in d.current_url)
        driver.get(gateway.url + "/admin/tenants")
        assert "/admin/login" in driver.current_url


def _accept_confirm(driver, wait) -> None:
    """Forms that destroy something ask first (console.js): the operator answers OK."""
    wait.until(_alert).accept()


def _alert(driver):
    try:
        return driver.switch_to.alert
    except Exception:  # noqa: BLE001 - selenium's NoAlertPresentException: not yet
        return None


def _key_row(driver, wait, key_id: str):
    return wait.until(lambda d: d.find_elements(By.ID, f"key-{key_id}"))[0]


def test_operator_manages_keys_tenants_and_replicas_in_the_browser(gateway):
    """The admin tasks of docs/operations.md beyond the first test's: per-key limits, rotation, revocation and
    deletion of keys, editing and deleting a tenant, draining a replica; each checked through the admin API and,
    for keys, with the official openai client."""
    admin = Admin(gateway.url)
    admin.tenant("ops-co", rpm=100)
    models = lambda secret: openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0).models.list()  # noqa: E731
    with chromium() as driver:
        wait = WebDriverWait(driver, WAIT_S, poll_frequency=0.2)
        driver.get(gateway.url + "/admin/login")
        _fill(driver, "token", ADMIN_TOKEN)
        driver.find_element(By.ID, "login").click()
        wait.until(lambda d: d.current_url.endswith("/admin/tenants"))

        driver.get(gateway.url + "/admin/tenants/ops-co")
        _fill(driver, "k-name", "rotating")
        driver.find_element(By.ID, "issue-key").click()
        first_secret = wait.until(lambda d: d.find_elements(By.ID, "secret"))[0].text
        (first,) = admin.http.get("/tenants/ops-co/keys").json()["data"]

        driver.get(gateway.url + "/admin/tenants/ops-co")
        row = _key_row(driver, wait, first["key_id"])
        rpm = row.find_element(By.NAME, "rpm")
        rpm.clear()
        rpm.send_keys("42")
        row.find_element(By.CSS_SELECTOR, "button.limits").click()
        wait.until(lambda d: d.current_url.endswith("?done=limits"))
        assert admin.http.get("/tenants/ops-co/keys").json()["data"][0]["rpm"] == 42

        row = _key_row(driver, wait, first["key_id"])
        grace = row.find_element(By.NAME, "grace_s")
        grace.clear()
        grace.send_keys("0")
        row.find_element(By.CSS_SELECTOR, "button.rotate").click()
        second_secret = wait.until(lambda d: d.find_elements(By.ID, "secret"))[0].text
        assert second_secret != first_secret
        assert [m.id for m in models(second_secret)] == ["tiny"]
        with pytest.raises(openai.AuthenticationError):
            models(first_secret)  # grace 0: the old key ended with the rotation
        second = next(
            k for k in admin.http.get("/tenants/ops-co/keys").json()["data"] if k["key_id"] != first["key_id"]
        )
        assert second["rpm"] == 42  # the replacement keeps the old key's limits

        driver.get(gateway.url + "/admin/tenants/ops-co")
        _key_row(driver, wait, second["key_id"]).find_element(By.CSS_SELECTOR, "button.revoke").click()
        _accept_confirm(driver, wait)
        wait.until(lambda d: d.current_url.endswith("?done=revoked"))
        with pytest.raises(openai.AuthenticationError):
            models(second_secret)
        _key_row(driver, wait, second["key_id"]).find_element(By.CSS_SELECTOR, "button.delete").click()
        _accept_confirm(driver, wait)
        wait.until(lambda d: d.current_url.endswith("?done=deleted"))
        remaining = [k["key_id"] for k in admin.http.get("/tenants/ops-co/keys").json()["data"]]
        assert second["key_id"] not in remaining

        _fill(driver, "f-rpm", "250")
        driver.find_element(By.ID, "save").click()
        wait.until(lambda d: d.current_url.endswith("?done=saved"))
        assert admin.http.get("/tenants/ops-co").json()["rpm"] == 250

        driver.find_element(By.ID, "nav-replicas").click()
        row = wait.until(lambda d: d.find_elements(By.ID, "replica-replica-b"))[0]
        row.find_element(By.CSS_SELECTOR, "button.drain").click()
        _accept_confirm(driver, wait)
        wait.until(lambda d: d.current_url.endswith("?done=drained"))
        assert "draining" in wait.until(lambda d: d.find_elements(By.ID, "replica-replica-b"))[0].text
        pool = admin.http.get("/models/tiny/replicas").json()["data"]
        assert {r["name"]: r["state"] for r in pool}["replica-b"] == "draining"

        driver.get(gateway.url + "/admin/tenants/ops-co")
        wait.until(lambda d: d.find_elements(By.ID, "delete-tenant"))[0].find_element(By.TAG_NAME, "button").click()
        _accept_confirm(driver, wait)
        wait.until(lambda d: d.current_url.endswith("/admin/tenants?done=deleted"))
        assert admin.http.get("/tenants/ops-co").status_code == 404
