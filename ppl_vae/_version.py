"""The package version, in one place (read by the build, the package and run records)."""

#: The version of the package (``major.minor.patch``).
__version__ = "0.1.0"
