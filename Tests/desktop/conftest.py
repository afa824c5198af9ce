"""The desktop tests reuse the integration tests' fixtures (real mounts through /dev/fuse, `docfs
serve`, the fault proxy): Tests/integration/conftest.py is loaded here under a name of its own,
its fixtures taken over, and its hooks run only when pytest did not load it itself (a run of
Tests/desktop alone)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

INTEGRATION = Path(__file__).resolve().parents[1] / "integration"
sys.path.insert(0, str(INTEGRATION))

_spec = importlib.util.spec_from_file_location("docfs_integration_conftest", INTEGRATION / "conftest.py")
_integration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_integration)

# Fixtures (and the helpers the tests import from here).
for _name, _value in vars(_integration).items():
    if not _name.startswith("pytest_") and not _name.startswith("__"):
        globals().setdefault(_name, _value)

_HOOKS = ("pytest_configure", "pytest_sessionfinish", "pytest_collection_modifyitems",
          "pytest_terminal_summary")


def _integration_loaded(config) -> bool:
    own = str(INTEGRATION / "conftest.py")
    return any(getattr(p, "__file__", None) == own for p in config.pluginmanager.get_plugins())


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not _integration_loaded(config):
        _integration.pytest_configure(config)


def pytest_sessionfinish(session, exitstatus):
    if not _integration_loaded(session.config):
        _integration.pytest_sessionfinish(session, exitstatus)


def pytest_collection_modifyitems(config, items):
    if not _integration_loaded(config):
        _integration.pytest_collection_modifyitems(config, items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, "rep_" + report.when, report)
