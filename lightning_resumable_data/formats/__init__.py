"""Readers of the data formats users already have (issue 29)."""
