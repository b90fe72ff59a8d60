"""The ``pivotgym`` command line: the top layer of the package, which no library module imports.

One module per verb group (:mod:`~pivotgym.cli.plugins`, :mod:`~pivotgym.cli.env`, :mod:`~pivotgym.cli.eval`,
:mod:`~pivotgym.cli.experiment`, :mod:`~pivotgym.cli.data`, :mod:`~pivotgym.cli.train`,
:mod:`~pivotgym.cli.model`, :mod:`~pivotgym.cli.pivot`, :mod:`~pivotgym.cli.verify`), each with a
``register(app)``; shared output and error helpers in :mod:`~pivotgym.cli.output`; the app and ``main`` in
:mod:`~pivotgym.cli.app`. ``python -m pivotgym.cli`` runs the same ``main`` as the console script.
"""

from pivotgym.cli.app import app, main
from pivotgym.cli.output import CLIError, emit_json, table

__all__ = ["CLIError", "app", "emit_json", "main", "table"]
