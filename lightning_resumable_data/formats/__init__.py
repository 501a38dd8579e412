"""Native readers of the formats users already have (WebDataset, MDS, litdata)."""
