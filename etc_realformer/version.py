"""The package's version (PEP 440), read by the build (pyproject.toml) and
exported as `etc_realformer.__version__`."""

__version__ = "0.9.0"
