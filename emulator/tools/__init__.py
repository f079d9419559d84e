"""Tools around the emulator: scenarios, recording and replay, the COVERAGE.md generator, the server
composition, an in-process test server, and the TEST-ONLY contract defects."""
