"""Readers of the on-disk formats of other data libraries, each as a shard reader."""
