"""memloop bench package."""
