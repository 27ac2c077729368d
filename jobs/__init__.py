"""memloop jobs package."""
