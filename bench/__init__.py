"""The emulator's benchmark (``make bench`` / ``python -m bench``); see BENCHMARKS.md.

Every number is measured in one run on this machine, each against a ceiling: a bare Starlette app
on uvicorn with the same settings, serving the emulator's own response bytes.
"""
