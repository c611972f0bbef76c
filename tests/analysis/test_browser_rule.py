"""The rule for the explorer's browser tests (tests/conftest.py, ``chromium``): on a developer's
machine without Chromium they skip and say why; under ``CI=true`` they fail, so a CI machine
that lost its browser cannot pass by skipping them.

Each case runs pytest itself in a subprocess, with ``NLP_TUTORIALS_CHROMIUM`` naming a file that
does not exist (no Chromium, whatever the machine has), on one browser test.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each case starts pytest in a subprocess
ROOT = Path(__file__).resolve().parents[2]
ONE_BROWSER_TEST = ("tests/analysis/test_explorer_browser.py"
                    "::test_head_view_draws_the_pickle_weights")


def run_browser_test(tmp_path, ci: str | None):
    """pytest on :data:`ONE_BROWSER_TEST` with no Chromium and ``CI`` set to ``ci`` (None:
    unset); its exit status and output."""
    env = {name: value for name, value in os.environ.items() if name != "CI"}
    env["NLP_TUTORIALS_CHROMIUM"] = str(tmp_path / "no-chromium")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if ci is not None:
        env["CI"] = ci
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", ONE_BROWSER_TEST],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    return result.returncode, result.stdout + result.stderr


def test_without_chromium_a_developer_run_skips_and_says_why(tmp_path):
    for ci in (None, "false"):
        status, output = run_browser_test(tmp_path, ci)
        assert status == 0, output
        assert "1 skipped" in output and "no Chromium found" in output, output


def test_without_chromium_a_ci_run_fails(tmp_path):
    for ci in ("true", "TRUE"):
        status, output = run_browser_test(tmp_path, ci)
        assert status == 1, output
        assert "skipped" not in output, output
        assert "under CI=true the browser tests fail rather than skip" in output, output
