"""The ``trio-batch`` command line: ``run``, ``serve`` and the commands that inspect jobs.

The package's modules: ``_main`` (the parser and the inspecting commands), ``_run`` (``run``),
``_serve`` (``serve``'s options and start-up), ``_options`` (options that ``run`` and ``serve``
share, and the types of numeric options), ``_input`` (batch files), ``_console`` (tables and
progress) and ``_common`` (the store, errors and output the commands share).
"""

from ._main import main

__all__ = ["main"]
