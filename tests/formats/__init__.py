"""Readers of peers' formats against corpora written by the peers' own writers."""
