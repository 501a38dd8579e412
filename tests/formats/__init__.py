"""Tests of the readers of other libraries' data formats."""
