"""Every write the arena makes goes through a function in this package."""
