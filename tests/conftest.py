"""Set-up shared by every test directory.

Jobs built in integration and compose tests carry functions and classes of these test packages to
TaskManagers and Spark workers, which cannot import this repository's tests (their working
directory and path are their own): cloudpickle sends those modules' code by value. Registering the
packages covers every module in them (helpers such as tests/integration/jobs.py too). Unit tests
unpickle in this process, where by-reference is what they check, so tests.unit is not registered."""
from __future__ import annotations

import cloudpickle

import tests.compose
import tests.integration

for _package in (tests.integration, tests.compose):
    cloudpickle.register_pickle_by_value(_package)
