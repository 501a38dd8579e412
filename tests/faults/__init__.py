"""The fault campaign: kill real DDP training runs, resume them, and prove nothing is lost."""
