"""Tests of the readers of other libraries' formats."""
