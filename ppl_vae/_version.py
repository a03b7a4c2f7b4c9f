"""The package version, in one place (read by the build, the package and run records)."""

__version__ = "0.1.0"
