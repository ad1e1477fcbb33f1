"""The console in a real browser (Debian's chromium through chromium-driver): the operator's main paths.

scripts/screenshots.py takes pictures of the main pages with the same browser and world.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from django.urls import reverse

from fermix_site.conf import conf
from memory.models import Memory
from resources.models import Resource, ResourceRevision
from tests.admin.conftest import HOSTILE, soul_write
from tests.memory_factories import fact
from tests.personas import say

CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1366,900")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser():
    if not (os.access(CHROMIUM, os.X_OK) and os.access(DRIVER, os.X_OK)):
        if os.environ.get("CI"):
            pytest.fail("chromium and chromium-driver are not installed: scripts/test-setup.sh installs them")
        pytest.skip("chromium and chromium-driver are not installed (scripts/test-setup.sh installs them as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="fermix-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _replaced(element) -> bool:
    """Whether the page that held `element` is gone. Chromium answers for an element of the page being
    replaced either "stale" or, in the middle of the navigation, "does not belong to the document"."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


class Console:
    """The operator at the browser: open pages, fill forms, read what is shown."""

    def __init__(self, driver, base_url):
        self.driver, self.base_url = driver, base_url

    def open(self, path):
        self.driver.get(self.base_url + path)

    def find(self, selector):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, selector)

    def find_all(self, selector):
        from selenium.webdriver.common.by import By

        return self.driver.find_elements(By.CSS_SELECTOR, selector)

    def text(self):
        return self.find("body").text

    def click(self, selector):
        """Click something that loads a new page, and wait until the new page is there."""
        from selenium.webdriver.support.ui import WebDriverWait

        old = self.find("html")
        self.find(selector).click()
        WebDriverWait(self.driver, 15).until(lambda driver: _replaced(old))

    def log_in(self, username="operator", password="operator-password-1"):
        self.open(reverse("admin:login"))
        self.find("#id_username").send_keys(username)
        self.find("#id_password").send_keys(password)
        self.click("input[type=submit]")
        assert self.find("#logout-form")

    def xss_fired(self):
        return self.driver.execute_script("return window.__xss !== undefined")


@pytest.fixture
def operator(browser, live_server, staff):
    console = Console(browser, live_server.url)
    console.log_in()
    return console


def test_log_in_and_search_messages(operator, world):
    say("She runs along the river every morning")
    say("The weather is grey today", conversation="discord:5")
    operator.open(reverse("admin:memory_message_changelist"))
    operator.find("#searchbar").send_keys("running river")
    operator.click("#changelist-search input[type=submit]")
    results = operator.find("#result_list").text
    assert "She runs along the river" in results and "I run every morning" in results
    assert "weather" not in results


def test_archive_and_restore_a_memory(operator, world):
    user_md = conf.memory_dir("main") / "USER.md"
    assert "prefers green tea" in user_md.read_text()
    operator.open(reverse("admin:memory_memory_changelist"))
    operator.find(f"input[name=_selected_action][value='{world.fact.id}']").click()
    from selenium.webdriver.support.ui import Select

    Select(operator.find("select[name=action]")).select_by_value("archive_selected")
    operator.click("button[name=index]")
    assert "prefers green tea" in operator.find("table.fermix-table").text
    operator.find("#id_reason").send_keys("the owner switched to coffee")
    operator.click("#confirm-archive")
    assert "Archived 1 memory row(s)" in operator.text()
    row = Memory.objects.get(pk=world.fact.id)
    assert row.archived_at is not None and row.archive_reason == "the owner switched to coffee"
    assert "prefers green tea" not in user_md.read_text()

    operator.open(reverse("admin:memory_memory_change", args=[world.fact.id]))
    operator.click(f"a[href='{reverse('admin:memory_memory_restore', args=[world.fact.id])}']")
    operator.click("#confirm-restore")
    assert f"Restored memory row #{world.fact.id}" in operator.text()
    assert Memory.objects.get(pk=world.fact.id).archived_at is None
    assert "prefers green tea" in user_md.read_text()
    assert "archive" in operator.text() and "restore" in operator.text()  # the row's history


def test_open_a_diff_between_two_revisions(operator, world):
    operator.open(reverse("admin:resources_resource_change", args=[world.soul.pk]))
    operator.find("input[name=a][value='1']").click()
    operator.find("input[name=b][value='2']").click()
    operator.click("#compare")
    assert [e.text for e in operator.find_all("#diff ins")] == [", brief and exact"]
    assert "Be kind and brief." in operator.find("#diff tr.delete").text
    assert "Be kind, brief and exact." in operator.find("#diff tr.insert").text


def test_roll_back_with_a_preview_and_a_confirmation(operator, world):
    operator.open(reverse("admin:resources_resource_change", args=[world.soul.pk]))
    operator.click("a.rollback-link")
    assert operator.find_all("#diff tr.delete") and operator.find_all("#diff tr.insert")
    assert ResourceRevision.objects.filter(resource_type="soul_md").count() == 2
    operator.click("#confirm-rollback")
    assert "Rolled back SOUL.md to revision 1: new revision 3" in operator.text()
    newest = ResourceRevision.objects.filter(resource_type="soul_md").order_by("-revision").first()
    assert (newest.revision, newest.mutation_source) == (3, "rollback")
    assert Path(world.soul.resource_path).read_text() == "# Soul\n\nBe kind and brief.\n"


def test_user_md_rollback_preview_shows_the_caveat(operator, world):
    fact("drink", "prefers coffee now", "preference", minute=9)
    from memory.prompt_files import prompt_files_rebuild

    prompt_files_rebuild(agent_id="main")
    user_md = Resource.objects.get(resource_type="user_md")
    operator.open(reverse("admin:resources_resource_rollback", args=[user_md.pk, 1]))
    assert "rebuilt from promoted memory rows" in operator.find("#caveat").text


def test_hostile_memory_values_and_soul_md_do_nothing(operator, world):
    row = fact("evil", HOSTILE, "identity", minute=40)
    soul_write("# Soul\n\n" + HOSTILE + "\n")
    soul = Resource.objects.get(resource_type="soul_md")
    pages = [
        reverse("admin:memory_memory_changelist"),
        reverse("admin:memory_memory_change", args=[row.id]),
        reverse("admin:resources_resource_revision", args=[soul.pk, soul.current_revision]),
        reverse("admin:resources_resource_diff", args=[soul.pk]) + f"?a=2&b={soul.current_revision}",
    ]
    for page in pages:
        operator.open(page)
        assert not operator.xss_fired(), page
        assert not operator.find_all("script:not([src])") or all(
            "__xss" not in s.get_attribute("innerHTML") for s in operator.find_all("script"))
        assert not [img for img in operator.find_all("img") if img.get_attribute("onerror")]
    operator.open(pages[2])
    assert "<script>window.__xss = 1</script>" in operator.find("#raw").text  # shown as text
