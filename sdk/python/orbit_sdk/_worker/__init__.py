"""The worker's roles, one module each (``Worker`` in ``orbit_sdk/worker.py`` composes them):
``session``, ``slots`` (the producer), ``execute``, ``report`` (the completer), ``heartbeat``."""
