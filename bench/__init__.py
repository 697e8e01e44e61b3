"""Benchmarks (`sluicegate bench NAME`): each prints a table, and one JSON object with --json."""
