"""The HTTP layer: ASGI helpers, error envelope, auth, faults, validation, dispatch, presigned files,
docs and the access log. :mod:`emulator.app` wires them; nothing here holds a rule of the API."""
