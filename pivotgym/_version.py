"""The package version, in a module of its own so that low layers (the plugin manager) can read it without
importing the ``pivotgym`` facade."""

__version__ = "0.1.0"
