"""memloop eval package."""
