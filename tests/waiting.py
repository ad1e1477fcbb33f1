"""Waiting for something another thread or process does: poll until it is so. The timeout only bounds a
broken run; it asserts no speed."""

import time


def wait_for(predicate, timeout: float = 60, interval: float = 0.05):
    """`predicate()`'s first truthy value, asked every `interval` seconds; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(interval)
