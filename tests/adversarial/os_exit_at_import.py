"""Ends the process at import without running any cleanup or writing any report."""

import os

os._exit(0)
