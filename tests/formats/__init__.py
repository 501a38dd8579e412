"""Tests of the native format readers, against corpora written by the peers' own writers."""
