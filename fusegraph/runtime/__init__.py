"""Executables, input validation, and (later) the compiled-file format."""
