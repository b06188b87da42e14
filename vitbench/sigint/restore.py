"""Imported last in a fork server's preload list: Python's own SIGINT handler back (vitbench.sigint says why)."""

import signal

signal.signal(signal.SIGINT, signal.default_int_handler)
