"""Optimization passes: one per file, each `pass(module) -> bool` (whether it changed anything)."""
